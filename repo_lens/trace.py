"""Trace: what one forward pass says about positions, saved as safetensors + JSON (never pickle)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from repo_lens.atomic import atomic_write
from repo_lens.errors import InputError, TraceFileError
from repo_lens.validation import check_index

TRACE_MARKER = "repo_lens_trace"
TRACE_FORMAT_VERSION = 1


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
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64)
        self.positions = np.asarray(self.positions, dtype=np.float32)
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
        self.spans = {name: (int(start), int(end)) for name, (start, end) in self.spans.items()}

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

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically as one .safetensors file (arrays) with the rest as JSON in its header."""
        path = Path(path)
        document = {
            "format_version": TRACE_FORMAT_VERSION,
            "tokens": self.tokens,
            "layer_kinds": self.layer_kinds,
            "meta": self.meta,
            "spans": self.spans,
        }
        arrays = {"positions": np.ascontiguousarray(self.positions), "token_ids": np.ascontiguousarray(self.token_ids)}
        arrays.update({f"extras.{name}": np.ascontiguousarray(value) for name, value in self.extras.items()})
        metadata = {TRACE_MARKER: json.dumps(document, default=_jsonable)}
        return atomic_write(path, lambda temp: save_file(arrays, str(temp), metadata=metadata))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trace":
        """Read a trace written by :meth:`save`; corrupt or foreign files raise TraceFileError."""
        path = Path(path)
        if not path.is_file():
            raise TraceFileError(f"no trace file at {path}; pass a file written by Trace.save")
        try:
            with safe_open(str(path), framework="np") as file:
                header = file.metadata() or {}
                arrays = {name: file.get_tensor(name) for name in file.keys()}
        except (SafetensorError, OSError, ValueError) as error:
            raise TraceFileError(
                f"{path} is not a readable repo_lens trace (corrupt, truncated or not safetensors: {error})"
            ) from None
        if TRACE_MARKER not in header:
            raise TraceFileError(
                f"{path} is a safetensors file but not a repo_lens trace (no '{TRACE_MARKER}' header); "
                "traces are written by Trace.save / `repo-lens trace --save`"
            )
        try:
            document = json.loads(header[TRACE_MARKER])
            version = document["format_version"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise TraceFileError(f"{path} has a damaged trace header ({error})") from None
        if not isinstance(version, int) or version > TRACE_FORMAT_VERSION:
            raise TraceFileError(
                f"{path} is trace format {version!r}; this repo_lens reads up to {TRACE_FORMAT_VERSION}. Upgrade repo_lens."
            )
        if "positions" not in arrays or "token_ids" not in arrays:
            raise TraceFileError(f"{path} lacks the 'positions' or 'token_ids' array; it is not a complete trace")
        try:
            return cls(
                tokens=list(document["tokens"]),
                token_ids=arrays["token_ids"],
                positions=arrays["positions"],
                layer_kinds=list(document["layer_kinds"]),
                meta=dict(document.get("meta", {})),
                spans={name: tuple(span) for name, span in document.get("spans", {}).items()},
                extras={name[len("extras."):]: value for name, value in arrays.items() if name.startswith("extras.")},
            )
        except (InputError, KeyError, TypeError, ValueError) as error:
            raise TraceFileError(f"{path} holds an inconsistent trace: {error}") from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
