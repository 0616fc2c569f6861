"""Lens: a hookable model with its tokenizer, and the ``trace`` entry point."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.capture import capture_positions
from repo_lens.errors import InputError
from repo_lens.inputs import check_text, token_ids
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.transformer import LensModel
from repo_lens.trace import Trace


class Lens:
    """A loaded model (``model``: a HookedRootModule) and its tokenizer.

    Example:
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=3, n_heads=4, d_mlp=64,
        ...                   layer_mechanisms=["rope", "repo", "repo"])
        >>> lens = Lens(LensModel(cfg), ByteTokenizer(), {"name": "random"})
        >>> t = lens.trace("hello")
        >>> t.positions.shape, t.layer_kinds
        ((3, 4, 5), ['rope', 'repo', 'repo'])
    """

    def __init__(self, model: LensModel, tokenizer: Any, meta: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.meta = dict(meta or {})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int:
        return int(self.model.cfg.max_position_embeddings)

    def encode(self, text: str) -> list[int]:
        check_text(text, self.tokenizer is not None)
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.encode(text)
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def display_tokens(self, ids: Sequence[int]) -> list[str]:
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.display_tokens(ids)
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return self.tokenizer.batch_decode([[int(i)] for i in ids])

    def trace(self, inputs: Any, *, truncate: bool = False, allow_beyond_context: bool = False,
              progress: bool = True) -> Trace | list[Trace]:
        """Positions of every layer and head for a text, a sequence of token ids, or a list of texts.

        Too long input raises InputError unless ``truncate=True``, which keeps the first
        ``context_length`` tokens and records it in ``meta["truncation"]``, or
        ``allow_beyond_context=True``, which traces all of it (extrapolation, e.g. RePo Fig. 2's
        longer inputs) and records ``meta["beyond_context"]``.
        """
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(item, str) for item in inputs):
            return [
                self._trace_one(text, truncate, allow_beyond_context)
                for text in tqdm(inputs, desc="tracing", unit="text", disable=not progress)
            ]
        return self._trace_one(inputs, truncate, allow_beyond_context)

    def _trace_one(self, inputs: Any, truncate: bool, allow_beyond_context: bool = False) -> Trace:
        ids = token_ids(inputs, self.encode, self.model.cfg.vocab_size)
        meta: dict[str, Any] = {**self.meta, "warnings": [], "truncation": None}
        limit = self.context_length
        if len(ids) > limit and allow_beyond_context:
            meta["beyond_context"] = {"tokens": len(ids), "context": limit}
        elif len(ids) > limit:
            if not truncate:
                raise InputError(
                    f"the input is {len(ids)} tokens, longer than the model's context of {limit}; "
                    f"shorten it, pass truncate=True to keep the first {limit} tokens, or "
                    "allow_beyond_context=True to trace all of them (extrapolation)"
                )
            meta["truncation"] = {"original_tokens": len(ids), "kept_tokens": limit}
            ids = ids[:limit]
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        learned: dict[int, np.ndarray] = {}
        positions = capture_positions(self.model, input_ids, increments=learned)
        cfg = self.model.cfg
        meta["mechanism"] = mechanism_settings(cfg)
        extras = {}
        if learned:
            extras["increments"] = increments_array(positions, learned)
            meta["increments"] = {"learned_layers": sorted(learned), "definition": INCREMENTS_DEFINITION}
        _flag_nonfinite(positions, meta)
        return Trace(
            tokens=self.display_tokens(ids),
            token_ids=np.asarray(ids, dtype=np.int64),
            positions=positions,
            layer_kinds=list(cfg.layer_mechanisms),
            meta=meta,
            extras=extras,
        )


INCREMENTS_DEFINITION = (
    "extras['increments'][layer] is what the layer's mechanism sums: lpi / lpi-layer δ, grape-m ω, "
    "fox −log f, cope the last token's gates, grape-ap −ψ(last token, ·); positions = cumsum(increments) "
    "(grape-m: exclusive, positions = cumsum − increments). Layers without learned increments hold "
    "the differences of their positions (first entry = the first position)."
)


def increments_array(positions: np.ndarray, learned: dict[int, np.ndarray]) -> np.ndarray:
    """(L, H, T) float32: the learned increments where a layer has them, position differences elsewhere."""
    result = np.diff(positions, axis=-1, prepend=0.0).astype(np.float32)
    for layer, delta in learned.items():
        result[layer] = delta
    return result


def mechanism_settings(cfg) -> dict[str, Any]:
    """The position settings a trace records in ``meta["mechanism"]`` (only those the layers use)."""
    kinds = set(cfg.layer_mechanisms)
    settings: dict[str, Any] = {
        "layer_kinds": list(cfg.layer_mechanisms),
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "repo_dim": cfg.d_position if "repo" in kinds else None,
    }
    if kinds & {"lpi", "lpi-layer"}:
        settings["lpi_hidden"] = cfg.lpi_hidden_dim
    if "lpi-layer" in kinds:
        settings["lpi_max_delta"] = cfg.lpi_max_delta
    if "cope" in kinds:
        settings["cope_max_position"] = cfg.cope_max_position
    return settings


def _flag_nonfinite(positions: np.ndarray, meta: dict[str, Any]) -> None:
    bad = ~np.isfinite(positions)
    if not bad.any():
        return
    heads = np.argwhere(bad.any(axis=2)).tolist()
    message = (
        f"{int(bad.sum())} positions are NaN or infinite, in (layer, head) {heads[:10]}"
        + (" …" if len(heads) > 10 else "")
        + "; the model's weights or input may be broken (try dtype='float32')"
    )
    meta["nonfinite_positions"] = heads
    meta["warnings"].append(message)
    warnings.warn(message, stacklevel=3)
