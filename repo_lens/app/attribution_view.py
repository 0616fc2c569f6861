"""The "Why this position" panel of Spaced tokens: for the clicked token, the components that write its
learned position in a chosen layer and head (bars), and the context tokens that move it (a strip over
the text). Computed on the model the trace came from, once per (layer, head, token, method)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from repo_lens.model.registry import learned_layers
from repo_lens.plots import position_attribution_bars, token_attribution_strip

from repo_lens.app import cache
from repo_lens.app.names import export_name
from repo_lens.app.ui import Item, guard, show_figure

METHODS = {"path ablation (exact)": "ablation", "gradient × component": "gradient"}


def why_this_position(item: Item, token: int, head: Any) -> None:
    """The panel for ``item``'s token ``token``; ``head`` is the Spaced tokens view's head (or "mean")."""
    trace = item.trace
    layers = learned_layers(trace.layer_kinds)
    with st.expander(f"Why this position: token {token} {trace.tokens[token]!r}", expanded=True):
        if item.source is None:
            st.info("This trace was opened from a file: attributing a position needs the model it came from. "
                    "Pick the model in the sidebar and trace the text again.")
            return
        if not layers:
            st.info("Every layer of this model rotates by the token index: no position is learned, so there is "
                    "nothing to attribute.")
            return
        c1, c2, c3 = st.columns([1.2, 1.2, 2.4])
        layer = c1.selectbox("Layer", layers, key=f"why_layer_{item.key}", format_func=lambda layer: f"L{layer}")
        heads = list(range(trace.n_heads))
        chosen = c2.selectbox("Head", heads, index=0 if head == "mean" else min(int(head), trace.n_heads - 1),
                              key=f"why_head_{item.key}_{head}", format_func=lambda h: f"head {h}")
        method = METHODS[c3.radio("Method", list(METHODS), key=f"why_method_{item.key}", horizontal=True,
                                  help="path ablation: each component removed from the position module's input "
                                       "only; gradient: its linearised effect, with the completeness error")]
        with guard("Why this position"):
            _show(item, int(layer), int(chosen), token, method)


def _show(item: Item, layer: int, head: int, token: int, method: str) -> None:
    assert item.source is not None  # checked by the caller
    found, context = cache.get_attribution(item.source, item.stamp, tuple(item.trace.token_ids), layer, head,
                                           token, method)
    label = export_name(item.label, "why-this-position", item.input_id, layer=layer, head=head)
    show_figure(position_attribution_bars(found, head, token), f"why-bars-{item.key}", label)
    if found.completeness_error is not None:
        st.caption(f"Completeness error (sum of the attributions of the blocks and the embedding, less the "
                   f"position's change with all of them removed): {float(found.completeness_error[0, 0]):+.3f}")
    show_figure(token_attribution_strip(context, item.trace.tokens), f"why-strip-{item.key}",
                export_name(item.label, "why-this-position-tokens", item.input_id, layer=layer, head=head))
