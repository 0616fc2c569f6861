"""The "Why this attention" panel of Spaced tokens: for the clicked token as a query, in a chosen layer and
head, the keys it attends to most with each score split into content and position, each frequency band's
term of those scores, and the attention each part alone would give
(:func:`repo_lens.analysis.score_decomposition`). Computed on the model the trace came from, once per
(layer, head, token)."""

from __future__ import annotations

import csv
import io
from typing import Any

import streamlit as st

from repo_lens.analysis import score_decomposition

from repo_lens.app import cache
from repo_lens.app.names import export_name
from repo_lens.app.score_figures import band_strip_figure, patterns_figure, split_bars_figure
from repo_lens.app.score_panel import AttentionPanel, attention_panel
from repo_lens.app.ui import Item, csv_button, first_learned_layer, guard, show_figure

TITLE = "Why this attention"
INTRO = ("Every pre-softmax score of this query is a **content** part, what the two tokens give (q·k as if both "
         "sat at the same position), plus a **position** part, what their positions add (the rotation's change "
         "of q·k, or a bias the layer adds).")
BARS_CAPTION = ("The keys this query attends to most (with the attention each gets): blue is the content part of "
                "the score, orange the position part, and the diamond the score itself.")
STRIP_CAPTION = ("Each cell is one frequency band's term of that key's score (its pair of channels of the rotated "
                 "q·k): a row adds up to the key's score less any bias, and a band's label is how many positions "
                 "it takes to turn once.")
PATTERNS_CAPTION = ("The attention this query gives each earlier key, and what it would give if the scores were "
                    "the content part alone, the position part alone, or the same q and k at the positions 0, 1, "
                    "2, … (the reference).")
FROM_FILE = ("This trace was opened from a file: splitting its attention scores needs the model it came from. "
             "Pick **Run a model** in the sidebar, choose that model and trace the text again.")


def why_this_attention(item: Item, token: int, head: Any) -> None:
    """The panel for ``item``'s token ``token`` as a query; ``head`` is the Spaced tokens view's head (or "mean")."""
    trace = item.trace
    with st.expander(f"{TITLE}: query token {token} {trace.tokens[token]!r}", expanded=True):
        if item.source is None:
            st.info(FROM_FILE)
            return
        kinds = trace.layer_kinds
        c1, c2, _ = st.columns([1.2, 1.2, 2.4])
        layer = c1.selectbox("Layer", list(range(trace.n_layers)), index=first_learned_layer(trace),
                             key=f"attn_layer_{item.key}",
                             format_func=lambda layer: f"L{layer} {kinds[layer]}" if layer < len(kinds) else f"L{layer}")
        chosen = c2.selectbox("Head", list(range(trace.n_heads)),
                              index=0 if head == "mean" else min(int(head), trace.n_heads - 1),
                              key=f"attn_head_{item.key}_{head}", format_func=lambda h: f"head {h}")
        with guard(TITLE):
            _show(item, int(layer), int(chosen), token)


@st.cache_data(show_spinner="Splitting the attention scores…", max_entries=64)
def get_attention_panel(source: str, stamp: float | str, token_ids: tuple[int, ...], layer: int, head: int,
                        query: int) -> AttentionPanel:
    """Head ``head``'s scores of query ``query`` in layer ``layer`` split into content and position, on the model
    ``source`` and the tokens ``token_ids``."""
    lens = cache.get_lens(source, stamp)
    found = score_decomposition(lens, list(token_ids), layer, heads=[head], queries=[query], reference="integer")
    return attention_panel(found, head, query)


def _show(item: Item, layer: int, head: int, token: int) -> None:
    assert item.source is not None  # checked by the caller
    trace = item.trace
    context = cache.get_lens(item.source, item.stamp).context_length
    if context is not None and len(trace) > context:
        st.info(beyond_context_message(len(trace), context))
        return
    panel = get_attention_panel(item.source, item.stamp, tuple(int(i) for i in trace.token_ids), layer, head, token)
    tokens = list(trace.tokens)
    name = export_name(item.label, "why-this-attention", item.input_id, layer=layer, head=head)
    st.markdown(INTRO)
    st.caption(BARS_CAPTION)
    show_figure(split_bars_figure(panel, tokens), f"attn-bars-{item.key}", name)
    csv_button("Top keys (CSV)", top_keys_csv(panel, tokens), f"{name}.csv", f"csv-attn-{item.key}")
    note = position_note(panel)
    if note is not None:
        st.info(note)
    if panel.bands is not None:
        st.caption(STRIP_CAPTION)
        show_figure(band_strip_figure(panel, tokens), f"attn-bands-{item.key}",
                    export_name(item.label, "why-this-attention-bands", item.input_id, layer=layer, head=head))
    st.caption(PATTERNS_CAPTION)
    show_figure(patterns_figure(panel, tokens), f"attn-patterns-{item.key}",
                export_name(item.label, "why-this-attention-patterns", item.input_id, layer=layer, head=head))


def position_note(panel: AttentionPanel) -> str | None:
    """What the panel says about a layer whose position part is 0 (it uses no position) or that has no frequency
    bands (it rotates nothing); None for a layer with both."""
    if panel.position_free:
        bands = "" if panel.bands is not None else ", and it has no frequency bands"
        return (f"Layer {panel.layer} ({panel.kind}) uses no position here: the position part is 0 for every key, "
                f"so the scores are the content part alone{bands}.")
    if panel.bands is None:
        return (f"Layer {panel.layer} ({panel.kind}) rotates neither q nor k: its position part is the bias it adds "
                "to q·k, so there are no frequency bands to show.")
    return None


def beyond_context_message(n_tokens: int, context: int) -> str:
    """What the panel says for a trace longer than the model's context (traced "Beyond the context").

    >>> print(beyond_context_message(1500, 1024).split(":")[0])
    This input is 1,500 tokens, beyond the model's context (1,024)
    """
    return (f"This input is {n_tokens:,} tokens, beyond the model's context ({context:,}): the attention scores are "
            "split only for inputs within the context. Untick **Beyond the context** in the sidebar, or pick a "
            "shorter input.")


def top_keys_csv(panel: AttentionPanel, tokens: list[str]) -> bytes:
    """The top keys as CSV: key, token, attention under each pattern, content, position, score."""
    rows = panel.rows(tokens)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")
