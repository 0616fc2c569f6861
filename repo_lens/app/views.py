"""The views: one function per tab, each listed once in :data:`VIEWS`, which both the tab bar and
the dispatch read. Each view reads cached traces and builds figures with repo_lens.plots, so changing
a layer or head re-renders without a forward pass. Adding a view = a function and a ``View`` entry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, cast

import numpy as np
import streamlit as st

from repo_lens import InputError, Trace
from repo_lens.analysis import (
    chunk_pattern_codes,
    content_classes,
    pattern_fractions,
    position_variance_shares,
    range_stats,
)
from repo_lens.plots import (
    ScatterStyle,
    SpacedTokensStyle,
    attention_mass_figure,
    attention_mass_layers_figure,
    boundary_auc_figure,
    pattern_fractions_figure,
    pattern_strip_figure,
    position_scatter_figure,
    range_heatmap,
    spaced_tokens_figure,
    suggested_scale,
    variance_shares_figure,
)

from repo_lens.app import cache, config, results, state
from repo_lens.app.documents import Preset
from repo_lens.app.attribution_view import why_this_position
from repo_lens.app.intervention_view import interventions_view
from repo_lens.app.score_view import why_this_attention
from repo_lens.app.names import export_name, slug
from repo_lens.app.sidebar import Selection
from repo_lens.app.ui import Item, clamp_head, csv_button, first_learned_layer, guard, head_picker, per_item, show_figure

HIGHLIGHT_ORDER = ("needle", "query", "answer", "input", "output", "question")


def _chunk_settings() -> tuple[int, float]:
    """The chunk size and ε set in the Heatmaps view (their defaults before it was opened)."""
    return (int(st.session_state.get(state.CHUNK_SIZE, state.CHUNK_SIZE_DEFAULT)),
            float(st.session_state.get(state.CHUNK_EPS, state.CHUNK_EPS_DEFAULT)))


def _head_patterns(trace: Trace, head: int | str, size: int, eps: float) -> np.ndarray:
    """(L, n_chunks) pattern codes of one head (or of the mean over heads)."""
    z = trace.positions
    if head == "mean":
        return chunk_pattern_codes(z.astype(np.float64).mean(axis=1, keepdims=True), size, eps)[:, 0]
    head = cast(int, head)  # not "mean"
    return chunk_pattern_codes(z[:, head:head + 1], size, eps)[:, 0]


def _suggest_scale(first: Item, head: int | str) -> None:
    """Set the scale radio to what shows ``first`` best when it is a model (or file) the scale was not yet set
    for; set before the widget is drawn, so the radio never changes its own parameters between reruns."""
    shown = first.source or first.label
    if st.session_state.get(state.SPACED_SCALE_FOR) == shown and state.SPACED_SCALE in st.session_state:
        return
    trace = first.trace
    suggested = suggested_scale(trace.positions, clamp_head(head, trace.n_heads)) if len(trace) else "row"
    st.session_state[state.SPACED_SCALE] = "per layer" if suggested == "row" else "shared"
    st.session_state[state.SPACED_SCALE_FOR] = shown


def spaced_view(items: Sequence[Item], selection: Selection) -> None:
    n_heads = max(item.trace.n_heads for item in items)
    n_tokens = max(len(item.trace) for item in items)
    c1, c2, c3, c4 = st.columns([1.3, 1.4, 3.5, 1.2])
    with c1:
        head = head_picker("Head", "spaced_head", n_heads, extra=("mean",), default="0")
    _suggest_scale(items[0], head)
    scale = c2.radio("Scale", ["per layer", "shared"], key=state.SPACED_SCALE, horizontal=True,
                     help="per layer: each layer's positions rescaled to its own range; shared: raw positions on "
                          "one axis (picked first where every layer's range is within 10x of the others', as for "
                          "RoPE and GRAPE-M)")
    window = (0, n_tokens)
    if n_tokens > 1:
        window = c3.slider("Tokens shown", 0, n_tokens, (0, min(n_tokens, config.DEFAULT_WINDOW)),
                           key=f"spaced_window_{n_tokens}")
    strip = c4.toggle("Chunk strip", value=True, key="spaced_strip", help="constant / mono / hybrid chunk of each token")
    if (st.session_state.get(state.HIGHLIGHT_TOKEN) or 0) > n_tokens - 1:  # picked on a longer trace
        st.session_state[state.HIGHLIGHT_TOKEN] = None
    z1, z2, z3, z4 = st.columns([3.5, 1.6, 1.0, 1.3], vertical_alignment="bottom")
    zoom = z1.slider("Zoom: part of the x axis shown (labels are placed again for it)", 0.0, 1.0, (0.0, 1.0),
                     0.01, key="spaced_zoom")
    token = z2.number_input("Highlight token (or click one)", 0, max(n_tokens - 1, 0), value=None,
                            key=state.HIGHLIGHT_TOKEN, placeholder="token index",
                            help="the token and its ±k neighbours, in every layer")
    k = int(z3.number_input("± k", 0, 64, 3, key="spaced_k"))
    z4.button("Clear highlight", key="spaced_clear", on_click=_clear_highlight, disabled=token is None,
              icon=":material/close:")
    size, eps = _chunk_settings()

    def render(item: Item) -> None:
        trace = item.trace
        start, end = min(window[0], len(trace) - 1), min(window[1], len(trace))
        if end <= start:
            start, end = 0, len(trace)
        h = clamp_head(head, trace.n_heads)
        patterns = None
        if strip:
            try:
                patterns = _head_patterns(trace, h, size, eps)
            except InputError as error:
                st.caption(f"No chunk strip: {error}")
        highlight = None
        if token is not None and start <= token < end:
            highlight = (int(token), k)
        elif token is not None:
            st.caption(f"Token {token} is outside the tokens shown ({start}..{end - 1}); widen the window to see it.")
        row_scale: Literal["row", "shared"] = "row" if scale == "per layer" else "shared"
        style = SpacedTokensStyle(chunk_size=size, max_tokens=config.SPACED_TOKEN_LIMIT, width=config.PLOT_WIDTH_PX,
                                  x_range=_zoomed(trace, h, row_scale, (start, end), zoom))
        fig = spaced_tokens_figure(trace, head=h, scale=row_scale, window=(start, end), patterns=patterns,
                                   highlight=highlight, style=style)
        chart = f"spaced-{item.key}"
        show_figure(fig, chart, export_name(item.label, "spaced-tokens", item.input_id, head=h),
                    on_select=lambda: _pick_token(state.chart_key(chart)))
        if highlight is not None:
            why_this_position(item, highlight[0], h)
            why_this_attention(item, highlight[0], h)

    per_item(items, render)


def _pick_token(chart_key: str) -> None:
    """A click on the spaced-token plot: highlight the clicked token (its index is customdata[0])."""
    points = (st.session_state.get(chart_key) or {}).get("selection", {}).get("points", [])
    for point in points:
        data = point.get("customdata")  # a row [token, position, increment]; a typed array arrives as {"0": …}
        index = data.get("0") if isinstance(data, dict) else data[0] if isinstance(data, (list, tuple)) and data else data
        if isinstance(index, (int, float)):
            st.session_state[state.HIGHLIGHT_TOKEN] = int(index)
            return


def _clear_highlight() -> None:
    st.session_state[state.HIGHLIGHT_TOKEN] = None


def _zoomed(trace: Trace, head: int | str, scale: str, window: tuple[int, int],
            zoom: tuple[float, float]) -> tuple[float, float] | None:
    """The x range of the zoom slider's fraction of the axis: [0, 1] per layer, else the window's positions."""
    if tuple(zoom) == (0.0, 1.0) or zoom[1] <= zoom[0]:
        return None
    low, high = 0.0, 1.0
    if scale == "shared":
        z = trace.positions[:, :, window[0]:window[1]]
        z = z.mean(axis=1) if head == "mean" else z[:, cast(int, head)]
        finite = z[np.isfinite(z)]
        if finite.size == 0:
            return None
        low, high = float(finite.min()), float(finite.max())
    span = (high - low) or 1.0
    return low + zoom[0] * span, low + zoom[1] * span


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
        fig = position_scatter_figure(trace, chosen, clamp_head(head, trace.n_heads),
                                      view=cast(Literal["focus", "global"], view),
                                      highlight=_highlights(trace, item) if highlight else None,
                                      style=ScatterStyle(max_points=config.SCATTER_POINT_LIMIT, width=config.PLOT_WIDTH_PX))
        show_figure(fig, f"scatter-{item.key}",
                    export_name(item.label, "scatter", item.input_id, layer=chosen, head=clamp_head(head, trace.n_heads)))

    per_item(items, render)


def heatmaps_view(items: Sequence[Item], selection: Selection) -> None:
    n_heads = max(item.trace.n_heads for item in items)
    c1, c2, c3 = st.columns([1, 1, 1.5])
    size = int(c1.number_input("Chunk size (tokens)", 2, 512, state.CHUNK_SIZE_DEFAULT, key=state.CHUNK_SIZE))
    eps = float(c2.number_input("ε (constant if within ε of the chunk mean)", 0.0, 100.0, state.CHUNK_EPS_DEFAULT, 0.05,
                                key=state.CHUNK_EPS))
    with c3:
        head = head_picker("Head of the chunk strip", "strip_head", n_heads, extra=("mean",), default="0")

    def render(item: Item) -> None:
        trace = item.trace
        kinds = trace.layer_kinds
        with guard("Range statistics"):
            ranges = range_stats(trace.positions)
            show_figure(range_heatmap(ranges, kinds), f"range-{item.key}", export_name(item.label, "range", item.input_id))
            csv_button("Ranges (CSV)", results.layer_head_csv(ranges, "range", kinds),
                       export_name(item.label, "range", item.input_id) + ".csv", f"csv-range-{item.key}")
        with guard("Chunk patterns"):
            codes = chunk_pattern_codes(trace.positions, size, eps)
            fractions = pattern_fractions(np.take(np.asarray(("constant", "mono", "hybrid")), codes))
            show_figure(pattern_fractions_figure(fractions, kinds), f"fractions-{item.key}",
                        export_name(item.label, "pattern-fractions", item.input_id))
            csv_button("Pattern fractions (CSV)", results.fractions_csv(fractions, kinds),
                       export_name(item.label, "pattern-fractions", item.input_id) + ".csv", f"csv-fractions-{item.key}")
            h = clamp_head(head, trace.n_heads)
            strip = _head_patterns(trace, h, size, eps)
            head_text = "mean of heads" if h == "mean" else f"head {h}"
            fig = pattern_strip_figure(strip, size, tokens=trace.tokens, layer_kinds=kinds,
                                       title=f"Chunk classification along the text — {head_text}")
            show_figure(fig, f"strip-{item.key}", export_name(item.label, "chunk-strip", item.input_id, head=h))

    per_item(items, render)


def encoding_view(items: Sequence[Item], selection: Selection) -> None:
    """What each head's positions follow over this text: the token index, the tokens' content, a span."""
    st.caption("How much of each head's position variance over this text the token index explains (R² of the "
               "head's own line z ≈ a·t + b), how much the tokens' content class (digit, punctuation, space, word "
               "start, other) adds beyond it, how much a span of the input adds beyond both (e.g. the needle), "
               "and what is left. The shares sum to 1; a head whose positions do not vary stays empty. "
               "`repo_lens.analysis.position_variance_shares` gives the same numbers.")
    names = list(dict.fromkeys(name for item in items for name in item.trace.spans))
    options = ["none", *names]
    span = st.selectbox("Span", options, index=options.index("needle") if "needle" in options else 0,
                        key=f"encoding_span-{'-'.join(names)}",  # other spans: the default again
                        help="a span of the input whose tokens get one more offset of their own "
                                                  "(NIAH: needle, key, value, query, …)")

    def render(item: Item) -> None:
        trace = item.trace
        chosen = trace.spans.get(span) if span != "none" else None
        if span != "none" and chosen is None:
            st.caption(f"{item.label}'s input has no span {span!r}; shown without one.")
        shares = position_variance_shares(trace.positions, content_classes(trace.tokens), spans=chosen,
                                          span_name=span if chosen is not None else "span")
        name = export_name(item.label, "variance-shares", item.input_id)
        show_figure(variance_shares_figure(shares, trace.layer_kinds), f"encoding-{item.key}", name)
        csv_button("Shares (CSV)", results.variance_shares_csv(shares, trace.layer_kinds), name + ".csv",
                   f"csv-encoding-{item.key}")

    per_item(items, render)


def mass_view(items: Sequence[Item], selection: Selection) -> None:
    """Attention mass of the answer rows on the needle, the query and the rest (RePo Table 4), on the
    NIAH input (the page shows this view only for it: ``View.needs_preset``)."""
    beyond = bool(selection.params.get("beyond_context", False))  # the sidebar's "Beyond the context"
    if beyond:
        st.caption("The prompt is longer than the model's context: these masses are length extrapolation.")
    log_y = st.toggle("Log scale", value=True, key="mass_log",
                      help="both charts on a log axis: the needle's mass and the rest's differ by orders of magnitude")
    masses = {}
    for item in items:
        if item.source is None:
            continue
        with guard(f"Attention mass of {item.label}"):
            masses[item.label] = cache.get_mass(item.source, item.stamp, selection.kind, selection.text,
                                                selection.params_json, beyond)
    if not masses:
        if not beyond:
            st.caption("A prompt longer than the model's context can still be measured: tick **Beyond the "
                       f"context** under the {Preset.NIAH} input in the sidebar (length extrapolation).")
        return
    columns = st.columns(len(masses))
    for column, (label, mass) in zip(columns, masses.items()):
        column.markdown(f"**{label}**")
        inner = column.columns(len(mass.per_token))
        for cell, (span, value) in zip(inner, mass.per_token.items()):
            cell.metric(f"{span} ({mass.span_lengths[span]} tok)", f"{value:.2e}")
    models = "-vs-".join(slug(label) for label in masses)
    input_id = next(item.input_id for item in items if item.source is not None)
    show_figure(attention_mass_figure(masses, log_y=log_y), "mass-bars",
                export_name(models, "attention-mass", input_id))
    show_figure(attention_mass_layers_figure(masses, log_y=log_y), "mass-layers",
                export_name(models, "attention-mass-by-layer", input_id))
    csv_button("Attention mass by layer and head (CSV)", results.mass_csv(masses),
               export_name(models, "attention-mass", input_id) + ".csv", "csv-mass")


def boundaries_view(items: Sequence[Item], selection: Selection) -> None:
    st.caption("ROC-AUC of each head's position increments against jieba's word boundaries, scored only at gaps "
               "between two Chinese characters, by the increment of the next character's first token. The increment "
               "is what the layer's mechanism adds at a token where it sums increments (e.g. learned δ), else "
               "z(t) − z(t−1): the numbers `repo-lens analyze --study boundaries` gives. 0.5 = chance.")

    def render(item: Item) -> None:
        result = cache.get_boundaries(item.key, item.trace, item.doc)
        fig = boundary_auc_figure(result.auc, item.trace.layer_kinds, n_scored=result.n_scored)
        show_figure(fig, f"auc-{item.key}", export_name(item.label, "boundary-auc", item.input_id))
        csv_button("AUC (CSV)", results.layer_head_csv(result.auc, "auc", item.trace.layer_kinds),
                   export_name(item.label, "boundary-auc", item.input_id) + ".csv", f"csv-auc-{item.key}")
        with st.expander(f"jieba segmentation: {len(result.words)} words; {result.n_boundaries} of the "
                         f"{result.n_scored} scored gaps end a word"):
            st.text(" / ".join(result.words[:400]) + (" …" if len(result.words) > 400 else ""))

    per_item(items, render)


def data_view(items: Sequence[Item], selection: Selection) -> None:
    def render(item: Item) -> None:
        trace = item.trace
        st.markdown(f"{len(trace):,} tokens · {trace.n_layers} layers ({', '.join(trace.layer_kinds)}) · "
                    f"{trace.n_heads} heads")
        name = export_name(item.label, "trace", item.input_id)
        st.download_button("Trace (.safetensors)", data=partial(results.trace_bytes, trace),
                           file_name=f"{name}.trace.safetensors", mime="application/octet-stream",
                           key=f"trace-{item.key}", on_click="ignore", icon=":material/download:",
                           help="Open it later with “Open a saved trace” or repo_lens.Trace.load")
        csv_button("Positions (CSV, every layer and head)", partial(results.positions_csv, trace),
                   f"{name}-positions.csv", f"csv-positions-{item.key}")
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
    renders it for the traces shown, the sidebar ``preset`` input it is made for (None: any; the
    tests open each view with it), and whether it ``needs_preset`` (for any other input the page
    shows a note naming the preset instead of the view)."""

    name: str
    render: Callable[[Sequence[Item], Selection], None]
    preset: str | None = None
    needs_preset: bool = False


VIEWS: tuple[View, ...] = (
    View("Spaced tokens", spaced_view),
    View("Scatter", scatter_view),
    View("Heatmaps", heatmaps_view),
    View("Encoding", encoding_view),
    View("Attention mass", mass_view, preset=Preset.NIAH, needs_preset=True),
    View("Word boundaries", boundaries_view, preset=Preset.CHINESE),
    View("Interventions", interventions_view, preset=Preset.NIAH, needs_preset=True),
    View("Trace & data", data_view),
)
