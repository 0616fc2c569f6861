"""What an edit does to the positions: the scale edits and the edited values.

The first stage of the data path: ``parse_mode`` (``modes``) reads a mode, ``scale_edit`` and ``edit_values``
say what the edited positions of a layer become (what to edit: here; where: ``edit_targets``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from repo_lens.interventions.modes import DEFAULT_WINDOW as DEFAULT_WINDOW  # re-exported: their home is modes
from repo_lens.interventions.modes import MODES as MODES
from repo_lens.interventions.modes import TARGETS as TARGETS
from repo_lens.interventions.modes import Interpolate, Mode, Shift, Stretch, Window
from repo_lens.interventions.modes import parse_mode as parse_mode
from repo_lens.model.registry import PositionEdit

SCALE_MODES = ("affine", "rank", "scaled", "random")
_SEED_BITS = 63  # what torch.Generator.manual_seed takes (any non-negative int below 2**64; 63 bits stay in int64)


def mixed_seed(*parts: int) -> int:
    """A seed for ``torch.Generator().manual_seed`` from integers (a prompt's seed, a layer, a head):
    blake2b of their decimal forms, so the same parts always give the same seed and nearby parts unrelated ones.

    >>> mixed_seed(0, 1) == mixed_seed(0, 1), mixed_seed(0, 1) == mixed_seed(1, 0), 0 <= mixed_seed(7) < 2**63
    (True, False, True)
    """
    digest = hashlib.blake2b(":".join(str(int(part)) for part in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - _SEED_BITS)


def prompt_seeds(ids: torch.Tensor, lengths: Sequence[int], seed: int = 0) -> list[int]:
    """One seed per row of ``ids`` [batch, width]: :func:`mixed_seed` of ``seed`` and a hash of the row's
    real tokens (its first ``lengths[row]`` ids). What the random edits draw ("random"'s direction,
    "shuffle"'s and "window"'s orders) comes from these seeds, so a prompt gets the same draw in any batch,
    at any place in it and with any padding; different prompts get independent draws.

    >>> ids = torch.tensor([[5, 6, 7], [5, 6, 0]])
    >>> a, b = prompt_seeds(ids, [3, 2]); b == prompt_seeds(torch.tensor([[5, 6]]), [2])[0], a == b
    (True, False)
    """
    rows = ids.detach().to("cpu", torch.int64)
    out = []
    for row, length in enumerate(lengths):
        digest = hashlib.blake2b(rows[row, :int(length)].numpy().tobytes(), digest_size=8).digest()
        out.append(mixed_seed(seed, int(length), int.from_bytes(digest, "little")))
    return out


def layer_seeds(seeds: Sequence[int], layer: int) -> list[int]:
    """Each prompt's seed (:func:`prompt_seeds`) for one layer: "random" draws a new direction in every layer.

    >>> layer_seeds([1, 2], 3) == [mixed_seed(1, 3), mixed_seed(2, 3)]
    True
    """
    return [mixed_seed(seed, layer) for seed in seeds]


def _random_direction(value: torch.Tensor, mask: torch.Tensor, lengths: Sequence[int],
                      seeds: Sequence[int]) -> torch.Tensor:
    """A unit direction per row, head (and query, for a pairwise quantity) over the row's real entries:
    row b, head h draws ``torch.randn`` of its own ``lengths[b]`` tokens (``lengths[b]``² for a pairwise
    quantity) from ``torch.Generator().manual_seed(mixed_seed(seeds[b], h))``: nothing depends on the
    padding, the other rows or the other heads."""
    direction = torch.zeros(value.shape, dtype=torch.float32)
    pairwise = value.dim() == 4
    for row, (length, seed) in enumerate(zip(lengths, seeds)):
        n = min(int(length), value.shape[-1])
        for head in range(value.shape[1]):
            generator = torch.Generator().manual_seed(mixed_seed(seed, head))
            if pairwise:
                direction[row, head, :n, :n] = torch.randn((n, n), generator=generator)
            else:
                direction[row, head, :n] = torch.randn(n, generator=generator)
    direction = torch.where(mask, direction.to(value.device), 0.0)
    return direction / direction.pow(2).sum(-1, keepdim=True).sqrt().clamp(min=1e-30)

SUFFIX_FLOOR = 1e-3  # the least edited CoPE position: float rounding of a sum at 0 must not reach index −1


def valid_mask(value: torch.Tensor, lengths: list[int] | None, pairwise: bool) -> torch.Tensor:
    """Boolean, broadcastable to ``value``: the entries of real tokens (for a pairwise quantity, the keys
    j ≤ i of each query i).

    >>> valid_mask(torch.zeros(2, 1, 3), [3, 2], pairwise=False)[:, 0].int().tolist()
    [[1, 1, 1], [1, 1, 0]]
    """
    width = value.shape[-1]
    lengths_t = torch.as_tensor(lengths if lengths is not None else [width] * value.shape[0], device=value.device)
    tokens = torch.arange(width, device=value.device)[None, :] < lengths_t[:, None]  # [batch, pos]
    if not pairwise:
        return tokens[:, None, :]
    causal = tokens[:, None, None, :] & (tokens[:, None, :, None]) & (
        torch.arange(width, device=value.device)[None, :] <= torch.arange(width, device=value.device)[:, None])
    return causal


def to_positions(value: torch.Tensor, how: str, mask: torch.Tensor) -> torch.Tensor:
    """The positions summed from the quantity ``value`` (the registry's ``sum``), masked entries 0.

    >>> to_positions(torch.tensor([[[1.0, 2.0, 3.0]]]), "exclusive", torch.ones(1, 1, 3, dtype=torch.bool)).tolist()
    [[[0.0, 1.0, 3.0]]]
    """
    q = torch.where(mask, value, 0.0)
    if how == "none":
        return q
    if how in ("inclusive", "exclusive"):
        total = q.cumsum(-1)
        return total if how == "inclusive" else total - q
    suffix = q.flip(-1).cumsum(-1).flip(-1)
    return torch.where(mask, suffix if how == "suffix" else suffix - q, 0.0)


def from_positions(positions: torch.Tensor, original: torch.Tensor, how: str, mask: torch.Tensor) -> torch.Tensor:
    """The quantity whose positions (``to_positions``) are ``positions``; entries that do not change any
    position (masked ones, the exclusive sums' unused end) keep ``original``.

    >>> z = torch.tensor([[[1.0, 2.0, 3.0]]]); every = torch.ones(1, 1, 3, dtype=torch.bool)
    >>> from_positions(to_positions(z, "inclusive", every), z, "inclusive", every).tolist()
    [[[1.0, 2.0, 3.0]]]
    """
    p = torch.where(mask, positions, 0.0)
    if how == "none":
        out = p
    elif how == "inclusive":
        out = p - torch.nn.functional.pad(p[..., :-1], (1, 0))
    elif how == "exclusive":  # q_t = p_{t+1} − p_t; the last real token's q moves no position
        out = torch.nn.functional.pad(p[..., 1:], (0, 1)) - p
        mask = mask & torch.nn.functional.pad(mask[..., 1:], (0, 1), value=False)
    elif how == "suffix":  # q_ij = p_ij − p_i,j+1
        out = p - torch.nn.functional.pad(p[..., 1:], (0, 1))
    else:  # suffix_exclusive: p_ij = Σ_{s>j} q_is, so q_ij = p_i,j−1 − p_ij; the first key's q moves nothing
        out = torch.nn.functional.pad(p[..., :-1], (1, 0)) - p
        mask = mask & torch.nn.functional.pad(mask[..., :-1], (1, 0), value=False)
    return torch.where(mask, out, original)


def _masked_line(positions: torch.Tensor, grid: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The least-squares line a + b·grid through ``positions`` over the masked entries of the last dim."""
    weight = mask.to(positions.dtype)
    count = weight.sum(-1, keepdim=True).clamp(min=1)
    mean_x, mean_y = (grid * weight).sum(-1, keepdim=True) / count, (positions * weight).sum(-1, keepdim=True) / count
    dx = (grid - mean_x) * weight
    variance = (dx * dx).sum(-1, keepdim=True)
    slope = torch.where(variance > 0, (dx * (positions - mean_y)).sum(-1, keepdim=True) / variance.clamp(min=1e-30),
                        0.0)
    return mean_y + slope * (grid - mean_x)


def _masked_range(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    low = torch.where(mask, values, float("inf")).amin(-1, keepdim=True)
    high = torch.where(mask, values, float("-inf")).amax(-1, keepdim=True)
    return torch.where(torch.isfinite(low), low, 0.0), torch.where(torch.isfinite(high), high, 0.0)


def _even_over_range(order_key: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """min + r/(n − 1)·(max − min), r the rank of ``order_key`` among the masked entries."""
    low, high = _masked_range(positions, mask)
    count = mask.sum(-1, keepdim=True).to(positions.dtype)
    key = torch.where(mask, order_key, float("inf"))
    rank = key.argsort(dim=-1, stable=True).argsort(dim=-1).to(positions.dtype)
    return low + rank / (count - 1).clamp(min=1) * (high - low)


def scale_edit(value: torch.Tensor, name: str, edit: PositionEdit, integer: torch.Tensor,
               lengths: list[int] | None, seeds: Sequence[int] | None = None) -> torch.Tensor:
    """``value`` (the hooked quantity) after the position-scale edit ``name`` in every head;
    ``integer``: the quantity of integer positions, shaped like ``value``; ``seeds``: one per row, what
    "random" draws its direction from (see :func:`_random_direction`; None: 0 for every row).

    >>> from repo_lens.model.registry import position_edit
    >>> z = torch.tensor([[[0.0, 3.0, 1.0, 2.0]]])
    >>> scale_edit(z, "rank", position_edit("repo"), torch.arange(4.0).expand(1, 1, 4), None).tolist()
    [[[0.0, 3.0, 1.0, 2.0]]]
    >>> scale_edit(z, "scaled", position_edit("repo"), torch.arange(4.0).expand(1, 1, 4), None).tolist()
    [[[0.0, 1.0, 2.0, 3.0]]]
    """
    mask = valid_mask(value, lengths, edit.pairwise).expand_as(value)
    positions = to_positions(value.float(), edit.sum, mask)
    grid = to_positions(integer.float(), edit.sum, mask)
    if name == "affine":
        new = _masked_line(positions, grid, mask)
    elif name == "rank":
        new = _even_over_range(positions, positions, mask)
    elif name == "scaled":
        new = _rescaled(grid, positions, mask)
    else:
        step = torch.where(mask, _masked_line(positions, grid, mask) - positions, 0.0)
        size = step.pow(2).sum(-1, keepdim=True).sqrt()
        rows = lengths if lengths is not None else [value.shape[-1]] * value.shape[0]
        direction = _random_direction(value, mask, rows, seeds if seeds is not None else [0] * len(rows))
        new = positions + size * direction
    if edit.sum == "suffix":  # CoPE's positions are sums of gates in [0, 1]: never below 0 (a hair above,
        new = new.clamp(min=SUFFIX_FLOOR)  # so that the layer's own re-summing cannot round below 0)
    return from_positions(new, value.float(), edit.sum, mask).to(value.dtype)


def _rescaled(grid: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The integer positions mapped linearly onto the range [min z, max z] of the head's positions: the
    lowest integer position goes to min z and the highest to max z. The integers' order is kept, not
    the head's: whatever the sign of the head's own trend, the result runs the way the integers do
    (up with the token index; for CoPE's suffix sums, down), so a head whose positions fall along the
    text gets rising ones. "affine" is the edit that keeps the head's own slope, sign included."""
    low, high = _masked_range(positions, mask)
    grid_low, grid_high = _masked_range(grid, mask)
    span = (grid_high - grid_low)
    return torch.where(span > 0, low + (grid - grid_low) / span.clamp(min=1e-30) * (high - low), positions)


def target_values(edit: PositionEdit, value: torch.Tensor, which: str) -> torch.Tensor:
    """The values of ``which`` ("integer" or "constant") shaped like ``value``.

    >>> from repo_lens.model.registry import position_edit
    >>> target_values(position_edit("repo"), torch.zeros(1, 2, 3), "integer")[0, 1].tolist()
    [0.0, 1.0, 2.0]
    """
    if which == "constant":
        return torch.full_like(value, edit.constant)
    if edit.integer is not None:
        return torch.full_like(value, edit.integer)
    if edit.pairwise:
        raise ValueError(f"{edit.hook}: a pairwise quantity needs a number as its integer value, not the index")
    index = torch.arange(value.shape[2], device=value.device, dtype=value.dtype)
    return index.expand_as(value)


def shuffle_orders(lengths: list[int], width: int, seeds: Sequence[int]) -> torch.Tensor:
    """[batch, width] token orders: row b's first ``lengths[b]`` entries are
    ``torch.randperm(lengths[b], generator=torch.Generator().manual_seed(seeds[b]))``, the rest (pads) stay;
    ``seeds``: one per row, :func:`prompt_seeds` (so the order is the prompt's own in any batch).

    >>> shuffle_orders([3, 2], 3, seeds=[0, 0])[:, 2].tolist()
    [1, 2]
    """
    orders = torch.arange(width).repeat(len(lengths), 1)
    for row, (length, seed) in enumerate(zip(lengths, seeds, strict=True)):
        orders[row, :length] = torch.randperm(length, generator=torch.Generator().manual_seed(seed))
    return orders


def window_orders(lengths: list[int], width: int, window: int, seeds: Sequence[int]) -> torch.Tensor:
    """[batch, width] token orders that permute tokens only within consecutive blocks of ``window``
    tokens (the last block of a row may be shorter; pads stay): a local disorder that keeps every
    token's position within ``window`` − 1 of its own. Row b's blocks are drawn in turn from
    ``torch.Generator().manual_seed(seeds[b])`` (:func:`prompt_seeds`: the prompt's own in any batch).

    >>> orders = window_orders([6], 6, 3, seeds=[0])[0].tolist()
    >>> sorted(orders[:3]), sorted(orders[3:])
    ([0, 1, 2], [3, 4, 5])
    """
    orders = torch.arange(width).repeat(len(lengths), 1)
    for row, (length, seed) in enumerate(zip(lengths, seeds, strict=True)):
        generator = torch.Generator().manual_seed(seed)
        for start in range(0, length, window):
            size = min(window, length - start)
            orders[row, start:start + size] = start + torch.randperm(size, generator=generator)
    return orders


def shuffled(value: torch.Tensor, orders: torch.Tensor, pairwise: bool) -> torch.Tensor:
    """``value`` with its tokens in ``orders``: new[..., t] = value[..., order[t]]. A pairwise quantity
    keeps causality: query row i permutes its visible keys 0..i in the order they appear in ``order``.

    >>> shuffled(torch.tensor([[[10.0, 11.0, 12.0]]]), torch.tensor([[2, 0, 1]]), pairwise=False).tolist()
    [[[12.0, 10.0, 11.0]]]
    """
    orders = orders.to(value.device)
    width = value.shape[-1]
    if not pairwise:
        return value.gather(-1, orders[:, None, :width].expand_as(value))
    rank = torch.empty_like(orders)
    rank.scatter_(1, orders, torch.arange(orders.shape[1], device=orders.device).expand_as(orders))
    keys = torch.arange(width, device=value.device)
    visible = keys[None, :] <= keys[:, None]  # [query, key]
    scores = torch.where(visible[None], rank[:, None, :width], width + keys[None, None, :])
    by_row = scores.argsort(dim=-1)  # [batch, query, key]: row i's visible keys first, in order's order
    return value.gather(-1, by_row[:, None].expand_as(value))


def token_orders(mode: Mode, lengths: list[int], width: int, seeds: Sequence[int]) -> torch.Tensor | None:
    """The token orders of "shuffle" (:func:`shuffle_orders`) and "window" (:func:`window_orders`), one
    per prompt (``seeds``: :func:`prompt_seeds`) and the same in every layer and head; None otherwise."""
    if mode.name == "shuffle":
        return shuffle_orders(lengths, width, seeds)
    if isinstance(mode, Window):
        return window_orders(lengths, width, mode.width, seeds)
    return None


def moved_positions(value: torch.Tensor, mode: Shift | Stretch, edit: PositionEdit,
                    lengths: list[int] | None) -> torch.Tensor:
    """``value`` (the hooked quantity) with its positions shifted by ``mode.offset`` or multiplied by
    ``mode.factor`` in every head (worked on the positions summed as the registry's ``sum`` says, then
    turned back; an exclusive sum starts at 0 by construction, so a shift leaves it as it is).

    >>> from repo_lens.model.registry import position_edit
    >>> z = torch.tensor([[[0.0, 1.0, 2.0]]])
    >>> moved_positions(z, Shift(offset=3), position_edit("repo"), None).tolist()
    [[[3.0, 4.0, 5.0]]]
    >>> moved_positions(z, Stretch(factor=0.5), position_edit("repo"), None).tolist()
    [[[0.0, 0.5, 1.0]]]
    """
    mask = valid_mask(value, lengths, edit.pairwise).expand_as(value)
    positions = to_positions(value.float(), edit.sum, mask)
    new = positions + mode.offset if isinstance(mode, Shift) else positions * mode.factor
    if edit.sum == "suffix":  # CoPE's positions index an embedding table from 0 (see scale_edit)
        new = new.clamp(min=SUFFIX_FLOOR)
    return from_positions(new, value.float(), edit.sum, mask).to(value.dtype)


def edit_values(value: torch.Tensor, mode: Mode, edit: PositionEdit, *, mean: torch.Tensor | None = None,
                orders: torch.Tensor | None = None, lengths: list[int] | None = None,
                seeds: Sequence[int] | None = None) -> torch.Tensor:
    """The quantity ``value`` after ``mode`` in every head (:func:`keep_heads` restricts it).
    ``mean`` [1, head, ≥pos (, ≥pos)]: the reference mean ("mean"); ``orders``: :func:`token_orders`
    ("shuffle", "window"); ``lengths``: each row's real tokens (None: every entry); ``seeds``: one per row,
    what "random" draws each head's direction from (the callers pass :func:`layer_seeds`).

    >>> from repo_lens.model.registry import position_edit
    >>> z = torch.full((1, 1, 3), 4.0)
    >>> edit_values(z, Interpolate(p=0.25), position_edit("repo")).tolist()
    [[[3.0, 3.25, 3.5]]]
    """
    if mode.name in ("integer", "constant"):
        return target_values(edit, value, mode.name)
    if isinstance(mode, Interpolate):
        return (1.0 - mode.p) * value + mode.p * target_values(edit, value, mode.toward)
    if mode.name in SCALE_MODES:
        return scale_edit(value, mode.name, edit, target_values(edit, value, "integer"), lengths, seeds)
    if isinstance(mode, (Shift, Stretch)):
        return moved_positions(value, mode, edit, lengths)
    if mode.name == "mean":
        width = value.shape[2]
        assert mean is not None  # "mean" mode: the caller passes the reference mean
        window = mean[:, :, :width, :width] if edit.pairwise else mean[:, :, :width]
        return window.to(value.device, value.dtype).expand_as(value)
    assert orders is not None  # a shuffle mode: the caller passes token_orders
    return shuffled(value, orders, edit.pairwise)


def keep_heads(edited: torch.Tensor, original: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """``edited`` in the heads where ``heads`` [head] is True, ``original`` elsewhere.

    >>> keep_heads(torch.ones(1, 2, 1), torch.zeros(1, 2, 1), torch.tensor([False, True])).flatten().tolist()
    [0.0, 1.0]
    """
    shape = (1, -1) + (1,) * (original.dim() - 2)
    return torch.where(heads.to(original.device).view(shape), edited, original)


def keep_tokens(edited: torch.Tensor, original: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
    """``edited`` at the tokens where ``tokens`` [batch, pos] is True (for a pairwise quantity, those
    tokens' query rows), ``original`` elsewhere; None: every token.

    >>> keep_tokens(torch.ones(1, 1, 3), torch.zeros(1, 1, 3), torch.tensor([[True, False, True]])).tolist()
    [[[1.0, 0.0, 1.0]]]
    """
    if tokens is None:
        return edited
    mask = tokens.to(original.device)[:, None, :original.shape[2]]
    mask = mask if original.dim() == 3 else mask[..., None]
    return torch.where(mask, edited, original)
