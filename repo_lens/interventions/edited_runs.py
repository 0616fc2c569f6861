"""The runs an edit goes through: the batch, the aligned pair, the shared prefix and the edited runs.

The third stage of the data path: ``as_batch`` reads the prompts, ``alignment`` and ``transplant`` line up two
prompts, ``run_prefix`` runs the unedited prefix once, and ``capture_edited`` and ``run_from`` run the edited
rest of a repo_lens model (what they keep is what the edits need, not a trace: traces are
``repo_lens.capture``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from repo_lens.capture import forward_lock
from repo_lens.data.spans import Prompt
from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, token_ids
from repo_lens.interventions.edit_targets import REST, Cell, Site, cell_mask, token_mask
from repo_lens.options import keyword_dataclass
from repo_lens.interventions.options import TokenSelection
from repo_lens.model.cache import KVCache
from repo_lens.model.transformer import LensModel
from repo_lens.protocol import LensProtocol

# one input: a text, token ids or a built Prompt; Inputs: one of them or a list of them (one batch)
Input = str | Sequence[int] | np.ndarray | torch.Tensor | Prompt
Inputs = Input | Sequence[Input]


@keyword_dataclass
@dataclass(kw_only=True)
class Batch:
    """``ids`` [batch, width] (right-padded with 0), each row's ``lengths``, and its ``prompts`` (None for plain ids or text)."""

    ids: torch.Tensor
    lengths: list[int]
    prompts: list[Prompt | None]

    def __len__(self) -> int:
        return len(self.lengths)


def _is_batch(inputs: Any) -> bool:
    if isinstance(inputs, (list, tuple)):
        return bool(inputs) and not isinstance(inputs[0], (int, np.integer))
    return hasattr(inputs, "ndim") and inputs.ndim == 2 and inputs.shape[0] > 1


def _ids_of(lens: LensProtocol, item: Any) -> tuple[list[int], Prompt | None]:
    if isinstance(item, Prompt):
        return token_ids(np.asarray(item.ids), None, lens.vocab_size), item
    return token_ids(item, lens.encode, lens.vocab_size), None


def as_batch(lens: LensProtocol, inputs: Inputs, allow_beyond_context: bool = False) -> Batch:
    """``inputs`` (one input or a list of them) as a :class:`Batch` on ``lens``' device; input longer
    than the model's context is an error unless ``allow_beyond_context``.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> batch = as_batch(Lens(tiny_model("repo"), ByteTokenizer()), ["abc", [5, 6]])
    >>> batch.ids.tolist(), batch.lengths
    ([[97, 98, 99], [5, 6, 0]], [3, 2])
    """
    items = list(cast("Sequence[Input]", inputs)) if _is_batch(inputs) else [inputs]
    if isinstance(inputs, (list, tuple)) and not inputs:
        raise InputError("no inputs: pass a text, token ids, a Prompt, or a non-empty list of them")
    rows, prompts = [], []
    for item in items:
        ids, prompt = _ids_of(lens, item)
        if not allow_beyond_context:
            fit_to_context(ids, lens.context_length, offer_truncation=False)
        rows.append(ids)
        prompts.append(prompt)
    width = max(len(ids) for ids in rows)
    padded = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        padded[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return Batch(ids=padded.to(lens.device), lengths=[len(ids) for ids in rows], prompts=prompts)


def as_single(lens: LensProtocol, inputs: Inputs, name: str, allow_beyond_context: bool = False) -> Batch:
    """One input (``name`` says which, for the error) as a batch of one.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> as_single(Lens(tiny_model("repo"), ByteTokenizer()), "hi", "clean").lengths
    [2]
    """
    if _is_batch(inputs):
        raise InputError(f"{name} must be one prompt (a text, token ids or a Prompt), not a batch of "
                         f"{len(inputs)}; patch one clean / corrupted pair at a time")
    return as_batch(lens, inputs, allow_beyond_context)


def _by_spans(clean: Batch, corrupted: Batch, names: Sequence[str]) -> np.ndarray:
    clean_prompt, corrupted_prompt = clean.prompts[0], corrupted.prompts[0]
    if clean_prompt is None or corrupted_prompt is None:
        raise InputError("aligning by spans needs Prompt inputs (repo_lens.data builders, e.g. niah_prompt), "
                         "whose .spans name the tokens; plain text or ids align only token by token")
    mapping = np.full(corrupted.lengths[0], -1, dtype=np.int64)
    for name in names:
        missing = [which for which, prompt in (("clean", clean_prompt), ("corrupted", corrupted_prompt))
                   if name not in prompt.spans]
        if missing:
            raise InputError(f"span {name!r} is not in the {' and '.join(missing)} prompt; both have "
                             f"{sorted(set(clean_prompt.spans) & set(corrupted_prompt.spans))}")
        (a, b), (c, d) = clean_prompt.spans[name], corrupted_prompt.spans[name]
        if b - a != d - c:
            raise InputError(f"span {name!r} has {b - a} tokens in the clean prompt and {d - c} in the corrupted "
                             "one; spans that align must have the same number of tokens")
        taken, wanted = mapping[c:d], np.arange(a, b)
        if ((taken >= 0) & (taken != wanted)).any():
            raise InputError(f"span {name!r} overlaps another aligned span at different offsets in the two "
                             "prompts; pick disjoint spans (or nested ones that move together)")
        mapping[c:d] = wanted
    return mapping


def alignment(clean: Batch, corrupted: Batch, align: str | Sequence[str] | None = None) -> np.ndarray:
    """int64 [corrupted tokens]: the clean token index each corrupted token takes, −1 for none.
    ``align``: None or "index" (token by token: equal lengths), or span names.

    >>> from repo_lens.data.spans import Prompt
    >>> def prompt(n, start):
    ...     return Prompt("", np.zeros(n, np.int64), {"needle": (start, start + 2)}, {}, (n - 1, n), "")
    >>> def batch(n, start):
    ...     return Batch(ids=torch.zeros(1, n, dtype=torch.long), lengths=[n], prompts=[prompt(n, start)])
    >>> alignment(batch(4, 1), batch(5, 3), ["needle"]).tolist()
    [-1, -1, -1, 1, 2]
    """
    n_clean, n_corrupted = clean.lengths[0], corrupted.lengths[0]
    if align is None or align == "index":
        if n_clean != n_corrupted:
            raise InputError(f"the clean prompt has {n_clean} tokens and the corrupted one {n_corrupted}: prompts of "
                             "different lengths align by named spans; pass align=[span names], e.g. "
                             "['needle', 'query', 'answer'] for NIAH prompts")
        return np.arange(n_corrupted, dtype=np.int64)
    names = [align] if isinstance(align, str) else list(align)
    if not names or not all(isinstance(name, str) for name in names):
        raise InputError(f"align must be None, 'index' or a list of span names, got {align!r:.60}")
    return _by_spans(clean, corrupted, names)


def span_names(tokens: Any) -> list[str] | None:
    """The span names ``tokens`` selects by name ("needle", ["needle", "question"]); None for a slice,
    indices, "rest" or "~name" (tokens outside spans have no counterpart by name).

    >>> span_names("needle"), span_names(["needle", "answer"]), span_names("rest"), span_names(slice(0, 3))
    (['needle'], ['needle', 'answer'], None, None)
    """
    chosen = [tokens] if isinstance(tokens, str) else tokens
    if not isinstance(chosen, (list, tuple)) or not chosen or not all(isinstance(name, str) for name in chosen):
        return None
    if any(name == REST or name.startswith("~") for name in chosen):
        return None
    return list(chosen)


def pair_mapping(clean: Batch, corrupted: Batch, align: str | Sequence[str] | None,
                 tokens: TokenSelection) -> np.ndarray:
    """int64 [corrupted tokens]: the clean token index each corrupted token takes (−1: none), aligned by
    :func:`alignment` and kept to the ``tokens`` selected. Spans chosen by name (with ``align=None``) take
    their own clean positions, wherever they sit in the clean prompt.

    >>> one = Batch(ids=torch.tensor([[1, 2, 3]]), lengths=[3], prompts=[None])
    >>> pair_mapping(one, one, None, [0, 2]).tolist()
    [0, -1, 2]
    """
    names = span_names(tokens)
    if align is None and names and all(prompt is not None and all(name in prompt.spans for name in names)
                                       for prompt in (clean.prompts[0], corrupted.prompts[0])):
        align = names  # a span takes its own clean positions, wherever it sits in the clean prompt
    mapping = alignment(clean, corrupted, align)
    selected = token_mask(tokens, corrupted.prompts, corrupted.lengths, corrupted.lengths[0])
    if selected is not None:
        mapping = np.where(selected[0].numpy(), mapping, -1)
    return mapping


def transplant(clean: torch.Tensor, corrupted: torch.Tensor, mapping: np.ndarray, pairwise: bool) -> torch.Tensor:
    """``corrupted`` [1, head, pos (, pos)] with each aligned token's entries taken from ``clean`` (its
    ``mapping`` [pos] index there; −1 keeps the corrupted entry). Pairwise quantities take an entry
    when both its query and its key are aligned.

    >>> transplant(torch.tensor([[[1.0, 2.0]]]), torch.zeros(1, 1, 3), np.array([-1, 0, 1]), False).tolist()
    [[[0.0, 1.0, 2.0]]]
    """
    out = corrupted.clone()
    where = torch.as_tensor(np.flatnonzero(mapping >= 0), device=corrupted.device)
    source = torch.as_tensor(mapping[mapping >= 0], device=corrupted.device)
    if not pairwise:
        out[..., where] = clean[..., source].to(out.dtype)
    else:
        out[:, :, where[:, None], where[None, :]] = clean[:, :, source[:, None], source[None, :]].to(out.dtype)
    return out


@keyword_dataclass
@dataclass(kw_only=True)
class Prefix:
    """The first ``length`` tokens' KV ``cache``, each site layer's ``quantities`` [1, head, length
    (, length)] and the ``logits`` [1, length, vocab]."""

    length: int
    cache: KVCache
    quantities: dict[int, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None

    def fresh_cache(self) -> KVCache:
        """A copy of the cache that a run may extend (the tensors are shared, never written in place)."""
        copy = KVCache(len(self.cache.keys))
        copy.keys, copy.values = list(self.cache.keys), list(self.cache.values)
        copy.position_states = [dict(state) for state in self.cache.position_states]
        return copy

    def full(self, layer: int, suffix: torch.Tensor, pairwise: bool) -> torch.Tensor:
        """The quantity of every token: the prefix's, then ``suffix`` [rows, head, pos − length (, pos)]."""
        if self.length == 0:
            return suffix
        head = self.quantities[layer].to(suffix.dtype).expand(suffix.shape[0], *self.quantities[layer].shape[1:])
        if not pairwise:
            return torch.cat((head, suffix), dim=2)
        full = suffix.new_zeros(*suffix.shape[:2], suffix.shape[-1], suffix.shape[-1])
        full[:, :, :self.length, :self.length] = head
        full[:, :, self.length:] = suffix
        return full


def shared_prefix(clean_ids: torch.Tensor, corrupted_ids: torch.Tensor, mapping: np.ndarray) -> int:
    """How many leading tokens the pair shares: equal ids, and each either aligned to itself or to none
    (at most all but the corrupted prompt's last token, which always runs).

    >>> shared_prefix(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 2, 5, 4]]), np.arange(4))
    2
    """
    n = min(clean_ids.shape[1], corrupted_ids.shape[1], corrupted_ids.shape[1] - 1)
    same = (clean_ids[0, :n] == corrupted_ids[0, :n]).cpu().numpy()
    same &= (mapping[:n] == np.arange(n)) | (mapping[:n] < 0)
    return int(n if same.all() else np.argmin(same))


def run_prefix(model: LensModel, ids: torch.Tensor, length: int, sites: Sequence[Site] = ()) -> Prefix:
    """Run the first ``length`` tokens of ``ids`` [1, pos] into a KV cache, keeping each site's quantity.

    >>> from repo_lens.model.tiny import tiny_model
    >>> prefix = run_prefix(tiny_model("fox"), torch.tensor([[1, 2, 3]]), 2)
    >>> prefix.cache.seq_len, tuple(prefix.logits.shape)
    (2, (1, 2, 257))
    """
    prefix = Prefix(length=length, cache=model.new_cache())
    if length == 0:
        return prefix

    def keep(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> None:
            prefix.quantities[layer] = value.detach()

        return hook

    with torch.no_grad(), forward_lock(model), model.hooks(fwd_hooks=[(s.hook, keep(s.layer)) for s in sites]):
        prefix.logits = model(ids[:, :length], cache=prefix.cache)
    return prefix


def first_changed(chunk: Sequence[Cell], heads: torch.Tensor, patched: dict[int, torch.Tensor],
                  corrupted: dict[int, torch.Tensor], floor: int = 0) -> int:
    """The first token from ``floor`` on whose quantity some cell of ``chunk`` changes (the token count
    when none does).

    >>> q = torch.zeros(1, 2, 4); p = q.clone(); p[0, 1, 2] = 1.0
    >>> first_changed([Cell(layer=0, head=1)], torch.ones(2, dtype=torch.bool), {0: p}, {0: q})
    2
    """
    width = next(iter(patched.values())).shape[2]
    first = width
    for cell in chunk:
        differs = patched[cell.layer][0] != corrupted[cell.layer][0]  # [head, pos (, pos)]
        mask = cell_mask(cell, heads, differs.shape).to(differs.device) & differs
        rows = mask.flatten(2).any(-1) if mask.dim() == 3 else mask  # [head, pos]
        changed = torch.nonzero(rows.any(0)[floor:]).flatten()
        if changed.numel():
            first = min(first, floor + int(changed[0]))
    return first


def _expanded(value: Any, rows: int) -> Any:
    if isinstance(value, torch.Tensor) and value.shape[0] == 1:
        return value.expand(rows, *value.shape[1:])
    return value


def suffix_inputs(prefix: KVCache, shared: Any, length: int):
    """``rest`` for :func:`repo_lens.interventions.edited_runs.run_from` on the tokens after the first
    ``length``: each block gets a KV cache holding the prefix's layer state for the rows it runs, the
    offset, and ``shared`` (the model's shared increments of those tokens; None for most models)."""
    cache = KVCache(len(prefix.keys))

    def rest(layer: int, rows: int) -> tuple[Any, ...]:
        cache.keys[layer] = _expanded(prefix.keys[layer], rows)
        cache.values[layer] = _expanded(prefix.values[layer], rows)
        cache.position_states[layer] = {key: _expanded(value, rows)
                                        for key, value in prefix.position_states[layer].items()}
        return cache, length, _expanded(shared, rows)

    return rest


Hook = tuple[str | Callable[..., Any], Callable[..., Any]]  # (hook name or name filter, hook), as TransformerLens


@keyword_dataclass
@dataclass(kw_only=True)
class Captured:
    """What :func:`capture_edited` kept: the ``logits`` and each site layer's ``quantities`` (detached) of every
    token, and, per layer from the first asked for, the ``inputs`` of its block for the tokens after
    the prefix (x [batch, pos − prefix, d_model], then the KV cache, the offset, the shared increments)."""

    logits: torch.Tensor
    quantities: dict[int, torch.Tensor] = field(default_factory=dict)
    inputs: dict[int, tuple[Any, ...]] = field(default_factory=dict)


def capture_edited(model: LensModel, ids: torch.Tensor, sites: Sequence[Site], *, inputs_from: int | None = None,
                   hooks: Sequence[Hook] = (), prefix: Prefix | None = None, rows_from: int = 0) -> Captured:
    """One forward pass of ``ids`` (with the extra forward ``hooks``), keeping each site's quantity and,
    with ``inputs_from``, the inputs of blocks ``inputs_from``.. (call under no_grad). With ``prefix``
    (:func:`repo_lens.interventions.edited_runs.run_prefix` of the same first tokens), only the tokens after
    it run; quantities and logits still cover every token. ``rows_from``: only the logits of tokens
    ``rows_from``.. are wanted (the last block runs its queries and MLP for them alone where the
    model can); the logits of the tokens before it after the prefix are NaN.

    >>> from repo_lens.model.tiny import tiny_model
    >>> from repo_lens.interventions.edit_targets import select_sites
    >>> model = tiny_model("repo")
    >>> run = capture_edited(model, torch.tensor([[1, 2, 3]]), select_sites(model, None), inputs_from=2)
    >>> sorted(run.quantities), sorted(run.inputs), tuple(run.inputs[2][0].shape)
    ([2, 3], [2, 3], (1, 3, 64))
    """
    captured = Captured(logits=torch.empty(0))

    def keep(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> None:
            captured.quantities[layer] = value.detach()

        return hook

    def keep_inputs(layer: int):
        def pre_hook(module: Any, args: tuple[Any, ...]) -> None:
            captured.inputs[layer] = tuple(arg.detach() if isinstance(arg, torch.Tensor) else arg for arg in args)

        return pre_hook

    fwd_hooks: list[Hook] = [*hooks, *[(site.hook, keep(site.layer)) for site in sites]]
    layers = range(inputs_from, len(model.blocks)) if inputs_from is not None else range(0)
    start = 0 if prefix is None else prefix.length
    unread = max(0, rows_from - start) if getattr(model, "ROWS_FROM", False) else 0
    with forward_lock(model), model.hooks(fwd_hooks=fwd_hooks):
        handles = [model.blocks[layer].register_forward_pre_hook(keep_inputs(layer)) for layer in layers]
        try:
            cache = None if prefix is None else prefix.fresh_cache()
            captured.logits = model(ids[:, start:], cache=cache, rows_from=unread) if unread else model(ids[:, start:], cache=cache)
        finally:
            for handle in handles:
                handle.remove()
    captured.logits = with_unread_rows(captured.logits, unread)
    if start:
        assert prefix is not None and prefix.logits is not None  # start > 0: a computed prefix
        captured.logits = torch.cat((prefix.logits, captured.logits), dim=1)
        captured.quantities = {site.layer: prefix.full(site.layer, captured.quantities[site.layer], site.edit.pairwise)
                               for site in sites}
    return captured


def with_unread_rows(logits: torch.Tensor, unread: int) -> torch.Tensor:
    """``logits`` [batch, pos, vocab] of the tokens after the first ``unread``, with NaN rows in front for
    those (the tokens a metric said it does not read).

    >>> with_unread_rows(torch.zeros(2, 1, 3), 2)[0, :, 0].tolist()
    [nan, nan, 0.0]
    """
    if not unread:
        return logits
    return torch.cat((logits.new_full((logits.shape[0], unread, logits.shape[-1]), float("nan")), logits), dim=1)


def rows_of(args: tuple[Any, ...], rows: int) -> tuple[Any, ...]:
    """The block's other inputs for ``rows`` rows (tensors captured for one row are expanded).

    >>> rows_of((None, 0, torch.zeros(1, 5)), 3)[2].shape
    torch.Size([3, 5])
    """
    return tuple(arg.expand(rows, *arg.shape[1:]) if isinstance(arg, torch.Tensor) and arg.shape[0] == 1 else arg
                 for arg in args)


def run_from(model: LensModel, start: int, x: torch.Tensor, rest: tuple[Any, ...] | Callable[[int, int], tuple[Any, ...]],
             join: Callable[[int, torch.Tensor], torch.Tensor] | None = None, rows_from: int = 0) -> torch.Tensor:
    """Logits of blocks ``start``.. on the residual stream ``x``. ``rest``: the blocks' other inputs as
    :func:`capture_edited` kept them, or a function (layer, rows) -> those inputs. ``join(layer, x)`` may add
    rows before each layer. ``rows_from``: only the logits of tokens ``rows_from``.. of ``x`` are
    wanted, so the last block runs its queries and MLP for those tokens only. Attach hooks and hold
    :func:`repo_lens.capture.forward_lock` around the call.

    >>> from repo_lens.model.tiny import tiny_model
    >>> model, ids = tiny_model("repo"), torch.tensor([[1, 2, 3]])
    >>> run = capture_edited(model, ids, [], inputs_from=2)
    >>> torch.allclose(run_from(model, 2, run.inputs[2][0], run.inputs[2][1:]), run.logits, atol=1e-5)
    True
    """
    last = len(model.blocks) - 1
    for layer in range(start, len(model.blocks)):
        if join is not None:
            x = join(layer, x)
        args = rest(layer, x.shape[0]) if callable(rest) else rows_of(rest, x.shape[0])
        block = model.blocks[layer]
        if layer == last and rows_from:
            x = block(x, *args, rows_from=rows_from) if getattr(block, "ROWS_FROM", False) else block(x, *args)[:, rows_from:]
        else:
            x = block(x, *args)
    return model.unembed(model.final_norm(x))


class _Reached(Exception):
    """Raised by the pre-hook of the block whose inputs :func:`block_inputs` wanted: the rest is not needed."""


def block_inputs(model: LensModel, ids: torch.Tensor, layer: int, cache: Any = None) -> tuple[Any, ...]:
    """The inputs of block ``layer`` for ``ids`` (the residual stream first), running only the blocks below
    it (``cache``: a KV cache of the tokens before ``ids``).

    >>> from repo_lens.model.tiny import tiny_model
    >>> tuple(block_inputs(tiny_model("repo"), torch.tensor([[1, 2, 3]]), 2)[0].shape)
    (1, 3, 64)
    """
    kept: list[tuple[Any, ...]] = []

    def pre_hook(module: Any, args: tuple[Any, ...]) -> None:
        kept.append(tuple(arg.detach() if isinstance(arg, torch.Tensor) else arg for arg in args))
        raise _Reached

    with forward_lock(model):
        handle = model.blocks[layer].register_forward_pre_hook(pre_hook)
        try:
            model(ids, cache=cache)
        except _Reached:
            pass
        finally:
            handle.remove()
    return kept[0]
