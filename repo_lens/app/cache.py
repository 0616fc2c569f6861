"""Cached model loads, traces and analyses: changing a layer or head re-renders from these caches
without a new forward pass. Keys include the checkpoint's stamp: the modification time of a local
checkpoint, so a retrained checkpoint is reloaded; the commit a Hub id resolved to, so a new commit
on its branch is loaded (the branch is looked up again at most every ``HUB_RECHECK_S`` seconds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import streamlit as st

import repo_lens
from repo_lens import RepoLensError, Trace
from repo_lens.analysis import PositionAttribution, TokenAttribution, position_attribution, token_attribution

from repo_lens.app import config, state
from repo_lens.app.config import loadable, load_revision
from repo_lens.app.documents import Document, build_document, max_reversal_words, trace_document
from repo_lens.app.models import ModelInfo, model_info, model_sources
from repo_lens.app.results import BoundaryResult, boundary_result, load_trace_bytes, niah_mass
from repo_lens.model.loaders.hf.hub import HubSnapshot

HUB_RECHECK_S = 600  # how long a Hub id's branch or tag keeps the commit it resolved to


@st.cache_data(show_spinner="Fetching the model from the Hugging Face Hub (config, weights, tokenizer)…",
               ttl=HUB_RECHECK_S, max_entries=32)
def get_hub_snapshot(source: str) -> HubSnapshot:
    """The Hub cache's snapshot of Hub source ``"org/name[@REVISION]"``, fetched when it is not there."""
    return config.hub_snapshot(source)


def source_stamp(source: str) -> float | str:
    """The cache key part that changes with the model: the commit of a Hub source, else the files' mtime."""
    hub = get_hub_snapshot(source) if config.parse_hub_source(source) is not None else None
    return config.source_stamp(source, hub)


@st.cache_resource(show_spinner="Loading the model…", max_entries=6)
def get_lens(source: str, stamp: float | str) -> Any:
    """One Lens per checkpoint (and stamp), shared by every session."""
    return repo_lens.load(loadable(source), revision=load_revision(source), device="auto")


@st.cache_data(show_spinner=False, ttl=60)
def get_model_sources(roots: tuple[str, ...]) -> list[str]:
    """Every model that loads offline, local checkpoints from under ``roots`` (re-listed at most once a minute)."""
    return model_sources([Path(root) for root in roots])


@st.cache_data(show_spinner=False, max_entries=256)
def get_model_info(source: str, stamp: float | str) -> ModelInfo | None:
    """Layers, heads, context and size of ``source`` from its file headers; None when they cannot be read."""
    try:
        hub = get_hub_snapshot(source) if config.parse_hub_source(source) is not None else None
        return model_info(source, hub)
    except (OSError, ValueError, KeyError, TypeError, RepoLensError):
        return None


@st.cache_data(show_spinner=False, max_entries=64)
def get_max_reversal_words(source: str, stamp: float | str) -> int:
    """How many words the Reversal preset may have for ``source`` (its prompt fits the context)."""
    lens = get_lens(source, stamp)
    return max_reversal_words(lens.tokenizer, lens.context_length) if lens.tokenizer is not None else 0


@st.cache_data(show_spinner="Tokenizing…", max_entries=32)
def get_document(source: str, stamp: float | str, kind: str, text: str, params_json: str) -> Document:
    """The input encoded for ``source`` (no forward pass): lets the app check it fits before tracing."""
    return build_document(get_lens(source, stamp), kind, text, json.loads(params_json))


@st.cache_data(show_spinner="Tracing…", max_entries=32)
def get_traced(source: str, stamp: float | str, kind: str, text: str, params_json: str,
               truncate: bool) -> tuple[Trace, Document]:
    doc = get_document(source, stamp, kind, text, params_json)
    # the Lens serialises its hooked forward passes itself
    return trace_document(get_lens(source, stamp), doc, truncate), doc


@st.cache_data(show_spinner="Measuring attention mass…", max_entries=16)
def get_mass(source: str, stamp: float | str, kind: str, text: str, params_json: str, beyond_context: bool) -> Any:
    lens = get_lens(source, stamp)
    doc = build_document(lens, kind, text, json.loads(params_json))
    return niah_mass(lens, doc, beyond_context)


@st.cache_data(show_spinner="Attributing the position…", max_entries=64)
def get_attribution(source: str, stamp: float | str, token_ids: tuple[int, ...], layer: int, head: int, token: int,
                    method: str) -> tuple[PositionAttribution, TokenAttribution]:
    """What writes head ``head``'s position of token ``token`` in layer ``layer`` (one row of
    :func:`repo_lens.analysis.position_attribution`) and which context tokens move it."""
    lens = get_lens(source, stamp)
    ids = list(token_ids)
    found = position_attribution(lens, ids, layer, heads=[head], tokens=[token], method=method)
    return found, token_attribution(lens, ids, layer, head, token)


@st.cache_data(show_spinner="Segmenting with jieba…", max_entries=16)
def get_boundaries(key: str, _trace: Trace, _doc: Document | None) -> BoundaryResult:
    """Boundary AUC of one trace; ``key`` identifies the trace (the underscored arguments are not hashed)."""
    return boundary_result(_trace, _doc)


def load_uploaded_trace(file: Any) -> Trace:
    """Parse an uploaded trace once per upload (kept in the session, keyed by the upload's id)."""
    store = st.session_state.setdefault(state.UPLOADED_TRACES, {})
    key = getattr(file, "file_id", None) or file.name
    if key not in store:
        store.clear()
        store[key] = load_trace_bytes(file.getvalue(), file.name)
    return store[key]
