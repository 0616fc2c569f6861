"""Analyses the views show, and their CSV forms (no Streamlit here)."""

from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens import InputError, RepoLensError, Trace, TraceFileError
from repo_lens.analysis import (
    AttentionMass,
    attention_mass,
    boundary_auc,
    cjk_boundary_labels,
    is_cjk_char,
    jieba_words,
    trace_increments,
)

from repo_lens.app.documents import Document, Preset

if TYPE_CHECKING:
    from repo_lens.protocol import HookedLensProtocol


@dataclass
class BoundaryResult:
    auc: np.ndarray  # (L, H)
    words: list[str]
    n_scored: int  # gaps between two Chinese characters that are scored
    n_boundaries: int  # of those, the gaps where jieba ends a word


def boundary_result(trace: Trace, doc: Document | None) -> BoundaryResult:
    """Word-boundary AUC of every layer's and head's increments (:func:`repo_lens.analysis.trace_increments`,
    as ``analyze --study boundaries``) against jieba's segmentation."""
    if doc is None or doc.offsets is None:
        raise InputError("word-boundary AUC needs the input text and each token's character offsets; "
                         "trace the text with a model (or open a trace saved by this app)")
    text = doc.text
    if sum(is_cjk_char(c) for c in text) < 4:
        raise InputError("the text has (almost) no Chinese characters; pick the Chinese preset or paste Chinese text")
    n = len(trace)
    words = jieba_words(text)
    labels = cjk_boundary_labels(text, np.asarray(doc.offsets[:n], dtype=np.int64).reshape(-1, 2), words)
    increments = trace_increments(trace)
    auc = boundary_auc(increments, labels.labels, scored=labels.scored)
    return BoundaryResult(auc=np.asarray(auc, dtype=np.float64), words=words, n_scored=int(labels.scored.sum()),
                          n_boundaries=int(labels.labels[labels.scored].sum()))


def niah_mass(lens: HookedLensProtocol, doc: Document, beyond_context: bool = False) -> AttentionMass:
    """RePo Table 4's attention mass of the answer rows on the needle, the query and the rest;
    ``beyond_context`` measures prompts longer than the model's context (length extrapolation)."""
    if doc.kind != Preset.NIAH or not doc.targets or doc.query is None:
        raise InputError(f"attention mass is measured on {Preset.NIAH} prompts; pick the {Preset.NIAH} input")
    spans = {"needle": doc.spans[doc.targets[0]], "query": doc.spans["query"]}
    return attention_mass(lens, np.asarray(doc.ids, dtype=np.int64), spans, doc.query,
                          allow_beyond_context=beyond_context)


def _csv(header: list[str], rows: Any) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def layer_head_csv(values: np.ndarray, name: str, kinds: list[str] | None = None) -> bytes:
    """Long-format CSV (layer, kind, head, value) of an (L, H) array."""
    v = np.asarray(values)
    return _csv(["layer", "kind", "head", name],
                ((l, kinds[l] if kinds else "", h, float(v[l, h])) for l in range(v.shape[0]) for h in range(v.shape[1])))


def variance_shares_csv(shares: Any, kinds: list[str] | None = None) -> bytes:
    """Long-format CSV (layer, kind, head, each share, variance) of
    :func:`repo_lens.analysis.position_variance_shares`."""
    rows = shares.rows()
    names = [name for name in rows[0] if name not in ("layer", "head")]
    header = ["layer", "kind", "head", *[shares.span_name if name == "span" else name for name in names]]
    return _csv(header, ([row["layer"], kinds[row["layer"]] if kinds else "", row["head"], *(row[n] for n in names)]
                         for row in rows))


def fractions_csv(fractions: Any, kinds: list[str] | None = None) -> bytes:
    per_head = fractions.per_head
    return _csv(["layer", "kind", "head", *fractions.labels],
                ([l, kinds[l] if kinds else "", h, *map(float, per_head[l, h])]
                 for l in range(per_head.shape[0]) for h in range(per_head.shape[1])))


def positions_csv(trace: Trace) -> bytes:
    """Long-format CSV: token index, token, token id, layer, kind, head, position."""
    z = trace.positions
    rows = ((t, trace.tokens[t], int(trace.token_ids[t]), l, trace.layer_kinds[l], h, float(z[l, h, t]))
            for l in range(z.shape[0]) for h in range(z.shape[1]) for t in range(z.shape[2]))
    return _csv(["token_index", "token", "token_id", "layer", "kind", "head", "position"], rows)


def mass_csv(masses: dict[str, AttentionMass]) -> bytes:
    rows = []
    for label, mass in masses.items():
        for span, table in mass.by_layer_head.items():
            for row, layer in enumerate(mass.layers):
                for head in range(table.shape[1]):
                    rows.append([label, span, mass.span_lengths[span], layer, head, float(table[row, head])])
    return _csv(["model", "span", "span_tokens", "layer", "head", "mass_per_token"], rows)


def trace_bytes(trace: Trace) -> bytes:
    """The trace as a .safetensors file (Trace.save to a temp file, read back)."""
    with tempfile.TemporaryDirectory() as directory:
        path = trace.save(Path(directory) / "trace.safetensors")
        return path.read_bytes()


def load_trace_bytes(data: bytes, name: str = "the uploaded file") -> Trace:
    """A trace from uploaded bytes (TraceFileError when it is none); messages name the file ``name``
    the user uploaded, never the server's temporary copy."""
    with tempfile.TemporaryDirectory() as directory:
        temp = Path(directory) / (Path(name).name or "upload.safetensors")
        temp.write_bytes(data)
        try:
            return Trace.load(temp)
        except RepoLensError as error:
            message = str(error).replace(str(temp), name).replace(directory, "")
            raise TraceFileError(message) from None
