"""Forward passes of interventions: one that keeps what later runs start from, and one that starts there.

:func:`capture` runs the whole model once, keeping each site's position quantity and, from a given
layer on, the inputs of every block (the residual stream and what the model passes along with it,
e.g. the shared increments of ``lpi`` models). :func:`run_from` runs the blocks from a layer to the
logits on such a residual stream, for any number of rows: everything below the first patched layer
is the same in every patched copy, so it is computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from repo_lens.capture import forward_lock
from repo_lens.interventions.prefix import Prefix
from repo_lens.interventions.selection import Site

Hook = tuple[str, Callable[..., Any]]


@dataclass
class Captured:
    """What :func:`capture` kept: the ``logits`` and each site layer's ``quantities`` (detached) of every
    token, and, per layer from the first asked for, the ``inputs`` of its block for the tokens after
    the prefix (x [batch, pos − prefix, d_model], then the KV cache, the offset, the shared increments)."""

    logits: torch.Tensor
    quantities: dict[int, torch.Tensor] = field(default_factory=dict)
    inputs: dict[int, tuple[Any, ...]] = field(default_factory=dict)


def capture(model: Any, ids: torch.Tensor, sites: Sequence[Site], *, inputs_from: int | None = None,
            hooks: Sequence[Hook] = (), prefix: Prefix | None = None, rows_from: int = 0) -> Captured:
    """One forward pass of ``ids`` (with the extra forward ``hooks``), keeping each site's quantity and,
    with ``inputs_from``, the inputs of blocks ``inputs_from``.. (call under no_grad). With ``prefix``
    (:func:`repo_lens.interventions.prefix.run_prefix` of the same first tokens), only the tokens after
    it run; quantities and logits still cover every token. ``rows_from``: only the logits of tokens
    ``rows_from``.. are wanted (the last block runs its queries and MLP for them alone where the
    model can); the logits of the tokens before it after the prefix are NaN.

    >>> from repo_lens.model.tiny import tiny_model
    >>> from repo_lens.interventions.selection import select_sites
    >>> model = tiny_model("repo")
    >>> run = capture(model, torch.tensor([[1, 2, 3]]), select_sites(model, None), inputs_from=2)
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

    fwd_hooks = [*hooks, *[(site.hook, keep(site.layer)) for site in sites]]
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


def run_from(model: Any, start: int, x: torch.Tensor, rest: tuple[Any, ...] | Callable[[int, int], tuple[Any, ...]],
             join: Callable[[int, torch.Tensor], torch.Tensor] | None = None, rows_from: int = 0) -> torch.Tensor:
    """Logits of blocks ``start``.. on the residual stream ``x``. ``rest``: the blocks' other inputs as
    :func:`capture` kept them, or a function (layer, rows) -> those inputs. ``join(layer, x)`` may add
    rows before each layer. ``rows_from``: only the logits of tokens ``rows_from``.. of ``x`` are
    wanted, so the last block runs its queries and MLP for those tokens only. Attach hooks and hold
    :func:`repo_lens.capture.forward_lock` around the call.

    >>> from repo_lens.model.tiny import tiny_model
    >>> model, ids = tiny_model("repo"), torch.tensor([[1, 2, 3]])
    >>> run = capture(model, ids, [], inputs_from=2)
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


def block_inputs(model: Any, ids: torch.Tensor, layer: int, cache: Any = None) -> tuple[Any, ...]:
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
