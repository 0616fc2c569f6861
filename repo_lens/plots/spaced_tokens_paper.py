"""A spaced-token figure laid out again for a paper (:func:`paper_layout`, registered for
:func:`repo_lens.plots.paper_figure`): its rows, read back from the figure, drawn again for the paper's
width and type sizes: fewer labels, more marks, none past the plot's edges.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import plotly.graph_objects as go

from repo_lens.plots.labels import label_width_px
from repo_lens.plots.paper import PaperTarget
from repo_lens.plots.paper_layout import legend_height, legend_key, register_relayout, relayout_plot
from repo_lens.plots.spaced_token_labels import place_rows
from repo_lens.plots.spaced_tokens import MERGED_PATTERN, Row, RowLook, draw_rows, x_axis_range

PAPER_TICK_HALF_PX = 3.0
PAPER_STRIP_PX = 3.0
PAPER_GAP_PX = 1.5
LINE_EM = 1.2  # the height of a line of labels, in font sizes


def paper_layout(fig: go.Figure, target: PaperTarget) -> None:
    """Lay a spaced-token figure out again for ``target`` (see :func:`repo_lens.plots.paper_figure`):
    its rows, read back from the figure, drawn again with the labels placed for the paper's plot width
    and label size (fewer labels, and marks for the rest), none running past the plot's edges; rows as
    high as a label, its marks and the chunk strip need."""
    rows = _rows_of_figure(fig)
    if not rows:
        relayout_plot(fig, target)
        return
    meta = dict(fig.layout.meta or {})
    axis_range = tuple(fig.layout.xaxis.range or meta.get("x_range") or x_axis_range(np.concatenate([r.x for r in rows]), None))
    strip = [shape.name for shape in fig.layout.shapes if (shape.name or "").endswith(" chunk")]
    frame = _paper_frame(rows, target, legend_height(strip, target) if strip else 0.0)
    tokens = (int(meta["window"][0]), list(meta["tokens"])) if meta.get("tokens") and meta.get("window") else None
    placed = place_rows(rows, axis_range, frame["look"], int(meta.get("label_limit", 400)), tokens=tokens)
    overlays = _drop_rows(fig)
    draw_rows(fig, rows, placed, frame["look"], axis_range)
    fig.data = [trace for trace in fig.data if trace.name != "highlighted tokens"] + overlays  # rings on top
    _restyle_overlays(fig, frame["look"])
    scale = meta.get("scale")
    fig.update_xaxes(title_text="position (rescaled per layer)" if scale == "row" else "position", automargin=False,
                     range=list(axis_range), tickfont_size=target.tick_px, title_font_size=target.text_px,
                     title_standoff=2, ticklen=3)
    fig.update_yaxes(range=frame["y_range"], autorange=False, automargin=False, tickfont_size=target.tick_px)
    fig.update_layout(height=frame["height"], margin=frame["margin"], showlegend=bool(strip),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                  font_size=target.tick_px, itemwidth=30, bgcolor="rgba(0,0,0,0)"))
    fig.layout.meta = {**meta, "labelled": [len(labels.x) for labels in placed], "width": target.width_px,
                       "paper": target.name}


def _paper_frame(rows: list[Row], target: PaperTarget, legend_px: float) -> dict[str, Any]:
    """Margins, height, y range and row look of a spaced-token figure at ``target``'s size."""
    label_px = target.small_px
    strip = any(row.custom.shape[1] > 3 for row in rows)
    above = PAPER_TICK_HALF_PX + PAPER_GAP_PX + LINE_EM * label_px  # the labels over a row's marks
    below = PAPER_TICK_HALF_PX + (PAPER_GAP_PX + PAPER_STRIP_PX if strip else 0.0)  # the strip under them
    margin = dict(l=math.ceil(max(label_width_px(row.name, target.tick_px) for row in rows) + 8), r=4,
                  t=math.ceil(max(4.0, legend_px - 4)), b=math.ceil(LINE_EM * (target.tick_px + target.text_px) + 3), pad=0)
    height = target.height_px or math.ceil(len(rows) * (above + below + 2 * PAPER_GAP_PX) + margin["t"] + margin["b"])
    row_px = (height - margin["t"] - margin["b"]) / len(rows)
    shift = (below - above) / 2 / row_px  # centre each row's block of labels, marks and strip in its band
    look = RowLook(target.width_px - margin["l"] - margin["r"], label_px, tick_half=PAPER_TICK_HALF_PX / row_px,
                   label_dy=-(PAPER_TICK_HALF_PX + PAPER_GAP_PX + LINE_EM * label_px / 2) / row_px,
                   label_position="middle center", strip_dy=(below - PAPER_STRIP_PX / 2) / row_px,
                   strip_px=PAPER_STRIP_PX, column_px=1.0, tick_width=0.75, label_inside=True)
    return {"look": look, "margin": margin, "height": height, "y_range": [len(rows) - 0.5 + shift, -0.5 + shift]}


def _rows_of_figure(fig: go.Figure) -> list[Row]:
    """The rows of a spaced-token figure, read back from its row traces (top to bottom)."""
    highlighted = np.asarray((fig.layout.meta or {}).get("highlight", []) if isinstance(fig.layout.meta, dict) else [])
    out = []
    for trace in fig.data:
        layer = trace.meta.get("layer") if isinstance(trace.meta, dict) else None
        if layer is None or trace.customdata is None:
            continue
        custom = np.asarray(trace.customdata, dtype=np.float32)
        display = np.asarray([re.sub(MERGED_PATTERN, "", text) for text in np.asarray(trace.text, dtype=str).tolist()],
                             dtype=str)
        color = trace.textfont.color if trace.mode == "text" else trace.marker.color
        first = np.flatnonzero(np.isin(custom[:, 0], highlighted)) if highlighted.size else np.zeros(0, dtype=np.int64)
        out.append(Row(int(layer), trace.name, color, np.asarray(trace.x, dtype=np.float64), display, custom, first))
    return out


def _drop_rows(fig: go.Figure) -> list[go.Scatter]:
    """Take the rows (traces, marks, strip) out of ``fig``; returns the highlight rings, to be drawn last."""
    def row_part(trace: Any) -> bool:
        return isinstance(trace.meta, dict) and ("layer" in trace.meta or "labels_of_layer" in trace.meta)

    rings = [trace for trace in fig.data if trace.name == "highlighted tokens"]
    # the connectors' legend key goes too: a paper's caption says what the lines are, and a legend row of
    # its own would cost a short figure a tenth of its height
    fig.data = [trace for trace in fig.data if not row_part(trace) and not legend_key(trace)]
    fig.layout.shapes = [shape for shape in fig.layout.shapes
                         if not (shape.name or "").startswith("marks of layer") and not (shape.name or "").endswith(" chunk")]
    return rings


def _restyle_overlays(fig: go.Figure, look: RowLook) -> None:
    """Connectors and highlight rings at paper size: thinner lines, rings the size of a label."""
    for trace in fig.data:
        if trace.name == "connectors":
            trace.line.width = 0.5 + 0.3 * (trace.line.width > 1)
        elif trace.name == "highlighted tokens":
            trace.marker.size = look.font_size + 2
            trace.marker.line.width = 1


register_relayout("spaced_tokens", paper_layout)
