"""Trace: what one forward pass says about positions, saved as safetensors + JSON (never pickle)."""

from __future__ import annotations

import html
import json
import operator
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from repo_lens.atomic import atomic_write, remove_leftover_temp_files
from repo_lens.errors import InputError, TraceFileError
from repo_lens.model.registry import mechanism_kinds
from repo_lens.trace_file import TRACE_FORMAT_VERSION, TRACE_MARKER, read_trace_file
from repo_lens.validation import check_index

__all__ = ["TRACE_FORMAT_VERSION", "TRACE_MARKER", "Trace", "flag_nonfinite"]


@dataclass
class Trace:
    """Positions every head assigns every token, with the tokens and how they were obtained.

    ``positions[l, h, t]`` is the position head h of layer l rotates token t by (RoPE layers:
    t; NoPE: a constant; RePo: the learned z). ``extras`` holds further per-token arrays a
    mechanism records (e.g. learned increments), ``spans`` named token spans (end exclusive).

    Example:
        >>> import numpy as np
        >>> t = Trace(tokens=["a", "b"], token_ids=np.array([1, 2]), layer_kinds=["rope"],
        ...           positions=np.array([[[0.0, 1.0]]], dtype=np.float32))
        >>> t.n_layers, t.n_heads, len(t)
        (1, 1, 2)
        >>> t.head(0, 0).tolist()
        [0.0, 1.0]
    """

    tokens: list[str]
    token_ids: np.ndarray
    positions: np.ndarray
    layer_kinds: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (isinstance(self.tokens, str) or not isinstance(self.tokens, (list, tuple))
                or not all(isinstance(token, str) for token in self.tokens)):
            raise InputError(f"tokens must be a list of str, one display string per token; got {self.tokens!r:.80}")
        self.tokens = list(self.tokens)
        self.token_ids = _checked_token_ids(self.token_ids)
        self.positions = _checked_positions(self.positions)
        self.layer_kinds = _checked_layer_kinds(self.layer_kinds)
        for name, value in (("meta", self.meta), ("spans", self.spans), ("extras", self.extras)):
            if not isinstance(value, dict):
                raise InputError(f"{name} must be a dict, got {type(value).__name__}; pass {{}} for none")
        if self.positions.ndim != 3:
            raise InputError(f"positions must be (n_layers, n_heads, T), got shape {self.positions.shape}")
        n_tokens = self.positions.shape[2]
        if self.token_ids.shape != (n_tokens,) or len(self.tokens) != n_tokens:
            raise InputError(
                f"positions cover {n_tokens} tokens but token_ids has shape {self.token_ids.shape} "
                f"and tokens has {len(self.tokens)} entries; they must agree"
            )
        if len(self.layer_kinds) != self.positions.shape[0]:
            raise InputError(
                f"{len(self.layer_kinds)} layer kinds for {self.positions.shape[0]} layers of positions"
            )
        self.spans = {name: _checked_span(name, span, n_tokens) for name, span in self.spans.items()}
        self.extras = {name: _checked_extra(name, value, self.positions.shape) for name, value in self.extras.items()}

    def __len__(self) -> int:
        return int(self.positions.shape[2])

    @property
    def n_layers(self) -> int:
        return int(self.positions.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.positions.shape[1])

    def head(self, layer: int, head: int) -> np.ndarray:
        """Positions (T,) of one head (negative indices count from the end); a clear error names
        the valid ranges (:func:`repo_lens.validation.check_index`)."""
        return self.positions[check_index(layer, self.n_layers, "layer"), check_index(head, self.n_heads, "head")]

    def layer_ranges(self) -> dict[str, np.ndarray]:
        """Per layer, arrays of shape (n_layers,): ``min`` and ``max`` of the positions over every
        head and token, and the smallest, mean and largest per-head range d = max z − min z
        (``range_min``, ``range_mean``, ``range_max``; RePo Fig. 2). NaN positions are left out;
        a trace without tokens gives NaN.

        Example:
            >>> t = Trace(tokens=list("abc"), token_ids=[97, 98, 99], layer_kinds=["rope", "nope"],
            ...           positions=np.array([[[0, 1, 2], [0, 1, 2]], [[5, 5, 5], [0, 0, 0]]], dtype=np.float32))
            >>> {name: values.tolist() for name, values in t.layer_ranges().items()}
            {'min': [0.0, 0.0], 'max': [2.0, 5.0], 'range_min': [2.0, 0.0], 'range_mean': [2.0, 0.0], 'range_max': [2.0, 0.0]}
        """
        if len(self) == 0:
            empty = np.full(self.n_layers, np.nan)
            return {name: empty.copy() for name in ("min", "max", "range_min", "range_mean", "range_max")}
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a head of NaN only: NaN, flagged in meta already
            lows, highs = np.nanmin(self.positions, axis=2), np.nanmax(self.positions, axis=2)
        ranges = highs - lows
        return {"min": lows.min(axis=1), "max": highs.max(axis=1), "range_min": ranges.min(axis=1),
                "range_mean": ranges.mean(axis=1), "range_max": ranges.max(axis=1)}

    def __repr__(self) -> str:
        """One line: model, tokens (with the first of them), layers × heads and layer kinds.

        Example:
            >>> Trace(tokens=list("hi!"), token_ids=[104, 105, 33], layer_kinds=["rope", "repo", "repo"],
            ...       positions=np.zeros((3, 2, 3), dtype=np.float32), meta={"name": "tiny"})
            Trace('tiny', 3 tokens 'hi!', 3 layers × 2 heads: rope, repo ×2)
        """
        return (f"Trace({self._model_name()!r}, {len(self)} tokens {_preview(self.tokens, 40)!r}, "
                f"{self.n_layers} layers × {self.n_heads} heads: {_kind_runs(self.layer_kinds)})")

    def _repr_html_(self) -> str:
        """The summary a notebook shows: model, tokens and a preview, layers × heads, layer kinds, and
        per layer the kind and the position range (as :meth:`layer_ranges`); warnings from ``meta``."""
        ranges = self.layer_ranges()
        rows = "".join(
            f"<tr><td>{layer}</td><td>{html.escape(kind)}</td><td>{ranges['min'][layer]:.4g}</td>"
            f"<td>{ranges['max'][layer]:.4g}</td><td>{ranges['range_min'][layer]:.4g}</td>"
            f"<td>{ranges['range_mean'][layer]:.4g}</td><td>{ranges['range_max'][layer]:.4g}</td></tr>"
            for layer, kind in enumerate(self.layer_kinds))
        spans = ", ".join(f"{html.escape(name)} {start}–{end}" for name, (start, end) in self.spans.items())
        notes = [f"spans (token index, end exclusive): {spans}"] if spans else []
        notes += [html.escape(str(message)) for message in self.meta.get("warnings", [])]
        cell = 'style="text-align:right;padding:1px 8px"'
        return (
            '<div class="repo-lens-trace">'
            f"<p><b>Trace</b> of <code>{html.escape(self._model_name())}</code>: {len(self)} tokens, "
            f"{self.n_layers} layers × {self.n_heads} heads ({html.escape(_kind_runs(self.layer_kinds))})<br>"
            f'<code style="white-space:pre-wrap">{html.escape(_preview(self.tokens, 160))}</code></p>'
            f"<table><thead><tr><th {cell}>layer</th><th {cell}>kind</th><th {cell}>min z</th><th {cell}>max z</th>"
            f"<th {cell}>range d: min</th><th {cell}>mean</th><th {cell}>max over heads</th></tr></thead>"
            f"<tbody>{rows.replace('<td>', f'<td {cell}>')}</tbody></table>"
            + "".join(f"<p><small>{note}</small></p>" for note in notes) + "</div>"
        )

    def plot(self, kind: str = "spaced", **options: Any) -> Any:
        """A plotly figure of this trace: ``"spaced"`` (tokens laid out by position, one row per layer),
        ``"scatter"`` (index against position for one ``layer``), ``"ranges"`` (range per layer and
        head) or ``"patterns"`` (constant / mono / hybrid chunk shares); ``options`` go to the figure
        builder (:func:`repo_lens.plots.trace_figure`). In a notebook the figure shows itself.

        Example:
            >>> t = Trace(tokens=list("hi!"), token_ids=[104, 105, 33], layer_kinds=["rope"],
            ...           positions=np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32))
            >>> t.plot("ranges").data[0].z.tolist()
            [[2.0]]
        """
        from repo_lens.plots.notebook import trace_figure  # plotly loads when a figure is asked for

        return trace_figure(self, kind, **options)

    def _model_name(self) -> str:
        return str(self.meta.get("name") or self.meta.get("source") or "unnamed model")

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically as one .safetensors file (arrays) with the rest as JSON in its header."""
        document = {
            "format_version": TRACE_FORMAT_VERSION,
            "tokens": self.tokens,
            "layer_kinds": self.layer_kinds,
            "meta": self.meta,
            "spans": self.spans,
        }
        arrays = {"positions": np.ascontiguousarray(self.positions), "token_ids": np.ascontiguousarray(self.token_ids)}
        arrays.update({f"extras.{name}": np.ascontiguousarray(_checked_extra(name, value, self.positions.shape))
                       for name, value in self.extras.items()})
        metadata = {TRACE_MARKER: _json_document(document)}
        return atomic_write(path, lambda temp: save_file(arrays, str(temp), metadata=metadata))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trace":
        """Read a trace written by :meth:`save`. Every field is checked
        (:mod:`repo_lens.trace_file`): a corrupt, foreign or inconsistent file raises TraceFileError
        naming the file and the field. Non-finite positions are flagged in ``meta``
        (:func:`flag_nonfinite`), whoever wrote the file. Temp files that saves killed mid-write
        left in the file's directory are removed first (:mod:`repo_lens.atomic`)."""
        if (not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes)
                or "\x00" in os.fspath(path)):
            raise TraceFileError(f"the trace path must be a str or os.PathLike without NUL characters; "
                                 f"got {path!r:.80}")
        remove_leftover_temp_files(Path(path).parent)  # what a killed save left there
        trace = cls(**read_trace_file(Path(path)))
        flag_nonfinite(trace.positions, trace.meta)
        return trace


def _checked_token_ids(token_ids: Any) -> np.ndarray:
    ids = np.asarray(token_ids.detach().cpu().numpy() if hasattr(token_ids, "detach") else token_ids)
    if ids.size and ids.dtype.kind not in "iu":
        raise InputError(f"token_ids must be integers; got dtype {ids.dtype} (ids are never rounded)")
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int64).max):
        raise InputError(f"token_ids must lie in 0..2**63-1; got {ids.min()}..{ids.max()}")
    return ids.astype(np.int64)


def _checked_positions(positions: Any) -> np.ndarray:
    values = np.asarray(positions.detach().cpu().numpy() if hasattr(positions, "detach") else positions)
    if values.dtype.kind not in "iuf":
        raise InputError(f"positions must be real numbers (a float array (n_layers, n_heads, T)); got dtype "
                         f"{values.dtype}")
    with np.errstate(over="ignore"):
        converted = values.astype(np.float32)
    overflow = np.isinf(converted) & np.isfinite(values)
    if overflow.any():
        raise InputError(f"positions hold {values[overflow].flat[0]!r}, beyond float32's range (±3.4e38); "
                         "positions are stored as float32: rescale them")
    return converted


def _checked_layer_kinds(kinds: Any) -> list[str]:
    known = mechanism_kinds()
    if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)):
        raise InputError(f"layer_kinds must be a list of layer kinds, one per layer; got {kinds!r:.80}")
    bad = [kind for kind in kinds if not isinstance(kind, str) or kind not in known]
    if bad:
        raise InputError(f"layer_kinds holds {bad[0]!r}, not a registered kind; use one of {known}")
    return list(kinds)


def _checked_extra(name: Any, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(name, str) or not name:
        raise InputError(f"extras names must be non-empty strings; got {name!r}")
    array = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
    if array.dtype.kind not in "biuf":
        raise InputError(f"extras[{name!r}] must be a numeric or bool array; got dtype {array.dtype}")
    if array.shape != tuple(shape) and (name == "increments" or array.ndim == 0 or array.shape[0] != shape[2]):
        rows = "" if name == "increments" else f", or one row per token, ({shape[2]}, ...)"
        raise InputError(f"extras[{name!r}] has shape {array.shape}; expected the shape of positions, "
                         f"{tuple(shape)}{rows}")
    return array


def _checked_span(name: str, span: Any, n_tokens: int) -> tuple[int, int]:
    if not isinstance(name, str) or not name:
        raise InputError(f"span names must be non-empty strings; got {name!r}")
    try:
        start, end = span
        if isinstance(start, (bool, np.bool_)) or isinstance(end, (bool, np.bool_)):
            raise TypeError
        start, end = operator.index(start), operator.index(end)
    except (TypeError, ValueError):
        raise InputError(f"span {name!r} is {span!r}; give (start, end), two ints") from None
    if not 0 <= start <= end <= n_tokens:
        raise InputError(f"span {name!r} is ({start}, {end}); a span needs 0 <= start <= end <= {n_tokens} "
                         "(the trace's tokens, end exclusive)")
    return start, end


def _preview(tokens: list[str], limit: int) -> str:
    """The tokens joined, cut to ``limit`` characters with an ellipsis."""
    text = "".join(tokens)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind_runs(kinds: list[str]) -> str:
    """Layer kinds with repeats counted: ``rope ×2, repo ×4``."""
    runs: list[list[Any]] = []
    for kind in kinds:
        if runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        else:
            runs.append([kind, 1])
    return ", ".join(kind if count == 1 else f"{kind} ×{count}" for kind, count in runs)


def flag_nonfinite(positions: np.ndarray, meta: dict[str, Any], stacklevel: int = 3) -> None:
    """Record NaN or infinite ``positions`` (L, H, T) in ``meta``: ``meta["nonfinite_positions"]``
    lists the (layer, head) pairs that hold one, ``meta["nonfinite_counts"]`` how many positions,
    tokens and heads are affected, ``meta["warnings"]`` gets a message (once), and a warning is
    issued. With finite positions the two keys are removed, if present.

    Example:
        >>> import warnings
        >>> meta = {}
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     flag_nonfinite(np.array([[[0.0, np.nan]], [[1.0, 2.0]]]), meta)
        >>> meta["nonfinite_positions"], meta["nonfinite_counts"]
        ([[0, 0]], {'positions': 1, 'tokens': 1, 'heads': 1})
    """
    bad = ~np.isfinite(positions)
    if not bad.any():  # a flag a file claims without cause does not survive loading
        meta.pop("nonfinite_positions", None)
        meta.pop("nonfinite_counts", None)
        return
    heads = np.argwhere(bad.any(axis=2)).tolist()
    message = (
        f"{int(bad.sum())} positions are NaN or infinite, in (layer, head) {heads[:10]}"
        + (" …" if len(heads) > 10 else "")
        + "; the model's weights or input may be broken (try dtype='float32')"
    )
    meta["nonfinite_positions"] = heads
    meta["nonfinite_counts"] = {"positions": int(bad.sum()), "tokens": int(bad.any(axis=(0, 1)).sum()),
                                "heads": len(heads)}
    recorded = meta.setdefault("warnings", [])
    if message not in recorded:
        recorded.append(message)
    warnings.warn(message, stacklevel=stacklevel)


def _json_document(document: dict[str, Any]) -> str:
    try:
        return json.dumps(document, default=_jsonable)
    except (TypeError, ValueError) as error:
        where, problem = _json_problem(document, "the trace", set())
        raise InputError(
            f"cannot save the trace: {where} {problem or error}; meta must hold JSON data (dicts with str keys, lists, "
            "str, numbers, bools, None; numpy values and paths are converted)"
        ) from None


def _json_problem(value: Any, where: str, open_containers: set[int]) -> tuple[str, str]:
    if isinstance(value, (dict, list, tuple)):
        if id(value) in open_containers:
            return where, "refers back to itself (a circular reference)"
        open_containers.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, (str, int, float, bool)) and key is not None:
                return where, f"has the key {key!r} ({type(key).__name__}), not a str"
            found = _json_problem(item, str(key) if where == "the trace" else f"{where}[{key!r}]", open_containers)
            if found[1]:
                return found
        open_containers.discard(id(value))
        return where, ""
    if value is None or isinstance(value, (str, int, float)):
        return where, ""
    try:
        _jsonable(value)
    except TypeError as error:
        return where, str(error)
    return where, ""


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"is of type {type(value).__name__}, which JSON cannot hold ({value!r:.60})")
