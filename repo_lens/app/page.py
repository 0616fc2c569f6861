"""The page: the sidebar's selection traced (or the uploaded trace read), notices, then one tab per view.

:func:`run` draws it; ``repo_lens/app/streamlit_app.py`` (the script ``repo-lens app`` serves) calls it.
"""

from __future__ import annotations

import hashlib

import streamlit as st

from repo_lens import InputError
from repo_lens.app import cache, config, state
from repo_lens.app.documents import document_of_trace
from repo_lens.app.names import input_hash
from repo_lens.app.sidebar import MODE_MODEL, MODE_TRACE, Selection, model_info, sidebar
from repo_lens.app.ui import Item, guard
from repo_lens.app.views import VIEWS, View


def _key(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()[:12]


def load_items(selection: Selection) -> list[Item]:
    """The traces to show: one per chosen model (cached), or the uploaded trace file."""
    items: list[Item] = []
    if selection.mode == MODE_TRACE:
        file = selection.trace_file
        with guard(f"Reading {file.name}"):
            if file.size > config.MAX_TRACE_BYTES:
                st.error(f"{file.name} is {file.size:,} bytes; trace files of at most {config.MAX_TRACE_BYTES:,} "
                         "bytes can be opened here")
                return items
            trace = cache.load_uploaded_trace(file)
            label = str(trace.meta.get("name") or trace.meta.get("source") or file.name)
            items.append(Item(label=label, trace=trace, doc=document_of_trace(trace),
                              key=_key("file", getattr(file, "file_id", file.name)),
                              input_id=input_hash(trace.token_ids)))
        return items
    for index, source in enumerate(selection.sources):
        label = config.source_label(source)
        if any(item.label == label for item in items):
            label = f"{label} ({index + 1})"
        with guard(f"Tracing with {label}"):
            stamp = cache.source_stamp(source)
            if not fits(label, source, stamp, selection):
                continue
            trace, doc = cache.get_traced(source, stamp, selection.kind, selection.text, selection.params_json,
                                          selection.truncate)
            items.append(Item(label=label, trace=trace, doc=doc, source=source, stamp=stamp,
                              key=_key(source, stamp, selection.kind, selection.text, selection.params_json,
                                       selection.truncate), input_id=input_hash(trace.token_ids)))
    return items


def fits(label: str, source: str, stamp: float | str, selection: Selection) -> bool:
    """Before tracing: say so when the input is longer than the model's context; False when it
    cannot be traced at all (a prompt that cannot be built for this model, or truncation off)."""
    try:
        doc = cache.get_document(source, stamp, selection.kind, selection.text, selection.params_json)
    except InputError as error:
        if not selection.params.get("length"):  # not a prompt built to a length: a plain input error
            raise
        st.warning(f"{label} cannot hold a {selection.kind} prompt of this length: {error}. Pick a model with a "
                   "longer context or another input.", icon="📏")
        return False
    info = model_info(source)
    context = info.context if info is not None else None
    if context is None or len(doc.ids) <= context:
        return True
    if doc.beyond_context:  # the sidebar's "Beyond the context": traced whole, said where it is drawn
        st.info(f"{label}: the {selection.kind} input is {len(doc.ids):,} tokens, beyond the model's context "
                f"({context:,}); it is traced whole (length extrapolation).", icon="📏")
        return True
    if selection.truncate:
        st.warning(f"{label}: the {selection.kind} input is {len(doc.ids):,} tokens, more than the model's context "
                   f"({context:,}); only the first {context:,} are traced.", icon="✂️")
        return True
    st.warning(f"{label}: the {selection.kind} input is {len(doc.ids):,} tokens, longer than the model's context "
               f"({context:,}); shorten it, pick a model with a longer context, or turn truncation on.", icon="📏")
    return False


def notices(items: list[Item]) -> None:
    """Truncation and non-finite positions, shown before any view."""
    for item in items:
        meta = item.trace.meta
        truncation = meta.get("truncation")
        if truncation and item.source is None:  # a model's input was checked before tracing (fits)
            st.warning(f"{item.label}: the input has {truncation['original_tokens']:,} tokens, more than the model's "
                       f"context; only the first {truncation['kept_tokens']:,} were traced.", icon="✂️")
        bad = meta.get("nonfinite_positions")
        if bad:
            counts = meta.get("nonfinite_counts") or {}
            st.error(f"{item.label}: NaN or infinite positions ({counts.get('positions', '?')} values on "
                     f"{counts.get('tokens', '?')} tokens) in {len(bad)} heads, (layer, head) "
                     f"{bad[:8]}{' …' if len(bad) > 8 else ''}; "
                     "they are left out of the plots and the analyses that need finite positions say so.", icon="⚠️")
        for warning in meta.get("warnings") or []:
            if not bad or "NaN" not in str(warning):
                st.warning(f"{item.label}: {warning}")


def header(items: list[Item]) -> None:
    parts = []
    for item in items:
        trace = item.trace
        kinds = sorted(set(trace.layer_kinds), key=trace.layer_kinds.index)
        parts.append(f"**{item.label}** — {len(trace):,} tokens, {trace.n_layers} layers ({'/'.join(kinds)}), "
                     f"{trace.n_heads} heads")
    st.markdown(" · ".join(parts))


def main() -> None:
    """The whole page, once per rerun."""
    st.set_page_config(page_title="repo_lens — learned positions", page_icon="📐", layout="wide")
    selection = sidebar()
    if selection.problem:
        st.info(selection.problem)
        return
    items = load_items(selection)
    if not items:
        st.info("Nothing to show yet: see the messages above.")
        return
    header(items)
    notices(items)
    tabs = st.tabs([view.name for view in VIEWS], key=state.VIEW, on_change="rerun", bind="query-params")
    for tab, view in zip(tabs, VIEWS):
        if tab.open:
            with tab:
                render_view(view, items, selection)


@st.fragment
def render_view(view: View, items: list[Item], selection: Selection) -> None:
    """One view; a change of its own controls (layer, head, window, highlight) reruns only this."""
    if view.needs_preset and selection.kind != view.preset:
        st.info(f"{view.name} is measured on {view.preset} prompts with a model: pick **{MODE_MODEL}** and the "
                f"**{view.preset}** input in the sidebar.")
        return
    with guard(view.name):
        view.render(items, selection)


def run() -> None:
    """Draw the page; any failure is a message, not a traceback."""
    with guard("The app"):
        main()
