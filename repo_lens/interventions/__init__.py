"""Causal studies of positions: ablate, interpolate and patch the positions of layers and heads.

``ablate`` replaces the positions of some layers and heads in one forward pass (by a mode: ``Integer()``,
``Constant()``, ``Mean()``, ``Shuffle()``, the RePo authors' interpolation ``Interpolate(p=...)``, …);
``ablation_grid`` ablates one layer, head or token at a time, batched; ``patch`` writes a clean
prompt's positions into a corrupted run one grid cell at a time (layer, head or token), batched and
started from the corrupted run's cached residual stream; ``attribute`` estimates the same grid from
one forward and one backward pass. Every learned mechanism goes through one code path: the registry
(``repo_lens.model.registry.position_edit``) says which hook holds a layer's positions and what
"integer" and "constant" mean for it. The generic Hugging Face lens (``repo_lens.hf.load_hf``) takes the
same calls on the position_ids of its rotary embedding, per layer (no per-head edits). See
[How to edit and patch positions][interventions-how-to].

Example:
    >>> from repo_lens import interventions
    >>> from repo_lens.interventions import Constant, GridOptions
    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
    >>> metric = interventions.logit_difference(ord("t"), ord("d"))
    >>> interventions.ablate(lens, "the cat sat", mode=Constant(), metric=metric).shape
    (1,)
    >>> grid = interventions.patch(lens, "the cat sat", "the dog sat", metric, grid="layer",
    ...                            options=GridOptions(progress=False))
    >>> grid.values.shape
    (4,)
"""

from __future__ import annotations

from repo_lens.interventions.ablation import ablate, ablated_positions, ablation_grid
from repo_lens.interventions.edit_targets import Site, select_sites
from repo_lens.interventions.metrics import (GRIDS, InterventionGrid, answer_logprob, logit_difference, metric_values,
                                             niah_exact_match, span_loss)
from repo_lens.interventions.modes import (MODES, Affine, Constant, Integer, Interpolate, Mean, Mode, Random, Rank,
                                           Scaled, Shift, Shuffle, Stretch, Window, parse_mode)
from repo_lens.interventions.options import GridOptions
from repo_lens.interventions.patching import attribute, patch

__all__ = ["GRIDS", "MODES", "Affine", "Constant", "GridOptions", "Integer", "Interpolate", "InterventionGrid", "Mean",
           "Mode", "Random", "Rank", "Scaled", "Shift", "Shuffle", "Site", "Stretch", "Window", "ablate",
           "ablated_positions", "ablation_grid", "answer_logprob", "attribute", "logit_difference", "metric_values",
           "niah_exact_match", "parse_mode", "patch", "select_sites", "span_loss"]
