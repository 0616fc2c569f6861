"""``ablated_positions``: the positions every layer uses with an ablation applied (as ``Trace.positions``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from repo_lens.capture import position_hook_names
from repo_lens.interventions.ablate import edit_hooks
from repo_lens.interventions.batch import as_single
from repo_lens.interventions.modes import parse_mode
from repo_lens.interventions.selection import head_mask, select_sites
from repo_lens.interventions.tokens import token_mask
from repo_lens.validation import check_int


def ablated_positions(lens: Any, inputs: Any, *, mode: str | tuple, layers: int | Iterable[int] | None = None,
                      heads: int | Iterable[int] | None = None, reference: Any = None, seed: int = 0,
                      tokens: Any = None) -> np.ndarray:
    """float32 (n_layers, n_heads, tokens): what ``lens.trace(inputs).positions`` would hold with the
    ablation of :func:`repo_lens.interventions.ablate` applied (later layers see the earlier layers'
    change; CoPE / GRAPE-AP layers as seen from the last token, as in a trace).

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> ablated_positions(lens, "a needle", mode="integer", layers=[2], heads=[1])[2, 1].tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    """
    parsed, seed = parse_mode(mode), check_int(seed, "seed", minimum=0)
    batch = as_single(lens, inputs, "inputs")
    sites = select_sites(lens.model, layers)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    hooks = edit_hooks(lens, batch.ids.shape[1], batch.lengths, parsed, sites, head_mask(lens.model, heads),
                       inputs if reference is None else reference, seed, selected)
    seen: dict[int, torch.Tensor] = {}

    def keep(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> None:
            seen[layer] = value.detach().float()

        return hook

    hooks += [(name, keep(layer)) for layer, name in enumerate(position_hook_names(lens.model))]
    with torch.no_grad():
        lens.model.run_with_hooks(batch.ids, fwd_hooks=hooks)
    return torch.stack([seen[layer][0] for layer in range(len(seen))]).cpu().numpy().astype(np.float32)
