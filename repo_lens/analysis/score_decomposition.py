"""Why a head attends where it does: every pre-softmax attention score of one layer split into what the
content and what the positions contribute, by rotary frequency band, with the attention each part alone
would give.

A rotary layer scores query i against key j as a sum over its d_head/2 frequency bands b (the channel
pairs (b, b + d_rot/2) of the NeoX rotate-half layout):

    s_ij = Σ_b q_i^(b)ᵀ R(θ_b (p_j − p_i)) k_j^(b) · scale

with q and k before the rotation (after any qk-norm, and times the rope's attention scaling), p the
positions the layer rotates by (``hook_pos``: RoPE's index, RePo's z, the running sums of learned
increments or phases) and ``scale`` the layer's own (1/√d_head). So:

- ``content``: the same sum at p_i = p_j, i.e. q·k before rotation;
- ``position``: the rest, score − content;
- ``bands``: each band's term q_i^(b)·k_j^(b) of the rotated q and k (channels that no rotation touches,
  where only part of each head rotates, form one last band at frequency 0);
- ``patterns["reference"]``: the same q and k rotated at other positions (the integers 0..T−1, one
  constant, or an array of your own).

The parts are read from what q·k uses (``hook_rot_q``, ``hook_rot_k``) turned back by the layer's own
angles, so a mechanism that encodes q and k otherwise but still as a rotation by the position's angle of
what they would be at position 0 is read the same way (PoPE: each pair's softplus norm at the position's
phase; its content is Σ_b m_b(q) m_b(k)).

A layer that adds a bias to q·k instead (ALiBi, FoX, CoPE, GRAPE-AP, GRAPE-A, learned relative logits)
scores q·k + bias: ``content`` is q·k before any rotation, ``position`` everything else (the bias, and
the rotation's share where such a layer also rotates by the index). Its reference pattern puts the
bias at the reference positions: r_j − r_i for ALiBi and FoX (so "integer" is −(i − j), ALiBi at slope
1), and for biases that depend on the query, "integer" or "constant" as
:func:`repo_lens.interventions.ablate` sets them. Bands exist only where the layer rotates.

In a model with a decay (``ModelConfig.decay``: a bias A_i − A_j added to every rotary layer's scores, read
from the layer's ``hook_decay``) the score includes the decay's bias, which belongs to ``position``; the bands
add up to the score minus it. The reference pattern keeps the decay as it is (it is no position a reference
sets, and :func:`repo_lens.interventions.ablate` leaves it too).

One forward pass runs up to the layer and stops once it has the layer's rotated queries and keys
(``hook_rot_q``, ``hook_rot_k``), its positions and whatever its mechanism's bias reads; then only the
query rows asked for are scored, a few rows at a time, against every key before them. No T × T (or
T × T × band) tensor is built for rows that were not asked for; ``bands`` is computed when first read.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from repo_lens.analysis._checks import as_float_array
from repo_lens.analysis.score_rows import REFERENCES, LayerView, hf_view, lens_dtype, native_view, reference_positions
from repo_lens.capture import forward_lock
from repo_lens.errors import InputError, MemoryLimitError
from repo_lens.lens_inputs import prepare_ids
from repo_lens.protocol import LensProtocol
from repo_lens.validation import check_index, check_indices, require_lens_model

if TYPE_CHECKING:
    import pandas as pd

    from repo_lens.hf.model import HFLens

__all__ = ["PATTERN_NAMES", "REFERENCES", "ScoreDecomposition", "score_decomposition"]

PATTERN_NAMES = ("actual", "content", "position", "reference")
RESERVED_SPANS = ("rest", "all")  # span_summary's own rows
# Largest number of scores [head, rows, keys] scored at once; about ten such tensors are alive per chunk
_ELEMENT_BUDGET = 1 << 17

# ----------------------------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class ScoreDecomposition:
    """The scores of one layer's query rows split into content and position (see the module description).

    ``content``, ``position`` [head, query, key]: content + position is the layer's pre-softmax score
    (q·k · scale + any bias); entries whose key comes after the query (``mask`` False) are NaN.
    ``patterns[name]`` [head, query, key]: the attention the score (``"actual"``: the layer's own
    pattern), its content part alone, its position part alone, or the score at the reference positions
    would give: each a softmax over every key the query sees (the layer's own normalisation, also when
    ``keys`` selects some of them, so a subset's entries sum to less than 1), 0 where masked.
    ``mask`` [query, key]: True where the key is at or before the query. ``heads``, ``queries``,
    ``keys``: what the axes hold. ``frequencies`` [head, band]: each band's angle per unit of position
    (radians; 0 for the channels no rotation touches), None where the layer rotates nothing.
    ``reference``: "integer", "constant", "array" (positions you gave) or "none" (no reference pattern).
    ``bands`` [head, query, key, band] is computed when first read (see :attr:`bands`).
    """

    layer: int
    kind: str
    heads: np.ndarray
    queries: np.ndarray
    keys: np.ndarray
    content: np.ndarray
    position: np.ndarray
    patterns: dict[str, np.ndarray]
    mask: np.ndarray
    frequencies: np.ndarray | None
    reference: str
    n_tokens: int
    _band_source: _BandSource | None = field(default=None, repr=False)
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def score(self) -> np.ndarray:
        """The layer's pre-softmax score [head, query, key]: content + position (NaN where masked)."""
        return self.content + self.position

    @property
    def bands(self) -> np.ndarray:
        """[head, query, key, band]: each rotary band's term of the score; over the bands they add up to
        the score minus any bias (NaN where masked). Computed on first read and kept: it is n_bands times
        the size of ``content``. A layer that rotates nothing has no bands: reading them is an InputError."""
        if "bands" not in self._cache:
            if self._band_source is None:
                raise InputError(
                    f"layer {self.layer} ({self.kind!r}) rotates neither q nor k, so its scores have no frequency "
                    "bands; its split is content (q·k) and position (the bias): read .content and .position"
                )
            self._cache["bands"] = self._band_source.bands(self.mask)
        return self._cache["bands"]

    @property
    def n_bands(self) -> int:
        """How many bands the layer's scores have (0 where it rotates nothing)."""
        return 0 if self.frequencies is None else int(self.frequencies.shape[1])

    def table(self, *, bands: bool = False, patterns: bool = False) -> pd.DataFrame:
        """A tidy pandas DataFrame, one row per visible (head, query, key) and part: columns ``layer``,
        ``head``, ``query``, ``key``, ``part`` ("content", "position"; with ``bands`` "band", with
        ``patterns`` "pattern_actual", "pattern_content", "pattern_position", "pattern_reference"),
        ``band`` (the band's number for "band" rows, else <NA>) and ``value``. Masked entries are left out."""
        import pandas as pd

        head, query, key = np.meshgrid(self.heads, self.queries, self.keys, indexing="ij")
        visible = np.broadcast_to(self.mask, head.shape)
        coords = {"head": head[visible], "query": query[visible], "key": key[visible]}
        parts: list[tuple[str, np.ndarray]] = [("content", self.content), ("position", self.position)]
        if patterns:
            parts += [(f"pattern_{name}", values) for name, values in self.patterns.items()]
        frames = [pd.DataFrame({"layer": self.layer, **coords, "part": part, "band": pd.NA, "value": values[visible]})
                  for part, values in parts]
        if bands:
            band_values = self.bands
            for band in range(band_values.shape[-1]):
                frames.append(pd.DataFrame({"layer": self.layer, **coords, "part": "band", "band": band,
                                            "value": band_values[..., band][visible]}))
        out = pd.concat(frames, ignore_index=True)
        out["band"] = out["band"].astype("Int64")
        return out

    def span_summary(self, spans: Mapping[str, tuple[int, int]]) -> pd.DataFrame:
        """Per head, query row and named span (name -> (start, end) token span, end exclusive, as the
        prompt builders of :mod:`repo_lens.data` give them; spans disjoint), over the selected keys the
        query sees in the span: ``keys`` (how many), the attention mass each pattern puts there (columns
        ``actual``, ``content``, ``position`` and, unless ``reference=None``, ``reference``) and ``position_share``, the share of the
        score's variance over those keys that the position part explains, Cov(position, score) / Var(score)
        (the content part explains the rest; NaN for fewer than two keys or a constant score). Two rows
        are added: ``"rest"`` (the selected keys in no span) and ``"all"`` (every selected key).

        Example:
            >>> import repo_lens
            >>> from repo_lens.model.tiny import tiny_model
            >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
            >>> found = score_decomposition(lens, list(range(10, 30)), layer=2, queries=[18, 19])
            >>> summary = found.span_summary({"needle": (5, 9), "first": (0, 1)})
            >>> sorted(set(summary.span)), len(summary)
            (['all', 'first', 'needle', 'rest'], 32)
            >>> bool(abs(summary[summary.span == "all"].actual - 1.0).max() < 1e-5)
            True
        """
        import pandas as pd

        named = _checked_spans(spans, self.n_tokens)
        covered = np.zeros(len(self.keys), dtype=bool)
        groups: list[tuple[str, np.ndarray]] = []
        for name, (start, end) in named.items():
            inside = (self.keys >= start) & (self.keys < end)
            covered |= inside
            groups.append((name, inside))
        groups += [("rest", ~covered), ("all", np.ones(len(self.keys), dtype=bool))]
        score = self.score
        rows = []
        n_heads, n_queries = len(self.heads), len(self.queries)
        head_index, query_index = np.meshgrid(self.heads, self.queries, indexing="ij")
        for name, inside in groups:
            visible = self.mask & inside[None, :]  # [query, key]
            count = np.broadcast_to(visible.sum(-1), (n_heads, n_queries))
            masses = {pattern: np.where(visible, values, 0.0).sum(-1) for pattern, values in self.patterns.items()}
            rows.append(pd.DataFrame({
                "layer": self.layer, "head": head_index.ravel(), "query": query_index.ravel(), "span": name,
                "keys": count.ravel(), **{pattern: mass.ravel() for pattern, mass in masses.items()},
                "position_share": _position_share(score, self.position, visible).ravel(),
            }))
        return pd.concat(rows, ignore_index=True)


def _position_share(score: np.ndarray, position: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """[head, query]: Cov(position, score) / Var(score) over the ``visible`` [query, key] keys of each row."""
    weight = np.broadcast_to(visible, score.shape)
    count = weight.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(weight, score, 0.0)
        p = np.where(weight, position, 0.0)
        s_centred = np.where(weight, s - s.sum(-1, keepdims=True) / np.maximum(count, 1)[..., None], 0.0)
        p_centred = np.where(weight, p - p.sum(-1, keepdims=True) / np.maximum(count, 1)[..., None], 0.0)
        variance = (s_centred * s_centred).sum(-1)
        share = (p_centred * s_centred).sum(-1) / variance
    tiny = variance <= 1e-12 * np.maximum((s * s).sum(-1), 1e-300)
    return np.where((count < 2) | tiny, np.nan, share)


def _checked_spans(spans: Any, n_tokens: int) -> dict[str, tuple[int, int]]:
    """name -> (start, end) integer pairs within the tokens, disjoint, not using the reserved names."""
    if not isinstance(spans, Mapping):
        raise InputError(f"spans must be a dict name -> (start, end); got {type(spans).__name__}")
    checked: dict[str, tuple[int, int]] = {}
    for name, value in spans.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"span names must be non-empty strings; got {name!r}")
        if name in RESERVED_SPANS:
            raise InputError(f"span name {name!r} is reserved ({', '.join(RESERVED_SPANS)} are rows of the summary); "
                             "rename your span")
        try:
            start, end = value
            if isinstance(start, bool) or isinstance(end, bool):
                raise TypeError
            start, end = operator.index(start), operator.index(end)
        except (TypeError, ValueError):
            raise InputError(f"span {name!r} must be a pair of integers (start, end), end exclusive; got {value!r}"
                             ) from None
        if not 0 <= start < end <= n_tokens:
            raise InputError(f"span {name!r} = {(start, end)} must be non-empty and within the {n_tokens} tokens "
                             f"(0 <= start < end <= {n_tokens}, end exclusive)")
        checked[name] = (start, end)
    ordered = sorted(checked.items(), key=lambda item: item[1])
    for (name_a, (_, end_a)), (name_b, (start_b, _)) in zip(ordered, ordered[1:]):
        if start_b < end_a:
            raise InputError(f"spans {name_a!r} = {checked[name_a]} and {name_b!r} = {checked[name_b]} overlap; "
                             "spans must be disjoint")
    return checked


# ---------------------------------------------------------------------------------------------- the bands


@dataclass(frozen=True)
class _BandSource:
    """What :attr:`ScoreDecomposition.bands` is computed from: the rotated query rows [head, query, d] and
    keys [head, key, d] of the selected heads and keys, and the layer's scale."""

    queries: torch.Tensor
    keys: torch.Tensor
    n_pairs: int
    scale: float

    def bands(self, mask: np.ndarray) -> np.ndarray:
        n_heads, n_queries, d_head = self.queries.shape
        n_keys, pairs = self.keys.shape[1], self.n_pairs
        n_bands = pairs + (1 if 2 * pairs < d_head else 0)
        dtype = np.float64 if self.queries.dtype == torch.float64 else np.float32
        _check_result_memory(n_heads * n_queries * n_keys * n_bands * np.dtype(dtype).itemsize,
                             "the bands", "decompose fewer heads or query rows (heads=, queries=)")
        out = np.empty((n_heads, n_queries, n_keys, n_bands), dtype=dtype)
        with torch.inference_mode():
            for head in range(n_heads):  # one head at a time keeps the temporaries to one head's size
                q, k = self.queries[head], self.keys[head]
                terms = q[:, None, :pairs] * k[None, :, :pairs]
                terms += q[:, None, pairs:2 * pairs] * k[None, :, pairs:2 * pairs]
                out[head, :, :, :pairs] = (terms * self.scale).cpu().numpy()
                if n_bands > pairs:
                    out[head, :, :, pairs] = (q[:, 2 * pairs:] @ k[:, 2 * pairs:].T * self.scale).cpu().numpy()
        out[:, ~mask] = np.nan
        return out


# ------------------------------------------------------------------------------------------ the arithmetic


def _masked_softmax(values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return values.masked_fill(~allowed, float("-inf")).softmax(dim=-1)


class _Rows:
    """The chosen heads, rows and keys of a :class:`LayerView`, scored a few rows at a time into numpy arrays."""

    def __init__(self, view: LayerView, rows: list[int], heads: list[int], keys: list[int]) -> None:
        self.view, self.rows, self.n_heads = view, rows, len(heads)
        device = view.keys.device
        every_head = view.keys.shape[0]
        # a bias is computed for every head (the mechanisms work on all of them); otherwise for the chosen ones
        biased = view.row_bias is not None or view.kept_bias is not None
        self.work = torch.arange(every_head, device=device) if biased else torch.tensor(heads, device=device)
        self.pick = torch.tensor(heads, device=device) if biased else torch.arange(len(heads), device=device)
        self.key_index = torch.arange(view.keys.shape[1], device=device)
        self.selected = torch.tensor(keys, device=device)
        self.row_index = torch.tensor(rows, device=device)
        self.dtype = np.float64 if view.keys.dtype == torch.float64 else np.float32
        self.chunk = max(1, _ELEMENT_BUDGET // max(1, len(self.work) * view.keys.shape[1]))
        identity = bool(torch.equal(self.work, torch.arange(every_head, device=device)))
        self.q_rows = view.q_rows if identity else view.q_rows[self.work]
        self.keys = view.keys if identity else view.keys[self.work]
        self.every_head = bool(torch.equal(self.pick, torch.arange(len(self.work), device=device)))
        self.every_key = keys == list(range(view.keys.shape[1]))

    def blocks(self) -> list[slice]:
        return [slice(first, first + self.chunk) for first in range(0, len(self.rows), self.chunk)]

    def new(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        return {name: np.empty((self.n_heads, len(self.rows), len(self.selected)), dtype=self.dtype) for name in names}

    def allowed(self, block: slice) -> torch.Tensor:
        return self.key_index[None, :] <= self.row_index[block][:, None]

    def qk(self, block: slice) -> torch.Tensor:
        return torch.matmul(self.q_rows[:, block], self.keys.transpose(-1, -2)).mul_(self.view.scale)

    def put(self, out: dict[str, np.ndarray], block: slice, parts: dict[str, torch.Tensor],
            allowed: torch.Tensor) -> None:
        """Write the chosen heads and keys of ``parts`` [work heads, r, K] into ``out`` (NaN where the key comes
        after the query; a pattern is 0 there already)."""
        hidden = None if self.every_key else ~allowed[:, self.selected]
        for name, values in parts.items():
            chosen = values if self.every_head else values[self.pick]
            chosen = chosen if self.every_key else chosen[:, :, self.selected]
            if not name.startswith("pattern_"):
                chosen = chosen.masked_fill(~allowed if hidden is None else hidden, float("nan"))
            torch.from_numpy(out[name])[:, block].copy_(chosen)

    def bias(self, function: Any, block: slice, qk: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        masked = qk.masked_fill(~allowed, float("-inf"))
        return function(self.q_rows[:, block], masked, self.row_index[block], self.key_index).to(qk.dtype)


def _decompose(view: LayerView, rows: list[int], heads: list[int], keys: list[int],
               reference: str | torch.Tensor | None) -> tuple[dict[str, np.ndarray], _BandSource | None]:
    """content, position and the patterns [head, query, key] of the chosen heads, rows and keys, in two passes
    (the actual scores, then the reference ones: one set of turned-back or re-rotated keys alive at a time)."""
    chosen = _Rows(view, rows, heads, keys)
    unrotated_q = unrotated_k = None
    if view.rotation is not None:
        assert view.rotated_at is not None  # a rotating layer says where it rotated
        at = view.rotated_at[chosen.work]
        unrotated_q = view.rotation.rotate(chosen.q_rows, -at[:, chosen.row_index], chosen.work)
        unrotated_k = view.rotation.rotate(chosen.keys, -at, chosen.work)
    out = chosen.new(["content", "position", "pattern_actual", "pattern_content", "pattern_position"])
    for block in chosen.blocks():
        allowed = chosen.allowed(block)
        qk = chosen.qk(block)
        score = qk if view.row_bias is None else qk + chosen.bias(view.row_bias, block, qk, allowed)
        if view.kept_bias is not None:  # the model's decay: part of the position share
            score = score + chosen.bias(view.kept_bias, block, qk, allowed)
        content = qk if unrotated_q is None or unrotated_k is None else torch.matmul(
            unrotated_q[:, block], unrotated_k.transpose(-1, -2)).mul_(view.scale)
        position = score - content
        chosen.put(out, block, {"content": content, "position": position,
                                "pattern_actual": _masked_softmax(score, allowed),
                                "pattern_content": _masked_softmax(content, allowed),
                                "pattern_position": _masked_softmax(position, allowed)}, allowed)
        del qk, score, content, position
    if reference is not None:
        reference_q = reference_k = None
        if view.rotary_role and unrotated_q is not None and unrotated_k is not None:  # the same q and k rotated there
            assert view.rotation is not None  # unrotated vectors come from a rotation
            positions = reference_positions(reference, view.keys.shape[0], view.keys.shape[1], view.keys.device)
            positions = positions[chosen.work]
            reference_q = view.rotation.rotate(unrotated_q, positions[:, chosen.row_index], chosen.work)
            reference_k = view.rotation.rotate(unrotated_k, positions, chosen.work)
        unrotated_q = unrotated_k = None  # only the reference keys stay alive for the second pass
        out.update(_reference_pattern(view, chosen, reference_q, reference_k))
    band_source = None
    if view.rotation is not None:
        band_queries = chosen.q_rows if chosen.every_head else chosen.q_rows[chosen.pick]
        band_keys = chosen.keys if chosen.every_head else chosen.keys[chosen.pick]
        band_source = _BandSource(band_queries, band_keys if chosen.every_key else band_keys[:, chosen.selected],
                                  view.rotation.n_pairs, view.scale)
    return out, band_source


def _reference_pattern(view: LayerView, chosen: _Rows, reference_q: torch.Tensor | None,
                       reference_k: torch.Tensor | None) -> dict[str, np.ndarray]:
    """The pattern at the reference positions: of the queries and keys rotated there (``reference_q``,
    ``reference_k``: a layer whose mechanism rotates), else of q·k with the bias the mechanism puts there."""
    out = chosen.new(["pattern_reference"])
    for block in chosen.blocks():
        allowed = chosen.allowed(block)
        if reference_q is not None and reference_k is not None:
            scores = torch.matmul(reference_q[:, block], reference_k.transpose(-1, -2)).mul_(view.scale)
        else:  # q·k as the layer has them, with the bias at the reference positions (if any bias)
            scores = chosen.qk(block)
            if view.reference_bias is not None:
                scores = scores + chosen.bias(view.reference_bias, block, scores, allowed)
        if view.kept_bias is not None:  # the model's decay, which no reference changes
            scores = scores + chosen.bias(view.kept_bias, block, scores, allowed)
        chosen.put(out, block, {"pattern_reference": _masked_softmax(scores, allowed)}, allowed)
    return out


# ------------------------------------------------------------------------------------------ the checks


def _selection(value: Any, size: int, name: str, owner: str, default: list[int]) -> list[int]:
    """``value`` (None: ``default``) checked by :func:`repo_lens.validation.check_indices`, each index once."""
    if value is None:
        return default
    chosen = check_indices(value, size, name, owner=owner)
    seen: set[int] = set()
    for index in chosen:
        if index in seen:
            raise InputError(f"{name}s lists {index} more than once; give each {name} once")
        seen.add(index)
    return chosen


def _checked_reference(reference: Any, n_heads: int, n_tokens: int) -> str | torch.Tensor | None:
    """"integer", "constant", None, or a finite [head, token] (or [token]) array as a float32 tensor."""
    if reference is None or (isinstance(reference, str) and reference in REFERENCES):
        return reference
    if isinstance(reference, str):
        raise InputError(f"reference {reference!r} is not one of {', '.join(map(repr, REFERENCES))}; or pass an "
                         f"array of positions, shape ({n_heads}, {n_tokens}) (heads × tokens) or ({n_tokens},), "
                         "or None for no reference pattern")
    if isinstance(reference, torch.Tensor):
        reference = reference.detach().cpu().numpy()
    array = as_float_array(reference, "reference", min_ndim=1)
    if array.shape not in ((n_heads, n_tokens), (n_tokens,)):
        raise InputError(f"reference positions have shape {array.shape}; pass ({n_heads}, {n_tokens}) (one position "
                         f"per head and token of this input) or ({n_tokens},) (the same in every head)")
    if array.ndim == 1:
        array = np.broadcast_to(array, (n_heads, n_tokens))
    return torch.as_tensor(np.ascontiguousarray(array), dtype=torch.float32)


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _check_result_memory(n_bytes: int, what: str, remedy: str) -> None:
    available = _available_bytes()
    if available is not None and n_bytes > 0.8 * available:
        raise MemoryLimitError(f"{what} would take {n_bytes / 2**30:.1f} GiB, more than this machine has free "
                               f"({available / 2**30:.1f} GiB); {remedy}")


# ------------------------------------------------------------------------------------------ the entry point


def score_decomposition(lens: LensProtocol, inputs: Any, layer: int, *, heads: int | Sequence[int] | None = None,
                        queries: int | Sequence[int] | None = None, keys: int | Sequence[int] | None = None,
                        reference: str | np.ndarray | torch.Tensor | Sequence[float] | None = "integer",
                        ) -> ScoreDecomposition:
    """Split layer ``layer``'s pre-softmax scores of ``inputs`` (a text or token ids) into content and
    position, by rotary frequency band, with the attention each part would give alone (see the module
    description for the definitions).

    ``heads``, ``queries`` (query rows), ``keys``: an index or a list of indices (numpy's too; negatives
    count from the end); defaults: every head, every query row, every key up to the last query row. Only
    the query rows asked for are scored. ``reference``: the positions of ``patterns["reference"]``:
    "integer" (0..T−1, RoPE's), "constant" (one position for every token: no positional signal), an
    array of positions [head, token] (or [token] for every head; rotary layers and key-minus-query biases
    such as ALiBi and FoX), or None for no reference pattern. In the layer whose positions
    :func:`repo_lens.interventions.ablate` edits to "integer" or "constant", its pattern is this one.

    ``lens``: a Lens from :func:`repo_lens.load`, or a generic Hugging Face lens
    (:func:`repo_lens.hf.load_hf`; RoPE layers whose attention calls ``apply_rotary_pos_emb``, read
    through nnsight, with eager attention, whose T × T weights the generic path builds anyway).
    Scores are computed in float64 for a float64 model, else in float32, as the layers score.

    Refused, with an InputError naming the argument and what it accepts, before anything runs: a layer,
    head, query row or key out of range; keys that all come after the last query row (nothing to
    decompose; keys after only some queries are masked instead); an unknown reference, or positions of the
    wrong shape or not finite, or an array where the layer's positions depend on the query. Refused too: a
    layer that normalises q and k after rotating them, and a generic Hugging Face layer whose rotation
    repo_lens cannot identify. A result larger than the free memory is a MemoryLimitError.

    Example:
        >>> import repo_lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> found = score_decomposition(lens, [5, 9, 2, 7, 3, 8], layer=2, queries=[4, 5])
        >>> found.content.shape, found.bands.shape, found.mask.tolist()[0]
        ((4, 2, 6), (4, 2, 6, 4), [True, True, True, True, True, False])
        >>> bool(np.allclose(found.bands.sum(-1)[:, found.mask], found.score[:, found.mask], atol=1e-5))
        True
        >>> round(float(found.patterns["actual"].sum(-1).min()), 5)
        1.0
    """
    hf, owner, n_layers, n_heads = _model_and_sizes(lens)
    parameter = next(owner.parameters())
    layer = check_index(layer, n_layers, "layer", owner="model")
    ids, _ = prepare_ids(lens, inputs, truncate=False, allow_beyond_context=False)
    n_tokens = len(ids)
    head_list, rows, key_list = _selected_axes(heads, queries, keys, n_heads, n_tokens)
    checked_reference = _checked_reference(reference, n_heads, n_tokens)
    dtype = lens_dtype(parameter)
    _check_decomposition_memory(len(head_list), len(rows), len(key_list), dtype)
    if checked_reference is not None and not isinstance(checked_reference, str):
        checked_reference = checked_reference.to(parameter.device)
    n_keys = max(max(rows), max(key_list)) + 1  # the keys the query rows see, and any chosen key after them
    view = (hf_view(cast("HFLens", lens), ids, layer, rows, n_keys, dtype, checked_reference) if hf
            else native_view(lens, ids, layer, rows, n_keys, dtype, checked_reference))
    with forward_lock(owner), torch.inference_mode():  # the bias may run the mechanism's hooks
        parts, band_source = _decompose(view, rows, head_list, key_list, checked_reference)
    return _decomposition_result(layer, view, head_list, rows, key_list, parts, band_source, checked_reference,
                                 n_tokens)


def _decomposition_result(layer: int, view: LayerView, heads: list[int], rows: list[int], keys: list[int],
                          parts: dict[str, np.ndarray], band_source: _BandSource | None,
                          reference: str | torch.Tensor | None, n_tokens: int) -> ScoreDecomposition:
    rows_array, keys_array = np.asarray(rows, dtype=np.int64), np.asarray(keys, dtype=np.int64)
    return ScoreDecomposition(
        layer=layer, kind=view.kind, heads=np.asarray(heads, dtype=np.int64), queries=rows_array,
        keys=keys_array, content=parts["content"], position=parts["position"],
        patterns={name: parts[f"pattern_{name}"] for name in PATTERN_NAMES if f"pattern_{name}" in parts},
        mask=keys_array[None, :] <= rows_array[:, None], frequencies=_band_frequencies(view, heads),
        reference=_reference_label(reference), n_tokens=n_tokens, _band_source=band_source)


def _model_and_sizes(lens: LensProtocol) -> tuple[bool, Any, int, int]:
    """(whether ``lens`` is a generic Hugging Face lens, the model that owns its parameters, its number of layers,
    its number of heads)."""
    hf_model: Any = getattr(lens, "hf_model", None)
    if hf_model is not None and hasattr(lens, "nn"):
        return True, hf_model, int(lens.n_layers), int(lens.n_heads)
    model = require_lens_model(lens, "score_decomposition")
    return False, model, len(model.blocks), int(model.cfg.n_heads)


def _selected_axes(heads: Any, queries: Any, keys: Any, n_heads: int, n_tokens: int
                   ) -> tuple[list[int], list[int], list[int]]:
    """(heads, query rows, keys) checked, with their defaults: every head, every query row, every key up to the
    last query row; keys that all come after the last query row are an InputError."""
    head_list = _selection(heads, n_heads, "head", "model", list(range(n_heads)))
    rows = _selection(queries, n_tokens, "query row", "input", list(range(n_tokens)))
    last = max(rows)
    key_list = _selection(keys, n_tokens, "key", "input", list(range(last + 1)))
    if min(key_list) > last:
        raise InputError(f"every key asked for ({_shown(key_list)}) comes after the last query row ({last}): a query "
                         f"attends only to keys at or before it, so nothing is left to decompose; pass keys in "
                         f"0..{last}, or later query rows")
    return head_list, rows, key_list


def _check_decomposition_memory(n_heads: int, n_rows: int, n_keys: int, dtype: torch.dtype) -> None:
    itemsize = 8 if dtype == torch.float64 else 4
    _check_result_memory(6 * n_heads * n_rows * n_keys * itemsize, "the decomposition",
                         "pass fewer query rows (queries=), keys (keys=) or heads (heads=)")


def _band_frequencies(view: LayerView, heads: list[int]) -> np.ndarray | None:
    """[head, band] each band's angle per unit of position, a last band at 0 where part of each head is not
    rotated; None where the layer rotates nothing."""
    if view.rotation is None:
        return None
    pairs = view.rotation.frequencies[torch.tensor(heads)].double().cpu().numpy()
    if 2 * view.rotation.n_pairs >= view.keys.shape[-1]:
        return pairs
    return np.concatenate((pairs, np.zeros((len(heads), 1))), axis=1)


def _reference_label(reference: str | torch.Tensor | None) -> str:
    if reference is None:
        return "none"
    return reference if isinstance(reference, str) else "array"


def _shown(values: list[int]) -> str:
    return ", ".join(map(str, values[:6])) + (", …" if len(values) > 6 else "")
