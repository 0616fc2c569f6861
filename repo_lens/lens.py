"""Lens: a hookable model with its tokenizer, and the ``trace`` entry point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.capture import capture_batch, guard_model, is_out_of_memory, memory_limit_error
from repo_lens.inputs import check_batch_size, check_input_list, check_text, length_batches, token_ids
from repo_lens.lens_inputs import prepare_ids
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.config import ModelConfig
from repo_lens.model.registry import is_learned, mechanism_traits, recorded_settings
from repo_lens.model.transformer import LensModel
from repo_lens.protocol import HookedLensProtocol
from repo_lens.trace import Trace, flag_nonfinite


class Lens(HookedLensProtocol):
    """A loaded model (``model``: a HookedRootModule) and its tokenizer; satisfies
    :class:`repo_lens.protocol.HookedLensProtocol` and inherits ``trace`` from
    :class:`repo_lens.protocol.LensProtocol`.

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
        self.model = guard_model(model)  # hooked forwards of this model run one at a time (see README, Threading)
        self.model.tokenizer = self.tokenizer = tokenizer  # the model's to_tokens / generate use it too
        self.meta = dict(meta or {})

    @property
    def n_layers(self) -> int:
        return len(self.model.blocks)

    @property
    def n_heads(self) -> int:
        """Query heads per layer (with GQA, groups of them share keys and values)."""
        return int(self.model.cfg.n_heads)

    @property
    def layer_kinds(self) -> list[str]:
        """The position mechanism of each layer (``"rope"``, ``"repo"``, …), as every trace of this lens lists them."""
        return list(self.model.cfg.layer_mechanisms)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int:
        return int(self.model.cfg.max_position_embeddings)

    @property
    def vocab_size(self) -> int:
        """Token ids run from 0 to vocab_size − 1."""
        return self.model.embed.weight.shape[0]

    def encode(self, text: str) -> list[int]:
        check_text(text, self.tokenizer is not None)
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.encode(text)
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def display_tokens(self, ids: Sequence[int]) -> list[str]:
        ids = [] if isinstance(ids, (list, tuple)) and not ids else token_ids(ids, None, self.vocab_size)
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.display_tokens(ids)
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return self.tokenizer.batch_decode([[int(i)] for i in ids])

    def trace_batch(self, inputs: Sequence[Any], *, batch_size: int = 8, truncate: bool = False,
                    allow_beyond_context: bool = False, progress: bool = True) -> list[Trace]:
        """One Trace per input (a text or a sequence of token ids), in input order, ``batch_size``
        inputs per forward pass: sorted by length, right-padded, split back. Causal attention keeps
        every real token blind to the pads after it, so each trace equals tracing its input alone
        (to float rounding, within 1e-5); an input beyond the context is traced alone.

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
            >>> batched = lens.trace_batch(["a longer text", "short", [5, 6, 7]], batch_size=2, progress=False)
            >>> [len(trace) for trace in batched]
            [13, 5, 3]
            >>> bool(np.allclose(batched[1].positions, lens.trace("short").positions, atol=1e-5))
            True
        """
        check_batch_size(batch_size)
        prepared = [prepare_ids(self, one, truncate=truncate, allow_beyond_context=allow_beyond_context)
                    for one in check_input_list(inputs)]
        traces: list[Trace | None] = [None] * len(prepared)
        batches = length_batches([len(ids) for ids, _ in prepared], batch_size, self.context_length)
        with tqdm(total=len(prepared), desc="tracing", unit="text", disable=not progress) as bar:
            for batch in batches:
                captured = self._capture([prepared[index][0] for index in batch])
                for index, (positions, summed) in zip(batch, captured):
                    traces[index] = self._assemble(*prepared[index], positions, summed)
                bar.update(len(batch))
        return cast("list[Trace]", traces)  # length_batches puts every index in exactly one batch

    def _capture(self, sequences: list[list[int]]) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
        """Positions and increments of each sequence, in one right-padded forward pass."""
        lengths = [len(ids) for ids in sequences]
        input_ids = torch.zeros((len(sequences), max(lengths)), dtype=torch.long)  # pads: token 0, never attended
        for row, ids in enumerate(sequences):
            input_ids[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        try:
            return capture_batch(self.model, input_ids.to(self.device), lengths)
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
        # raised here, outside the except block, so the failed pass's tensors are freed first
        what = "tracing" if len(sequences) == 1 else f"tracing a batch of {len(sequences)} texts"
        raise memory_limit_error(self.model, what, max(lengths),
                                 "trace a shorter window of the text (or pass truncate=True), or a batch of "
                                 "shorter texts (or a smaller batch_size); for attention mass, "
                                 "repo_lens.analysis.attention_mass computes only the query rows")

    def _assemble(self, ids: list[int], meta: dict[str, Any], positions: np.ndarray,
                  summed: dict[int, np.ndarray]) -> Trace:
        cfg = self.model.cfg
        meta["mechanism"] = mechanism_settings(cfg)
        extras = {}
        if summed:
            extras["increments"] = increments_array(positions, summed)
            learned = [layer for layer in sorted(summed) if is_learned(cfg.layer_mechanisms[layer])]
            meta["increments"] = {"learned_layers": learned, "definition": increments_definition(cfg.layer_mechanisms)}
        flag_nonfinite(positions, meta)
        return Trace(
            tokens=self.display_tokens(ids),
            token_ids=np.asarray(ids, dtype=np.int64),
            positions=positions,
            layer_kinds=list(cfg.layer_mechanisms),
            meta=meta,
            extras=extras,
        )


def increments_definition(kinds: Sequence[str]) -> str:
    """What ``extras["increments"]`` holds for a model whose layers have ``kinds`` (each mechanism's
    ``increments`` trait, from the registry).

    >>> increments_definition(["rope", "fox"])[:64]
    "extras['increments'][layer] is what the layer's mechanism sums: "
    """
    sums = [f"{kind}: {mechanism_traits(kind).increments}"
            for kind in dict.fromkeys(kinds) if mechanism_traits(kind).increments is not None]
    return (
        "extras['increments'][layer] is what the layer's mechanism sums: " + "; ".join(sums)
        + ". positions = cumsum(increments) unless an exclusive sum is noted. Layers without increments hold "
        "the differences of their positions (first entry = the first position)."
    )


def increments_array(positions: np.ndarray, summed: dict[int, np.ndarray]) -> np.ndarray:
    """(L, H, T) float32: the increments a layer's mechanism sums where it has them, position differences elsewhere."""
    result = np.diff(positions, axis=-1, prepend=0.0).astype(np.float32)
    for layer, delta in summed.items():
        result[layer] = delta
    return result


def mechanism_settings(cfg: ModelConfig) -> dict[str, Any]:
    """The position settings a trace records in ``meta["mechanism"]``: the rotary frequencies, and the
    settings of the mechanisms the layers use (each mechanism's ``settings`` trait, from the registry)."""
    return {
        "layer_kinds": list(cfg.layer_mechanisms),
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        **recorded_settings(cfg),
    }
