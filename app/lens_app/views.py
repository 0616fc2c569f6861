"""The views: one function per tab, each listed once in :data:`VIEWS`, which both the tab bar and
the dispatch read. Each view reads cached traces and builds figures with repo_lens.plots, so changing
a layer or head re-renders without a forward pass. Adding a view = a function and a ``View`` entry."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import streamlit as st

from repo_lens import InputError, Trace
from repo_lens.analysis import chunk_pattern_codes, pattern_fractions, range_stats
from repo_lens.plots import (
    attention_mass_figure,
    attention_mass_layers_figure,
    boundary_auc_figure,
    pattern_fractions_figure,
    pattern_strip_figure,
    position_scatter_figure,
    range_heatmap,
    spaced_tokens_figure,
)

from lens_app import cache, config, results
from lens_app.sidebar import Selection
from lens_app.ui import Item, clamp_head, csv_button, first_learned_layer, guard, head_picker, per_item, show_figure

HIGHLIGHT_ORDER = ("needle", "query", "answer", "input", "output", "question")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "trace"


def _chunk_settings() -> tuple[int, float]:
    return int(st.session_state.get("chunk_size", 16)), float(st.session_state.get("chunk_eps", 0.2))


def _head_patterns(trace: Trace, head: int | str, size: int, eps: float) -> np.ndarray:
    """(L, n_chunks) pattern codes of one head (or of the mean over heads)."""
    z = trace.positions
    if head == "mean":
        return chunk_pattern_codes(z.astype(np.float64).mean(axis=1, keepdims=True), size, eps)[:, 0]
    return chunk_pattern_codes(z[:, head:head + 1], size, eps)[:, 0]


def spaced_view(items: Sequence[Item], selection: Selection) -> None:
    n_heads = max(item.trace.n_heads for item in items)
    n_tokens = max(len(item.trace) for item in items)
    c1, c2, c3, c4 = st.columns([1.3, 1.4, 3.5, 1.2])
    with c1:
        head = head_picker("Head", "spaced_head", n_heads, extra=("mean",), default="0")
    scale = c2.radio("Scale", ["per layer", "shared"], key="spaced_scale", horizontal=True,
                     help="per layer: each layer's positions rescaled to its own range (seeds/002); "
                          "shared: raw positions on one axis")
    window = (0, n_tokens)
    if n_tokens > 1:
        window = c3.slider("Tokens shown", 0, n_tokens, (0, min(n_tokens, config.DEFAULT_WINDOW)),
                           key=f"spaced_window_{n_tokens}")
    strip = c4.toggle("Chunk strip", value=True, key="spaced_strip", help="constant / mono / hybrid chunk of each token")
    size, eps = _chunk_settings()

    def render(item: Item) -> None:
        trace = item.trace
        start, end = min(window[0], len(trace) - 1), min(window[1], len(trace))
        if end <= start:
            start, end = 0, len(trace)
        if end - start > config.SPACED_TOKEN_LIMIT:
            st.caption(f"{end - start:,} tokens: every ~{(end - start) // config.SPACED_TOKEN_LIMIT + 1}th drawn; "
                       "narrow the window to see them all")
        h = clamp_head(head, trace.n_heads)
        patterns = None
        if strip:
            try:
                patterns = _head_patterns(trace, h, size, eps)
            except InputError as error:
                st.caption(f"No chunk strip: {error}")
        fig = spaced_tokens_figure(trace, head=h, scale="row" if scale == "per layer" else "shared",
                                   window=(start, end), patterns=patterns, chunk_size=size,
                                   max_tokens=config.SPACED_TOKEN_LIMIT)
        show_figure(fig, f"spaced-{item.key}", f"spaced-tokens-{_slug(item.label)}")

    per_item(items, render)


def _highlights(trace: Trace, item: Item) -> dict[str, tuple[int, int]]:
    spans = dict(trace.spans)
    if item.doc is not None and item.doc.targets and item.doc.targets[0] in spans:
        spans["needle"] = spans[item.doc.targets[0]]
    return {name: spans[name] for name in HIGHLIGHT_ORDER if name in spans}


def scatter_view(items: Sequence[Item], selection: Selection) -> None:
    n_layers = max(item.trace.n_layers for item in items)
    n_heads = max(item.trace.n_heads for item in items)
    kinds = items[0].trace.layer_kinds
    c1, c2, c3, c4 = st.columns([1.4, 1.4, 2, 1.4])
    layer = c1.selectbox("Layer", list(range(n_layers)), index=first_learned_layer(items[0].trace), key="scatter_layer",
                         format_func=lambda l: f"L{l} {kinds[l]}" if l < len(kinds) else f"L{l}")
    with c2:
        head = head_picker("Head", "scatter_head", n_heads, extra=("all", "mean"), default="all")
    view = c3.radio("View", ["focus", "global"], key="scatter_view", horizontal=True,
                    help="focus: y range = Tukey's fences (1.5 IQR); points beyond are drawn clipped as triangles")
    highlight = c4.toggle("Shade spans", value=True, key="scatter_spans", help="needle / query / answer spans")

    def render(item: Item) -> None:
        trace = item.trace
        chosen = layer
        if chosen >= trace.n_layers:
            chosen = trace.n_layers - 1
            st.caption(f"{item.label} has {trace.n_layers} layers; showing L{chosen}")
        fig = position_scatter_figure(trace, chosen, clamp_head(head, trace.n_heads), view=view,
                                      max_points=config.SCATTER_POINT_LIMIT,
                                      highlight=_highlights(trace, item) if highlight else None)
        show_figure(fig, f"scatter-{item.key}", f"scatter-{_slug(item.label)}-L{chosen}")

    per_item(items, render)


def heatmaps_view(items: Sequence[Item], selection: Selection) -> None:
    n_heads = max(item.trace.n_heads for item in items)
    c1, c2, c3 = st.columns([1, 1, 1.5])
    size = int(c1.number_input("Chunk size (tokens)", 2, 512, 16, key="chunk_size"))
    eps = float(c2.number_input("ε (constant if within ε of the chunk mean)", 0.0, 100.0, 0.2, 0.05, key="chunk_eps"))
    with c3:
        head = head_picker("Head of the chunk strip", "strip_head", n_heads, extra=("mean",), default="0")

    def render(item: Item) -> None:
        trace = item.trace
        kinds = trace.layer_kinds
        with guard("Range statistics"):
            ranges = range_stats(trace.positions)
            show_figure(range_heatmap(ranges, kinds), f"range-{item.key}", f"range-{_slug(item.label)}")
            csv_button("Ranges (CSV)", results.layer_head_csv(ranges, "range", kinds),
                       f"range-{_slug(item.label)}.csv", f"csv-range-{item.key}")
        with guard("Chunk patterns"):
            codes = chunk_pattern_codes(trace.positions, size, eps)
            fractions = pattern_fractions(np.take(np.asarray(("constant", "mono", "hybrid")), codes))
            show_figure(pattern_fractions_figure(fractions, kinds), f"fractions-{item.key}",
                        f"pattern-fractions-{_slug(item.label)}")
            csv_button("Pattern fractions (CSV)", results.fractions_csv(fractions, kinds),
                       f"pattern-fractions-{_slug(item.label)}.csv", f"csv-fractions-{item.key}")
            h = clamp_head(head, trace.n_heads)
            strip = _head_patterns(trace, h, size, eps)
            head_text = "mean of heads" if h == "mean" else f"head {h}"
            fig = pattern_strip_figure(strip, size, tokens=trace.tokens, layer_kinds=kinds,
                                       title=f"Chunk classification along the text — {head_text}")
            show_figure(fig, f"strip-{item.key}", f"chunk-strip-{_slug(item.label)}")

    per_item(items, render)


def mass_view(items: Sequence[Item], selection: Selection) -> None:
    if selection.kind != "NIAH" or not any(item.source for item in items):
        st.info("Attention mass on the needle, the query and the rest (RePo Table 4) is measured on NIAH prompts "
                "with a model: pick **Run a model** and the **NIAH** input in the sidebar (length and depth there).")
        return
    beyond = st.checkbox("Measure prompts longer than the model's context (length extrapolation)", key="mass_beyond",
                         value=False)
    masses = {}
    for item in items:
        if item.source is None:
            continue
        with guard(f"Attention mass of {item.label}"):
            masses[item.label] = cache.get_mass(item.source, item.stamp, selection.kind, selection.text,
                                                selection.params_json, beyond)
    if not masses:
        if not beyond:
            st.caption("A prompt longer than the model's context can still be measured: tick the box above "
                       "(positions beyond the trained length are extrapolation).")
        return
    columns = st.columns(len(masses))
    for column, (label, mass) in zip(columns, masses.items()):
        column.markdown(f"**{label}**")
        inner = column.columns(len(mass.per_token))
        for cell, (span, value) in zip(inner, mass.per_token.items()):
            cell.metric(f"{span} ({mass.span_lengths[span]} tok)", f"{value:.2e}")
    show_figure(attention_mass_figure(masses), "mass-bars", "attention-mass")
    show_figure(attention_mass_layers_figure(masses), "mass-layers", "attention-mass-by-layer")
    csv_button("Attention mass by layer and head (CSV)", results.mass_csv(masses), "attention-mass.csv", "csv-mass")


def boundaries_view(items: Sequence[Item], selection: Selection) -> None:
    st.caption("ROC-AUC of each head's position increments z(t) − z(t−1) against jieba's word boundaries, scored "
               "only at gaps between two Chinese characters (seeds/002). 0.5 = chance.")

    def render(item: Item) -> None:
        result = cache.get_boundaries(item.key, item.trace, item.doc)
        fig = boundary_auc_figure(result.auc, item.trace.layer_kinds, n_scored=result.n_scored)
        show_figure(fig, f"auc-{item.key}", f"boundary-auc-{_slug(item.label)}")
        csv_button("AUC (CSV)", results.layer_head_csv(result.auc, "auc", item.trace.layer_kinds),
                   f"boundary-auc-{_slug(item.label)}.csv", f"csv-auc-{item.key}")
        with st.expander(f"jieba segmentation ({len(result.words)} words, {result.n_boundaries} scored boundaries)"):
            st.text(" / ".join(result.words[:400]) + (" …" if len(result.words) > 400 else ""))

    per_item(items, render)


def data_view(items: Sequence[Item], selection: Selection) -> None:
    def render(item: Item) -> None:
        trace = item.trace
        st.markdown(f"{len(trace):,} tokens · {trace.n_layers} layers ({', '.join(trace.layer_kinds)}) · "
                    f"{trace.n_heads} heads")
        slug = _slug(item.label)
        st.download_button("Trace (.safetensors)", data=lambda t=trace: results.trace_bytes(t),
                           file_name=f"{slug}.trace.safetensors", mime="application/octet-stream",
                           key=f"trace-{item.key}", on_click="ignore", icon=":material/download:",
                           help="Open it later with “Open a saved trace” or repo_lens.Trace.load")
        csv_button("Positions (CSV, every layer and head)", lambda t=trace: results.positions_csv(t),
                   f"{slug}-positions.csv", f"csv-positions-{item.key}")
        shown = min(len(trace), 2000)
        st.dataframe({"token": trace.tokens[:shown], "id": trace.token_ids[:shown].tolist(),
                      **{f"L{l} {trace.layer_kinds[l]}": np.round(trace.positions[l].mean(axis=0)[:shown], 3)
                         for l in range(trace.n_layers)}},
                     height=300)
        st.caption("Positions: mean over heads." + (f" First {shown:,} tokens." if shown < len(trace) else ""))
        with st.expander("meta"):
            st.json({k: v for k, v in trace.meta.items() if k != "input"}, expanded=False)

    per_item(items, render)


@dataclass(frozen=True)
class View:
    """One tab: its ``name`` (the tab label and the ``?view=`` query value), the function that
    renders it for the traces shown, and the sidebar ``preset`` input it is made for (None: any)."""

    name: str
    render: Callable[[Sequence[Item], Selection], None]
    preset: str | None = None


VIEWS: tuple[View, ...] = (
    View("Spaced tokens", spaced_view),
    View("Scatter", scatter_view),
    View("Heatmaps", heatmaps_view),
    View("Attention mass", mass_view, preset="NIAH"),
    View("Word boundaries", boundaries_view, preset="Chinese"),
    View("Trace & data", data_view),
)
