"""Reading a trace file (``Trace.load``): the safetensors header and arrays, checked field by field.

A trace file is one safetensors file: the arrays ``positions`` (float32, (L, H, T)),
``token_ids`` (integers, (T,)) and ``extras.NAME``, and in its header, under ``repo_lens_trace``,
a JSON object with ``format_version``, ``tokens``, ``layer_kinds``, ``meta`` and ``spans``. Every
field is checked before a Trace is built, as strictly as a checkpoint is: a file that breaks a
rule raises :class:`repo_lens.errors.TraceFileError` naming the file, the field, what it holds and
what a trace holds there. Non-finite positions are allowed (and flagged by ``Trace.load``). A layer kind
the registry renamed since the file was written is read under its current name (with a DeprecationWarning),
where the model's loader format (``meta["format"]``) says the old name meant it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from repo_lens.errors import TraceFileError
from repo_lens.model.former_names import current_setting_keys
from repo_lens.model.mechanism_table import current_kinds, renamed_message
from repo_lens.model.registry import mechanism_kinds
from repo_lens.validation import json_nesting_depth

TRACE_MARKER = "repo_lens_trace"
TRACE_FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (1,)
MAX_HEADER_BYTES = 64 * 2**20  # the safetensors header (tokens, meta, spans as JSON)
MAX_JSON_DEPTH = 64  # nesting of the trace document; what Trace.save writes nests a few levels
DOCUMENT_FIELDS = ("format_version", "tokens", "layer_kinds", "meta", "spans")
EXTRAS_PREFIX = "extras."
_PER_HEAD_ONLY = ("increments",)  # extras that must have the shape of positions


def read_trace_file(path: Path) -> dict[str, Any]:
    """The checked fields of the trace file at ``path``, as keyword arguments of ``Trace``.

    Example:
        >>> import tempfile, numpy as np
        >>> from repo_lens.trace import Trace
        >>> path = Path(tempfile.mkdtemp()) / "t.safetensors"
        >>> _ = Trace(["a", "b"], np.array([1, 2]), np.zeros((1, 1, 2), np.float32), ["rope"]).save(path)
        >>> sorted(read_trace_file(path))
        ['extras', 'layer_kinds', 'meta', 'positions', 'spans', 'token_ids', 'tokens']
    """
    if not path.is_file():
        raise TraceFileError(f"no trace file at {path}; pass a file written by Trace.save")
    _check_header_size(path)
    try:
        with safe_open(str(path), framework="np") as file:
            header = file.metadata() or {}
            arrays = {name: file.get_tensor(name) for name in file.keys()}
    except (SafetensorError, OSError, ValueError, TypeError) as error:
        raise TraceFileError(
            f"{path} is not a readable repo_lens trace (corrupt, truncated or not safetensors: {error})"
        ) from None
    if TRACE_MARKER not in header:
        raise TraceFileError(
            f"{path} is a safetensors file but not a repo_lens trace (no '{TRACE_MARKER}' header); "
            "traces are written by Trace.save / `repo-lens trace --save`"
        )
    check = _Checker(path)
    document = check.document(header[TRACE_MARKER])
    positions = check.positions(arrays)
    n_layers, n_heads, n_tokens = positions.shape
    tokens, token_ids = check.tokens(document.get("tokens"), n_tokens), check.token_ids(arrays, n_tokens)
    kinds = check.layer_kinds(document.get("layer_kinds"), n_layers)
    meta = check.meta(document.get("meta", {}))
    return {
        "tokens": tokens,
        "token_ids": token_ids,
        "positions": positions,
        "layer_kinds": current_layer_kinds(path, kinds, meta),
        "meta": meta,
        "spans": check.spans(document.get("spans", {}), n_tokens),
        "extras": check.extras(arrays, positions.shape),
    }


def current_layer_kinds(path: Path, kinds: list[str], meta: dict[str, Any]) -> list[str]:
    """The trace's layer kinds under their current names: a kind written under the name the registry has since
    given another equation (a kind's ``formerly`` trait) is renamed where the trace's model came from the loader
    format that wrote it so, in ``meta["mechanism"]["layer_kinds"]`` too, with a DeprecationWarning.

    >>> import warnings
    >>> meta = {"format": "grape", "mechanism": {"layer_kinds": ["rope", "grape-m"]}}
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     current_layer_kinds(Path("t.safetensors"), ["rope", "grape-m"], meta), meta["mechanism"]["layer_kinds"]
    (['rope', 'grape-m-context'], ['rope', 'grape-m-context'])
    """
    source_format = meta.get("format") if isinstance(meta.get("format"), str) else None
    current = current_kinds(kinds, source_format=source_format)
    if current == kinds:
        return kinds
    warnings.warn(renamed_message(kinds, current, f"the trace file {path} (a model loaded from format "
                                                  f"{source_format!r})"), DeprecationWarning, stacklevel=4)
    recorded = meta.get("mechanism")
    if isinstance(recorded, dict) and isinstance(recorded.get("layer_kinds"), list) and all(
            isinstance(kind, str) for kind in recorded["layer_kinds"]):
        recorded["layer_kinds"] = current_kinds(recorded["layer_kinds"], source_format=source_format)
    return current


def _check_header_size(path: Path) -> None:
    try:
        with open(path, "rb") as file:
            prefix = file.read(8)
            file_size = file.seek(0, 2)
    except OSError as error:
        raise TraceFileError(
            f"cannot read the trace file {path}: {error.strerror or error}; check its permissions"
        ) from None
    if len(prefix) < 8:
        raise TraceFileError(f"{path} is not a readable repo_lens trace: {file_size} bytes, too short for safetensors")
    size = int.from_bytes(prefix, "little")
    if size > file_size - 8:
        raise TraceFileError(f"{path} is not a readable repo_lens trace (corrupt or truncated): its header claims "
                             f"{size:,} bytes, the file has {file_size:,}")
    if size > MAX_HEADER_BYTES:
        raise TraceFileError(f"{path} is not a readable repo_lens trace: its header of {size:,} bytes exceeds a "
                             f"trace's limit of {MAX_HEADER_BYTES:,}")


def _describe(value: Any) -> str:
    shown = repr(value)
    return f"{shown[:60]}{'…' if len(shown) > 60 else ''} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    """Checks one file's fields; every error names the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, found: str, expected: str) -> TraceFileError:
        return TraceFileError(f"{self.path}: trace field '{field}' is {found}; expected {expected}")

    def document(self, text: str) -> dict[str, Any]:
        opens = text.count("[") + text.count("{")
        if opens > MAX_JSON_DEPTH and json_nesting_depth(text) > MAX_JSON_DEPTH:
            raise self.fail(TRACE_MARKER, f"JSON nested {json_nesting_depth(text)} levels deep",
                            f"at most {MAX_JSON_DEPTH} levels (the file is damaged or hostile)")
        try:
            document = json.loads(text)
        except ValueError as error:  # invalid JSON, or an integer of thousands of digits
            raise TraceFileError(f"{self.path} has a damaged trace header (invalid JSON: {error})") from None
        if not isinstance(document, dict):
            raise self.fail(TRACE_MARKER, _describe(document), f"a JSON object with {', '.join(DOCUMENT_FIELDS)}")
        unknown = sorted(set(document) - set(DOCUMENT_FIELDS))
        if unknown:
            raise self.fail(unknown[0], "present", f"only the fields {', '.join(DOCUMENT_FIELDS)} (trace format "
                            f"{TRACE_FORMAT_VERSION}); a newer repo_lens may have written it: upgrade repo_lens")
        self.format_version(document.get("format_version"))
        for name in ("tokens", "layer_kinds"):
            if name not in document:
                raise self.fail(name, "missing", "it in every trace (written by Trace.save)")
        return document

    def format_version(self, version: Any) -> None:
        if _is_int(version) and version > max(SUPPORTED_FORMAT_VERSIONS):
            raise TraceFileError(
                f"{self.path} is trace format {version}; this repo_lens reads format {SUPPORTED_FORMAT_VERSIONS}. "
                "Upgrade repo_lens."
            )
        if not _is_int(version) or version not in SUPPORTED_FORMAT_VERSIONS:
            raise self.fail("format_version", _describe(version), f"an int in {SUPPORTED_FORMAT_VERSIONS}")

    def positions(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        if "positions" not in arrays:
            raise self.fail("positions", "missing",
                            "a float32 array (n_layers, n_heads, T); it is not a complete trace")
        positions = arrays["positions"]
        if positions.ndim != 3 or 0 in positions.shape:
            raise self.fail("positions", f"an array of shape {positions.shape}",
                            "shape (n_layers, n_heads, T), each at least 1")
        if positions.dtype != np.float32:
            raise self.fail("positions", f"an array of dtype {positions.dtype}", "float32 (as Trace.save writes)")
        return positions

    def token_ids(self, arrays: dict[str, np.ndarray], n_tokens: int) -> np.ndarray:
        if "token_ids" not in arrays:
            raise self.fail("token_ids", "missing",
                            f"an integer array of shape ({n_tokens},); it is not a complete trace")
        ids = arrays["token_ids"]
        if ids.dtype.kind not in "iu":
            raise self.fail("token_ids", f"an array of dtype {ids.dtype}",
                            "integer ids (int64, as Trace.save writes); ids that are not integers are not rounded")
        if ids.shape != (n_tokens,):
            raise self.fail("token_ids", f"an array of shape {ids.shape}", f"shape ({n_tokens},), one id per token")
        if ids.size and ids.min() < 0:
            raise self.fail("token_ids", f"an array holding the negative id {ids.min()}", "ids >= 0")
        if ids.size and ids.max() > np.iinfo(np.int64).max:
            raise self.fail("token_ids", f"an array holding the id {ids.max()}", "ids that fit int64 (< 2**63)")
        return ids.astype(np.int64)

    def tokens(self, tokens: Any, n_tokens: int) -> list[str]:
        if not isinstance(tokens, list):
            raise self.fail("tokens", _describe(tokens), f"a list of {n_tokens} strings, one per token")
        if len(tokens) != n_tokens:
            raise self.fail("tokens", f"a list of {len(tokens)} entries", f"{n_tokens}, as positions has tokens")
        bad = next((index for index, token in enumerate(tokens) if not isinstance(token, str)), None)
        if bad is not None:
            raise self.fail(f"tokens[{bad}]", _describe(tokens[bad]), "a string (the token's display form)")
        return tokens

    def layer_kinds(self, kinds: Any, n_layers: int) -> list[str]:
        known = mechanism_kinds()
        if not isinstance(kinds, list):
            raise self.fail("layer_kinds", _describe(kinds), f"a list of {n_layers} layer kinds")
        if len(kinds) != n_layers:
            raise self.fail("layer_kinds", f"a list of {len(kinds)} kinds", f"{n_layers}, as positions has layers")
        bad = next((index for index, kind in enumerate(kinds) if not isinstance(kind, str) or kind not in known), None)
        if bad is not None:
            raise self.fail(f"layer_kinds[{bad}]", _describe(kinds[bad]), f"a registered kind, one of {known}")
        return kinds

    def meta(self, meta: Any) -> dict[str, Any]:
        if not isinstance(meta, dict):
            raise self.fail("meta", _describe(meta), "a JSON object")
        warnings = meta.get("warnings", [])
        if not isinstance(warnings, list) or not all(isinstance(item, str) for item in warnings):
            raise self.fail("meta.warnings", _describe(warnings), "a list of strings")
        truncation = meta.get("truncation")
        if truncation is not None and not (
            isinstance(truncation, dict) and all(_is_int(truncation.get(key)) and truncation[key] >= 0
                                                 for key in ("original_tokens", "kept_tokens"))
        ):
            raise self.fail("meta.truncation", _describe(truncation),
                            "null or {'original_tokens': int, 'kept_tokens': int}")
        if isinstance(meta.get("mechanism"), dict):  # settings written under a former name (repo_dim) read as current
            meta["mechanism"] = current_setting_keys(meta["mechanism"])
        return meta

    def spans(self, spans: Any, n_tokens: int) -> dict[str, tuple[int, int]]:
        if not isinstance(spans, dict):
            raise self.fail("spans", _describe(spans), "a JSON object of name: [start, end]")
        checked = {}
        for name, span in spans.items():
            if not (isinstance(span, list) and len(span) == 2 and all(_is_int(end) for end in span)):
                raise self.fail(f"spans.{name}", _describe(span), "[start, end], two ints")
            start, end = span
            if not 0 <= start <= end <= n_tokens:
                raise self.fail(f"spans.{name}", f"[{start}, {end}]",
                                f"0 <= start <= end <= {n_tokens} (end exclusive, within the trace's tokens)")
            checked[name] = (start, end)
        return checked

    def extras(self, arrays: dict[str, np.ndarray], shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
        unknown = sorted(name for name in arrays if name not in ("positions", "token_ids")
                         and not name.startswith(EXTRAS_PREFIX))
        if unknown:
            raise self.fail(unknown[0], "an array the format does not have",
                            f"only positions, token_ids and {EXTRAS_PREFIX}NAME arrays")
        extras = {}
        for name, value in arrays.items():
            if not name.startswith(EXTRAS_PREFIX):
                continue
            short = name[len(EXTRAS_PREFIX):]
            if not short:
                raise self.fail(name, "an extra without a name", f"{EXTRAS_PREFIX}NAME with a non-empty NAME")
            if value.dtype.kind not in "biuf":
                raise self.fail(name, f"an array of dtype {value.dtype}", "a numeric or bool array")
            per_head = value.shape == shape
            if not per_head and (short in _PER_HEAD_ONLY or value.ndim == 0 or value.shape[0] != shape[2]):
                expected = f"the shape of positions, (n_layers, n_heads, T) = {shape}"
                if short not in _PER_HEAD_ONLY:
                    expected += f", or one row per token, (T, ...) = ({shape[2]}, ...)"
                raise self.fail(f"extras.{short}", f"an array of shape {value.shape}", expected)
            extras[short] = value
        return extras
