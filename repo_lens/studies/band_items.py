"""The records and summary of the ``bands`` study of ``repo-lens analyze``: which rotary frequency bands carry
each head's position signal, what the learned positions change about that, and where the attention sink's
score comes from.

Background: "Round and Round We Go! What makes Rotary Positional Encodings useful?" (arXiv 2410.06205)
finds the high-frequency bands serving positional heads and the low ones semantics; "When Attention Sink
Emerges in Language Models" (arXiv 2410.10781) studies the mass heads put on the first token.

For each window of T tokens the study takes up to ``query_rows`` query rows, evenly spaced over 1..T−1
(the last row always among them; row 0, which sees only itself, never), and scores each row i against
every key j = 0..i with :func:`repo_lens.analysis.score_decomposition` (P = Σ_i (i + 1) pairs). For each
measured layer and head, with t_b(i, j) band b's term of the score at the layer's own positions, t°_b(i, j)
the same q and k rotated at the integer positions 0..T−1 (the layer's ``hook_pos`` set to the index) and
c_b(i, j) the band's content term (``hook_pos`` set to one constant: no rotation between i and j, and
Σ_b c_b is the content part):

- ``band_abs_mean[b]`` = Σ_ij |t_b| / P and ``band_share[b]`` = Σ_ij |t_b| / Σ_b' Σ_ij |t_b'|; the same with
  t° in ``band_abs_mean_integer`` and ``band_share_integer``;
- ``position_band_abs_mean[b]`` = Σ_ij |t_b − c_b| / P, band b's part of the position signal (and
  ``position_band_abs_mean_integer`` with t°);
- ``dominant_position_band`` = argmax_b Σ_ij |t_b − c_b| / Σ_b' Σ_ij |t_b' − c_b'|, the band carrying most of
  the position part (``dominant_position_band_integer`` with t°); None where that part is 0 in every band
  (NoPE, constant positions);
- ``band_frequencies[b]``: band b's angle per unit of position (radians; 0 for channels no rotation touches);
- ``content_abs_mean``, ``position_abs_mean``: Σ_ij |content| / P and Σ_ij |position| / P of the score's two parts;
- the sink, key 0: ``sink_mass`` = mean_i A_i0 of the layer's pattern, ``sink_mass_content``,
  ``sink_mass_position`` and ``sink_mass_integer`` of the pattern the content part alone, the position part
  alone and the integer positions would give; ``sink_content`` and ``sink_position`` = mean_i of the two
  parts of the score at key 0 (``*_abs``: of their magnitudes) and ``sink_content_share`` =
  Σ_i |content_i0| / (Σ_i |content_i0| + Σ_i |position_i0|).

Per-head fields are [layer][head] lists, band fields [layer][head][band]. Layers that only bias their
scores (ALiBi, FoX, CoPE, GRAPE-A, …) and layers that rotate by the token index while biasing have no
positions to move the bands with: their band fields are empty lists and their dominant bands None, and their
records still split the score and measure the sink. The summary pools the windows (sums weighted by pairs,
sink fields by query rows) into one layer × head table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from repo_lens.analysis import score_decomposition
from repo_lens.data.windows import Window
from repo_lens.errors import InputError, RepoLensError
from repo_lens.model.registry import mechanism_traits
from repo_lens.protocol import LensProtocol
from repo_lens.validation import require_lens_model

if TYPE_CHECKING:
    from repo_lens.analysis import ScoreDecomposition

STUDY = "the bands study"
# [layer][head] fields weighted by the window's pairs, and by its query rows, when windows are pooled
PAIR_FIELDS = ("content_abs_mean", "position_abs_mean")
ROW_FIELDS = ("sink_mass", "sink_mass_content", "sink_mass_position", "sink_mass_integer", "sink_content",
              "sink_position", "sink_content_abs", "sink_position_abs")
HEAD_FIELDS = (*PAIR_FIELDS, *ROW_FIELDS, "sink_content_share")
SUMMED_BAND_FIELDS = ("band_abs_mean", "band_abs_mean_integer", "position_band_abs_mean",
                      "position_band_abs_mean_integer")  # [layer][head][band], weighted by pairs
BAND_FIELDS = ("band_frequencies", *SUMMED_BAND_FIELDS, "band_share", "band_share_integer")
DOMINANT_FIELDS = ("dominant_position_band", "dominant_position_band_integer")


# ------------------------------------------------------------------------------------------------ records


def sampled_query_rows(n_tokens: int, count: int) -> list[int]:
    """Up to ``count`` query rows of a window of ``n_tokens``, evenly spaced over 1..n_tokens−1, the last row
    always among them (none for a window of one token).

    >>> sampled_query_rows(10, 3), sampled_query_rows(10, 1), sampled_query_rows(4, 32), sampled_query_rows(1, 5)
    ([1, 5, 9], [9], [1, 2, 3], [])
    """
    if n_tokens < 2:
        return []
    if count >= n_tokens - 1:
        return list(range(1, n_tokens))
    return sorted({n_tokens - 1 - int(round(step)) for step in np.linspace(0.0, n_tokens - 2, count)})


def chosen_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """The layers to measure: ``layers`` (the ``--layers`` option; empty for every layer), each once and in range.

    >>> chosen_layers([], 3), chosen_layers([2, 0], 3)
    ([0, 1, 2], [0, 2])
    """
    if not layers:
        return list(range(n_layers))
    for layer in layers:
        if not 0 <= layer < n_layers:
            raise InputError(f"--layers {layer}: the model has {n_layers} layers (0..{n_layers - 1}); pass layers "
                             "in that range, or leave --layers out to measure every layer")
    if len(set(layers)) != len(layers):
        raise InputError(f"--layers lists a layer more than once ({', '.join(map(str, layers))}); give each once")
    return sorted(layers)


def band_window_records(lens: LensProtocol, windows: list[Window], options: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`band_record` of each window (``options``: ``query_rows``, ``layers``): the ``bands`` study's record.
    Each window is decomposed on its own (``--batch-size`` does not batch this study)."""
    model = require_lens_model(lens, STUDY)
    layers = chosen_layers(options.get("layers") or [], len(model.blocks))
    context = lens.context_length
    for window in windows:
        if context and len(window.ids) > context:
            raise InputError(f"{STUDY} decomposes windows within the model's context of {context} tokens, and this "
                             f"window has {len(window.ids)}; leave out --beyond-context, or pass --window {context} "
                             "or less")
    return [band_record(lens, list(window.ids), layers, int(options.get("query_rows", 32))) for window in windows]


def band_record(lens: LensProtocol, ids: Sequence[int], layers: Sequence[int], query_rows: int = 32) -> dict[str, Any]:
    """The ``bands`` record of one sequence of token ids (see the module description for every field).

    Example:
        >>> import repo_lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> record = band_record(lens, list(range(10, 30)), layers=[0, 2], query_rows=4)
        >>> record["query_rows"], record["layer_kinds"], len(record["band_share"][1][0])
        ([1, 7, 13, 19], ['rope', 'repo'], 4)
        >>> round(sum(record["band_share"][1][0]), 6), record["band_share"][0] == record["band_share_integer"][0]  # RoPE's positions are the integers
        (1.0, True)
    """
    model = require_lens_model(lens, STUDY)
    rows = sampled_query_rows(len(ids), query_rows)
    record: dict[str, Any] = {"layers": list(layers),
                              "layer_kinds": [str(model.cfg.layer_mechanisms[layer]) for layer in layers],
                              "query_rows": rows, "n_query_rows": len(rows), "n_pairs": sum(row + 1 for row in rows)}
    if not rows:
        return record
    measured = [layer_measures(lens, ids, layer, rows) for layer in layers]
    for name in (*HEAD_FIELDS, *BAND_FIELDS):
        record[name] = [_plain(one[name]) for one in measured]
    for name in DOMINANT_FIELDS:
        record[name] = [list(one[name]) for one in measured]
    return record


def layer_measures(lens: LensProtocol, ids: Sequence[int], layer: int, rows: list[int]) -> dict[str, Any]:
    """The fields of one layer (arrays [head] and [head, band]; dominant bands as lists) for the query ``rows``."""
    model = require_lens_model(lens, STUDY)
    rotary = mechanism_traits(str(model.cfg.layer_mechanisms[layer])).role == "rotary"  # rotates at its positions
    seen: dict[str, torch.Tensor] = {}
    found = _decomposed(lens, model, ids, layer, rows, read=seen if rotary else None)
    measures: dict[str, Any] = score_split_measures(found)
    n_heads = len(found.heads)
    if found.n_bands == 0 or not rotary:  # nothing moves the bands
        empty = np.zeros((n_heads, 0))
        return {**measures, **{name: empty for name in BAND_FIELDS}, **{name: [None] * n_heads
                                                                         for name in DOMINANT_FIELDS}}
    actual = found.bands
    positions = seen["positions"]
    index = torch.arange(positions.shape[-1], dtype=positions.dtype, device=positions.device)
    integer = actual if bool((positions == index).all()) else _decomposed(
        lens, model, ids, layer, rows, at="integer", reference=None).bands
    content = actual if bool((positions == positions[:, :1]).all()) else _decomposed(
        lens, model, ids, layer, rows, at="constant", reference=None).bands
    frequencies = found.frequencies
    assert frequencies is not None  # a layer with bands has their frequencies
    return {**measures, **band_measures(actual, integer, content, found.mask, frequencies)}


def _decomposed(lens: LensProtocol, model: Any, ids: Sequence[int], layer: int, rows: list[int], *,
                at: str | None = None, read: dict[str, torch.Tensor] | None = None,
                reference: str | None = "integer") -> ScoreDecomposition:
    """score_decomposition of the query ``rows``, with the layer's positions set to the integers or to a constant
    (``at``) or read into ``read["positions"]`` [head, T] on the way."""
    name = f"blocks.{layer}.attn.hook_pos"
    hooks: list[tuple[str, Any]] = []
    if at is not None:
        hooks.append((name, partial(_set_positions, at)))
    if read is not None:
        hooks.append((name, partial(_read_positions, read)))
    with model.hooks(fwd_hooks=hooks):
        return score_decomposition(lens, list(ids), layer, queries=rows, reference=reference)


def _set_positions(at: str, positions: torch.Tensor, hook: Any = None) -> torch.Tensor:
    """[batch, head, pos] positions replaced by the token index ("integer") or by 0 ("constant")."""
    if at == "integer":
        return torch.arange(positions.shape[-1], dtype=positions.dtype, device=positions.device).expand(
            positions.shape).clone()
    return torch.zeros_like(positions)


def _read_positions(read: dict[str, torch.Tensor], positions: torch.Tensor, hook: Any = None) -> None:
    read["positions"] = positions[0].detach().float().clone()


def score_split_measures(found: ScoreDecomposition) -> dict[str, np.ndarray]:
    """The per-head fields [head] of one decomposition whose keys start at token 0: the two parts' mean
    magnitudes over the visible pairs, and the sink (key 0) under each pattern and in each part.

    Example:
        >>> import repo_lens
        >>> from repo_lens.analysis import score_decomposition
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("fox", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> measures = score_split_measures(score_decomposition(lens, list(range(10, 30)), 2, queries=[5, 19]))
        >>> measures["sink_mass"].shape, bool(((measures["sink_content_share"] >= 0) & (measures["sink_content_share"] <= 1)).all())
        ((4,), True)
    """
    if found.keys[0] != 0:
        raise RepoLensError("score_split_measures needs the keys from token 0 (the sink); decompose every key")
    visible = found.mask[None]
    pairs = int(found.mask.sum())
    content0, position0 = found.content[:, :, 0], found.position[:, :, 0]
    content_abs0, position_abs0 = np.abs(content0).mean(1), np.abs(position0).mean(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = content_abs0 / (content_abs0 + position_abs0)
    return {
        "content_abs_mean": np.where(visible, np.abs(found.content), 0.0).sum((1, 2), dtype=np.float64) / pairs,
        "position_abs_mean": np.where(visible, np.abs(found.position), 0.0).sum((1, 2), dtype=np.float64) / pairs,
        "sink_mass": found.patterns["actual"][:, :, 0].mean(1),
        "sink_mass_content": found.patterns["content"][:, :, 0].mean(1),
        "sink_mass_position": found.patterns["position"][:, :, 0].mean(1),
        "sink_mass_integer": found.patterns["reference"][:, :, 0].mean(1),
        "sink_content": content0.mean(1), "sink_position": position0.mean(1),
        "sink_content_abs": content_abs0, "sink_position_abs": position_abs0, "sink_content_share": share,
    }


def band_measures(actual: np.ndarray, integer: np.ndarray, content: np.ndarray, mask: np.ndarray,
                  frequencies: np.ndarray) -> dict[str, Any]:
    """The band fields [head, band] and dominant bands (lists) from the band terms [head, query, key, band] at the
    layer's positions (``actual``), at the integers (``integer``) and with no rotation (``content``), over the
    ``mask`` [query, key] pairs.

    Example:
        >>> terms = np.array([1.0, -3.0]).reshape(1, 1, 1, 2)  # one head, one pair, two bands
        >>> found = band_measures(terms, terms * 0.5, np.zeros_like(terms), np.ones((1, 1), bool), np.array([[1.0, 0.1]]))
        >>> found["band_share"].tolist(), found["position_band_abs_mean_integer"].tolist(), found["dominant_position_band"]
        ([[0.25, 0.75]], [[0.5, 1.5]], [1])
    """
    visible = mask[None, :, :, None]
    pairs = int(mask.sum())

    def mean_abs(values: np.ndarray) -> np.ndarray:
        return np.where(visible, np.abs(values), 0.0).sum((1, 2), dtype=np.float64) / pairs

    out: dict[str, Any] = {"band_frequencies": np.asarray(frequencies, dtype=np.float64),
                           "band_abs_mean": mean_abs(actual), "band_abs_mean_integer": mean_abs(integer),
                           "position_band_abs_mean": mean_abs(actual - content),
                           "position_band_abs_mean_integer": mean_abs(integer - content)}
    out["band_share"], out["band_share_integer"] = shares(out["band_abs_mean"]), shares(out["band_abs_mean_integer"])
    out["dominant_position_band"] = dominant_bands(out["position_band_abs_mean"])
    out["dominant_position_band_integer"] = dominant_bands(out["position_band_abs_mean_integer"])
    return out


def shares(magnitudes: np.ndarray) -> np.ndarray:
    """Each band's share of its head's total magnitude [head, band] (NaN for a head whose total is 0).

    >>> shares(np.array([[1.0, 3.0], [0.0, 0.0]])).tolist()
    [[0.25, 0.75], [nan, nan]]
    """
    total = magnitudes.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, magnitudes / np.where(total > 0, total, 1.0), np.nan)


def dominant_bands(magnitudes: np.ndarray) -> list[int | None]:
    """Per head, the band of largest magnitude; None for a head whose bands are all 0 (no position part).

    >>> dominant_bands(np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]]))
    [1, None]
    """
    return [int(np.argmax(row)) if row.size and np.isfinite(row).all() and row.sum() > 0 else None
            for row in magnitudes]


def _plain(values: Any) -> Any:
    """A float array as nested lists with None for NaN (records and JSON hold no NaN)."""
    array = np.asarray(values, dtype=np.float64)
    out = array.astype(object)
    out[~np.isfinite(array)] = None
    return out.tolist()


# ------------------------------------------------------------------------------------------------ summary


class BandTotals:
    """Running sums of the records of one run, pooled by :meth:`summary` (the records stream past once)."""

    def __init__(self) -> None:
        self.layers: list[int] | None = None
        self.kinds: list[str] = []
        self.windows = self.empty_windows = self.rows = self.pairs = 0
        self.heads: dict[str, np.ndarray] = {}  # [layer, head] sums weighted by pairs or rows
        self.bands: dict[str, list[np.ndarray]] = {}  # per layer [head, band] sums weighted by pairs
        self.frequencies: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []  # per layer [head, band]: windows whose own dominant band it is

    def add(self, record: dict[str, Any]) -> None:
        if not record.get("n_query_rows"):
            self.empty_windows += 1
            return
        if self.layers is None:
            self._start(record)
        elif list(record["layers"]) != self.layers:
            raise RepoLensError(f"a record measures layers {list(record['layers'])}, the run's first {self.layers}; "
                                "a run's records come from one --layers setting (start a new --out directory)")
        pairs, rows = int(record["n_pairs"]), int(record["n_query_rows"])
        self.windows, self.rows, self.pairs = self.windows + 1, self.rows + rows, self.pairs + pairs
        for name in (*PAIR_FIELDS, *ROW_FIELDS):
            self.heads[name] += _array(record[name]) * (pairs if name in PAIR_FIELDS else rows)
        for name in SUMMED_BAND_FIELDS:
            for layer, values in enumerate(record[name]):
                self.bands[name][layer] += _array(values) * pairs
        for layer, dominant in enumerate(record["dominant_position_band"]):
            for head, band in enumerate(dominant):
                if band is not None:
                    self.counts[layer][head, int(band)] += 1

    def _start(self, record: dict[str, Any]) -> None:
        self.layers, self.kinds = list(record["layers"]), list(record["layer_kinds"])
        shape = _array(record["sink_mass"]).shape
        self.heads = {name: np.zeros(shape) for name in (*PAIR_FIELDS, *ROW_FIELDS)}
        self.frequencies = [_array(values) for values in record["band_frequencies"]]
        self.bands = {name: [np.zeros_like(values) for values in self.frequencies] for name in SUMMED_BAND_FIELDS}
        self.counts = [np.zeros(values.shape, dtype=np.int64) for values in self.frequencies]

    def summary(self) -> dict[str, Any]:
        """The pooled layer × head table (see :func:`summarize_bands`)."""
        out: dict[str, Any] = {"layers": self.layers or [], "layer_kinds_measured": self.kinds,
                               "windows": self.windows, "windows_without_query_rows": self.empty_windows,
                               "query_rows": self.rows, "pairs": self.pairs}
        if self.layers is None:
            return out
        means = {name: self.heads[name] / (self.pairs if name in PAIR_FIELDS else self.rows) for name in self.heads}
        with np.errstate(invalid="ignore", divide="ignore"):
            split = means["position_abs_mean"] / (means["position_abs_mean"] + means["content_abs_mean"])
            sink_share = means["sink_content_abs"] / (means["sink_content_abs"] + means["sink_position_abs"])
        out.update({f"{name}_by_layer_head": _plain(value) for name, value in means.items()})
        out.update(position_share_by_layer_head=_plain(split), sink_content_share_by_layer_head=_plain(sink_share),
                   sink_mass_by_layer=_plain(means["sink_mass"].mean(1)),
                   sink_content_share_by_layer=_plain(_mean_over_heads(sink_share)),
                   position_share_by_layer=_plain(_mean_over_heads(split)))
        out.update(self._band_summary())
        rows = band_table(out)
        out["table_by_layer_head"] = rows
        out["markdown_by_layer_head"] = band_markdown(rows)
        return out

    def _band_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n_bands": max((values.shape[1] for values in self.frequencies), default=0),
                               "band_frequencies_by_layer_head": [_plain(values) for values in self.frequencies]}
        for name, integer in (("band_share", False), ("band_share_integer", True)):
            source = self.bands["band_abs_mean_integer" if integer else "band_abs_mean"]
            out[f"{name}_by_layer_head"] = [_plain(shares(values)) for values in source]
        for suffix in ("", "_integer"):
            source = self.bands[f"position_band_abs_mean{suffix}"]
            out[f"position_band_share{suffix}_by_layer_head"] = [_plain(shares(values)) for values in source]
            out[f"dominant_position_band{suffix}_by_layer_head"] = [dominant_bands(values) for values in source]
            out[f"fast_band_share{suffix}_by_layer_head"] = [
                _plain(fast_share(shares(values), frequencies))
                for values, frequencies in zip(self.bands[f"band_abs_mean{suffix}"], self.frequencies)]
        out["dominant_position_wavelength_by_layer_head"] = [
            [wavelength(frequencies[head], band) for head, band in enumerate(dominant)]
            for frequencies, dominant in zip(self.frequencies, out["dominant_position_band_by_layer_head"])]
        out["dominant_position_band_agreement_by_layer_head"] = [
            [None if band is None or not counts[head].sum() else float(counts[head, band] / counts[head].sum())
             for head, band in enumerate(dominant)]
            for counts, dominant in zip(self.counts, out["dominant_position_band_by_layer_head"])]
        return out


def _mean_over_heads(values: np.ndarray) -> np.ndarray:
    """[layer]: the mean over the heads whose value is defined (NaN where none is)."""
    defined = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined, values, 0.0).sum(1) / defined.sum(1)


def _array(values: Any) -> np.ndarray:
    """Nested lists (None for NaN) as a float array."""
    return np.asarray([] if values is None else values, dtype=np.float64)


def fast_share(band_shares: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """[head]: the share of the bands faster than the median frequency of the head's rotating bands (the fast
    half; NaN for a layer without bands).

    >>> fast_share(np.array([[0.5, 0.3, 0.2]]), np.array([[1.0, 0.1, 0.0]])).tolist()  # median of 1 and 0.1: 0.55
    [0.5]
    """
    if band_shares.shape[-1] == 0:
        return np.full(band_shares.shape[0], np.nan)
    out = np.empty(band_shares.shape[0])
    for head, (values, angles) in enumerate(zip(band_shares, frequencies)):
        rotating = angles[angles > 0]
        out[head] = values[angles > np.median(rotating)].sum() if rotating.size else np.nan
    return out


def wavelength(frequencies: np.ndarray, band: int | None) -> float | None:
    """2π / frequency of ``band``: the tokens over which it turns once (None for no band or a band that never turns).

    >>> round(wavelength(np.array([1.0, 0.01]), 1), 1), wavelength(np.array([1.0, 0.0]), 1)
    (628.3, None)
    """
    if band is None or not frequencies[band] > 0:
        return None
    return float(2 * math.pi / frequencies[band])


def summarize_bands(records: Iterable[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``bands`` summary from the records streamed once: per measured layer and head (``*_by_layer_head``),
    the pooled means of the per-head fields, the bands' shares of |score terms| at the actual and the integer
    positions and of the position part, the dominant position band (argmax of the pooled position-band share),
    its wavelength in tokens and the share of windows whose own dominant band it is, the share of the faster
    half of the bands, the position part's share of the score, the sink; per layer the mean sink mass, sink
    content share and position share over heads; and the table as rows and as Markdown.

    Example:
        >>> import repo_lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> records = [band_record(lens, list(range(n, n + 24)), [2], 8) for n in (10, 40)]
        >>> summary = summarize_bands(records)
        >>> summary["windows"], summary["n_bands"], len(summary["table_by_layer_head"])
        (2, 4, 4)
        >>> print(summary["markdown_by_layer_head"].splitlines()[0])
        | layer | kind | head | position band | wavelength (tokens) | band at integer positions | fast-band share (actual / integer) | position share of the score | sink mass (actual / integer) | sink content share |
    """
    totals = BandTotals()
    for record in records:
        totals.add(record)
    return totals.summary()


def band_table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured layer and head of a :func:`summarize_bands` summary."""
    rows = []
    for index, layer in enumerate(summary["layers"]):
        for head in range(len(summary["sink_mass_by_layer_head"][index])):
            def at(name: str) -> Any:
                return summary[f"{name}_by_layer_head"][index][head]

            rows.append({"layer": layer, "kind": summary["layer_kinds_measured"][index], "head": head,
                         "position_band": at("dominant_position_band"),
                         "wavelength": at("dominant_position_wavelength"),
                         "position_band_integer": at("dominant_position_band_integer"),
                         "position_band_agreement": at("dominant_position_band_agreement"),
                         "fast_band_share": at("fast_band_share"), "fast_band_share_integer": at("fast_band_share_integer"),
                         "position_share": at("position_share"), "sink_mass": at("sink_mass"),
                         "sink_mass_integer": at("sink_mass_integer"), "sink_content_share": at("sink_content_share")})
    return rows


def band_markdown(rows: list[dict[str, Any]]) -> str:
    """The :func:`band_table` rows as a Markdown table ("–" where a layer has no bands or a value is undefined).

    >>> print(band_markdown([{"layer": 2, "kind": "repo", "head": 0, "position_band": 1, "wavelength": 62.83,
    ...     "position_band_integer": 0, "position_band_agreement": 0.5, "fast_band_share": 0.4,
    ...     "fast_band_share_integer": 0.6, "position_share": 0.3, "sink_mass": 0.2, "sink_mass_integer": 0.1,
    ...     "sink_content_share": 0.9}]).splitlines()[-1])
    | 2 | repo | 0 | 1 | 62.8 | 0 | 0.40 / 0.60 | 0.30 | 0.20 / 0.10 | 0.90 |
    """
    header = ("| layer | kind | head | position band | wavelength (tokens) | band at integer positions | fast-band share "
              "(actual / integer) | position share of the score | sink mass (actual / integer) | sink content share |")
    lines = [header, "|" + "---|" * 10]
    for row in rows:
        cells = [row["layer"], row["kind"], row["head"], _cell(row["position_band"], "d"), _cell(row["wavelength"], ".1f"),
                 _cell(row["position_band_integer"], "d"),
                 f"{_cell(row['fast_band_share'], '.2f')} / {_cell(row['fast_band_share_integer'], '.2f')}",
                 _cell(row["position_share"], ".2f"),
                 f"{_cell(row['sink_mass'], '.2f')} / {_cell(row['sink_mass_integer'], '.2f')}",
                 _cell(row["sink_content_share"], ".2f")]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def _cell(value: Any, spec: str) -> str:
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def band_figures(summary: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's figures: the band-usage map (:func:`repo_lens.plots.band_usage_figure`), when a window was measured."""
    if not summary.get("windows"):
        return {}
    from repo_lens.plots.bands import band_usage_figure

    return {"band_usage": band_usage_figure(summary)}
