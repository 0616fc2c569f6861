"""Which module runs each layer kind in the authors' attention."""

from __future__ import annotations

from torch import nn

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig


def build_authors_mechanism(kind: str, cfg: ModelConfig) -> nn.Module:
    """The position mechanism of a layer of ``kind`` in an authors' model: RoPE's index (``rope``),
    ALiBi (``alibi``, the zoo's module: the GRAPE authors' slopes and bias are the same), FoX's forget
    gates (``fox``), GRAPE-M's contextual phases (``grape-m``), GRAPE-A's gated rates (``grape-a``),
    GRAPE-AP's path potentials (``grape-ap``).

    >>> cfg = ModelConfig(family="authors", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
    ...                   layer_mechanisms=["alibi"])
    >>> type(build_authors_mechanism("alibi", cfg)).__name__
    'AlibiPositions'
    """
    from repo_lens.model.alibi import AlibiPositions
    from repo_lens.model.authors.forget_gates import ForgetGates
    from repo_lens.model.authors.gated_additive import GatedRates
    from repo_lens.model.authors.path_potentials import PathPotentials
    from repo_lens.model.authors.phases import ContextPhases
    from repo_lens.model.positions import ConstantPositions, IntegerPositions

    modules = {"rope": IntegerPositions, "nope": ConstantPositions, "alibi": AlibiPositions, "fox": ForgetGates,
               "grape-m": ContextPhases, "grape-a": GatedRates, "grape-ap": PathPotentials}
    if kind not in modules:
        raise CheckpointError(f"layer kind {kind!r} has no module in the authors' attention; it runs {sorted(modules)}")
    return modules[kind](cfg)
