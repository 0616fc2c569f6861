"""Cached model loads, traces and analyses: changing a layer or head re-renders from these caches
without a new forward pass. Keys include the checkpoint's modification time, so a retrained
checkpoint is reloaded."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

import repo_lens
from repo_lens import Trace

from lens_app.config import loadable
from lens_app.documents import Document, build_document, trace_document
from lens_app.results import BoundaryResult, boundary_result, load_trace_bytes, niah_mass


@st.cache_resource(show_spinner="Loading the model…", max_entries=6)
def get_lens(source: str, stamp: float) -> Any:
    """One Lens per checkpoint (and modification time), shared by every session."""
    return repo_lens.load(loadable(source), device="auto")


@st.cache_data(show_spinner="Tracing…", max_entries=32)
def get_traced(source: str, stamp: float, kind: str, text: str, params_json: str, truncate: bool) -> tuple[Trace, Document]:
    lens = get_lens(source, stamp)
    doc = build_document(lens, kind, text, json.loads(params_json))
    return trace_document(lens, doc, truncate), doc  # the Lens serialises its hooked forward passes itself


@st.cache_data(show_spinner="Measuring attention mass…", max_entries=16)
def get_mass(source: str, stamp: float, kind: str, text: str, params_json: str, beyond_context: bool) -> Any:
    lens = get_lens(source, stamp)
    doc = build_document(lens, kind, text, json.loads(params_json))
    return niah_mass(lens, doc, beyond_context)


@st.cache_data(show_spinner="Segmenting with jieba…", max_entries=16)
def get_boundaries(key: str, _trace: Trace, _doc: Document | None) -> BoundaryResult:
    """Boundary AUC of one trace; ``key`` identifies the trace (the underscored arguments are not hashed)."""
    return boundary_result(_trace, _doc)


def load_uploaded_trace(file: Any) -> Trace:
    """Parse an uploaded trace once per upload (kept in the session, keyed by the upload's id)."""
    store = st.session_state.setdefault("_uploaded_traces", {})
    key = getattr(file, "file_id", None) or file.name
    if key not in store:
        store.clear()
        store[key] = load_trace_bytes(file.getvalue())
    return store[key]
