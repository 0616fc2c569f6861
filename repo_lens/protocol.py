"""What a lens offers: the two protocols that code taking a lens asks for.

* :class:`LensProtocol`: what :class:`repo_lens.Lens` and the nnsight-backed :class:`repo_lens.hf.HFLens`
  share: the tokenizer, ``meta``, the model's sizes and device, ``encode``, ``display_tokens``, ``trace``
  and ``trace_batch``. Code that only traces and reads the tokenizer (the app, studies, analyses such as
  :func:`repo_lens.analysis.score_decomposition` and :func:`repo_lens.analysis.vocabulary_increments`)
  asks for it, so it works with either lens.
* :class:`HookedLensProtocol`: a :class:`LensProtocol` whose model repo_lens runs itself: ``.model``, a
  :class:`repo_lens.model.LensModel` with its hook points, and ``.layer_kinds``. Attention mass and
  position attribution read the model through its hooks, so they ask for this one.
  :class:`repo_lens.Lens` (what :func:`repo_lens.load` returns) satisfies it; an ``HFLens`` does not, and
  what needs it refuses an ``HFLens`` with an InputError naming what it needs (:func:`require_hooked_lens`).
  The interventions take any :class:`LensProtocol`: on an ``HFLens`` they edit the integer positions the
  model's rotary embedding reads (``position_ids``), for every layer or for chosen layers.

Both lenses subclass :class:`LensProtocol` and inherit its ``trace`` (text, token ids or a list of texts;
its three typed forms are written once, here); each implements ``trace_batch``. The input path they share
(ids fitted to the context, tracing many inputs) is in :mod:`repo_lens.lens_inputs`; batch sizes and
batches by length are in :mod:`repo_lens.inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, overload, runtime_checkable

from repo_lens.inputs import is_text_batch
from repo_lens.validation import require_lens_model

if TYPE_CHECKING:
    import numpy as np
    import torch

    from repo_lens.model.transformer import LensModel
    from repo_lens.trace import Trace


@runtime_checkable
class LensProtocol(Protocol):
    """A model with its tokenizer that traces positions; :class:`repo_lens.Lens` and
    :class:`repo_lens.hf.HFLens` both satisfy it (and inherit ``trace`` from it).

    Example:
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.lens import Lens
        >>> cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=16, n_layers=2, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope", "repo"])
        >>> lens = Lens(LensModel(cfg), ByteTokenizer())
        >>> isinstance(lens, LensProtocol), lens.n_layers, lens.n_heads
        (True, 2, 2)
    """

    tokenizer: Any  # None for a model without one (then only token ids can be traced)
    meta: dict[str, Any]  # what was loaded: name, source, dtype, device, …; copied into every trace

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def context_length(self) -> int | None:
        """Tokens the model was trained on (None: unknown, nothing is truncated)."""

    @property
    def device(self) -> torch.device: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens as the model expects them)."""

    def display_tokens(self, ids: Sequence[int]) -> list[str]:
        """Display form of each token id."""

    def trace_batch(self, inputs: Sequence[Any], *, batch_size: int = 8, truncate: bool = False,
                    allow_beyond_context: bool = False, progress: bool = True) -> list[Trace]:
        """One Trace per input (a text or a sequence of token ids), in input order: ``batch_size`` inputs
        per forward pass where the lens batches (:meth:`repo_lens.Lens.trace_batch`), else one at a time."""

    @overload
    def trace(self, inputs: str | Sequence[int] | np.ndarray | torch.Tensor, *, truncate: bool = False,
              allow_beyond_context: bool = False, progress: bool = True, batch_size: int = 1) -> Trace: ...
    @overload
    def trace(self, inputs: list[str] | tuple[str, ...], *, truncate: bool = False,
              allow_beyond_context: bool = False, progress: bool = True, batch_size: int = 1) -> list[Trace]: ...
    @overload
    def trace(self, inputs: Any, *, truncate: bool = False, allow_beyond_context: bool = False,
              progress: bool = True, batch_size: int = 1) -> Trace | list[Trace]: ...
    def trace(self, inputs: Any, *, truncate: bool = False, allow_beyond_context: bool = False,
              progress: bool = True, batch_size: int = 1) -> Trace | list[Trace]:
        """Positions of every layer and head for a text, a sequence of token ids, or a list of texts.

        Too long input raises InputError unless ``truncate=True``, which keeps the first
        ``context_length`` tokens and records it in ``meta["truncation"]``, or
        ``allow_beyond_context=True``, which traces all of it (extrapolation, e.g. RePo Fig. 2's
        longer inputs) and records ``meta["beyond_context"]``. A list of texts gives a list of traces,
        through :meth:`trace_batch`: ``batch_size`` texts per forward pass where the lens batches
        (:class:`repo_lens.Lens`; the traces are the same), one at a time otherwise.
        """
        options: dict[str, Any] = {"truncate": truncate, "allow_beyond_context": allow_beyond_context}
        if is_text_batch(inputs):
            return self.trace_batch(inputs, batch_size=batch_size, progress=progress, **options)
        # text or token ids: one input, so one trace (trace_batch still checks batch_size)
        return self.trace_batch([inputs], batch_size=batch_size, progress=False, **options)[0]


@runtime_checkable
class HookedLensProtocol(LensProtocol, Protocol):
    """A :class:`LensProtocol` whose model repo_lens runs itself: ``model`` is a
    :class:`repo_lens.model.LensModel` (hook points such as ``blocks.{l}.attn.hook_pos``, ``hooks(...)``,
    ``cfg``), and ``layer_kinds`` names each layer's position mechanism. What attention mass and position
    attribution need; :class:`repo_lens.Lens` satisfies it, an :class:`repo_lens.hf.HFLens` (a Hugging Face
    model run through nnsight) does not.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = Lens(tiny_model("repo"), None)
        >>> isinstance(lens, HookedLensProtocol), lens.layer_kinds
        (True, ['rope', 'rope', 'repo', 'repo'])
    """

    model: LensModel

    @property
    def context_length(self) -> int:
        """Tokens the model was trained on (a repo_lens model always knows it)."""

    @property
    def layer_kinds(self) -> list[str]:
        """The position mechanism of each layer (``"rope"``, ``"repo"``, …)."""


def require_hooked_lens(lens: object, what: str) -> HookedLensProtocol:
    """``lens`` as a :class:`HookedLensProtocol`, for code that takes any lens but reaches a function that needs
    repo_lens' hooks; anything else (an HFLens, a path, a bare model) is the InputError of
    :func:`repo_lens.validation.require_lens_model`, naming ``what`` needs it and the alternative.

    Example:
        >>> from repo_lens.errors import InputError
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = Lens(tiny_model("repo"), None)
        >>> require_hooked_lens(lens, "the niah study") is lens
        True
        >>> try:
        ...     require_hooked_lens("/models/llama", "the niah study")
        ... except InputError as error:
        ...     print(str(error)[:56])
        the niah study needs a Lens from repo_lens.load (with a
    """
    require_lens_model(lens, what)
    return cast("HookedLensProtocol", lens)  # require_lens_model checked its .model (cfg and hooks)
