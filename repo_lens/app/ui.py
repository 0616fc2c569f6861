"""Small Streamlit building blocks: error guard, figure display with export buttons, pickers."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, SupportsIndex

import plotly.graph_objects as go
import streamlit as st

from repo_lens import RepoLensError, Trace
from repo_lens.model.registry import learned_layers
from repo_lens.plots import export_unavailable, figure_bytes
from repo_lens.validation import check_index

from repo_lens.app.documents import Document

LOG = logging.getLogger("repo_lens.app")
_CONTROL_FLOW = {"StopException", "RerunException", "ScriptControlException"}
EXPORT_FORMATS = (("PNG", "png", "image/png"), ("SVG", "svg", "image/svg+xml"), ("PDF", "pdf", "application/pdf"),
                  ("HTML", "html", "text/html"))
HEAD_CHOICES = ("mean", "all")  # what head_picker offers besides head indices


@dataclass
class Item:
    """One trace shown by the views: from a model (source set) or from a file."""

    label: str
    trace: Trace
    doc: Document | None
    source: str | None = None
    stamp: float | str = 0.0  # what changes with the model: files' mtime, or a Hub id's commit
    key: str = ""
    input_id: str = ""  # a short hash of the token ids, for export file names


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show repo_lens errors (and anything unexpected) as a message instead of a traceback."""
    try:
        yield
    except RepoLensError as error:
        st.error(f"{what}: {error}", icon="⚠️")
    except Exception as error:
        if type(error).__name__ in _CONTROL_FLOW:
            raise
        LOG.exception("%s failed", what)
        st.error(f"{what} failed unexpectedly ({type(error).__name__}: {error}). The details are in the server log.",
                 icon="🛑")


MODEBAR_PX = 34  # the modebar's band at the top of a chart: the title goes under it


def show_figure(fig: go.Figure, key: str, name: str, on_select: Callable[[], None] | None = None) -> Any:
    """The interactive chart, then labelled "Download PNG / SVG / PDF / HTML" buttons rendered only when
    clicked, saved as ``name``.<format>. ``on_select`` makes points clickable (a click reruns and then
    calls it; the selection is in ``st.session_state["chart-" + key]``). Returns the chart's selection state."""
    if fig.layout.title.text:
        fig.update_layout(margin_t=max(fig.layout.margin.t or 0, MODEBAR_PX + 46), title_yref="container",
                          title_y=1.0, title_yanchor="top", title_pad_t=MODEBAR_PX)
    selection: dict[str, Any] = {"on_select": on_select, "selection_mode": "points"} if on_select else {}
    if on_select:  # what Streamlit sets once the chart is drawn, set before: no relayout for it
        fig.update_layout(clickmode="event+select", dragmode="pan", hovermode=fig.layout.hovermode or "closest")
    state = st.plotly_chart(fig, theme=None, key=f"chart-{key}", width="stretch", **selection,
                            config={"displaylogo": False, "toImageButtonOptions": {"format": "svg", "filename": name}})
    columns = st.columns(len(EXPORT_FORMATS) + 1, gap="small")
    problem = export_unavailable()  # no Chromium: static formats are off and say why; HTML still works
    pdf_problem = problem or export_unavailable("pdf")  # PDF also needs rsvg-convert
    for column, (label, fmt, mime) in zip(columns, EXPORT_FORMATS):
        why = pdf_problem if fmt == "pdf" else problem if fmt != "html" else None
        column.download_button(f"Download {label}", data=_renderer(fig, fmt), file_name=f"{name}.{fmt}", mime=mime,
                               key=f"export-{fmt}-{key}", on_click="ignore", icon=":material/download:",
                               help=why or f"Download this figure as {label}", disabled=bool(why), width="stretch")
    if problem:
        columns[-1].caption(f"PNG / SVG / PDF export is off: {problem}")
    elif pdf_problem:
        columns[-1].caption(f"PDF export is off: {pdf_problem}")
    return state


def _renderer(fig: go.Figure, fmt: str) -> Callable[[], bytes]:
    def render() -> bytes:
        return figure_bytes(fig, fmt)

    return render


def csv_button(label: str, data: Callable[[], bytes] | bytes, file_name: str, key: str) -> None:
    st.download_button(label, data=data, file_name=file_name, mime="text/csv", key=key, on_click="ignore",
                       icon=":material/table:")


def head_picker(label: str, key: str, n_heads: int, extra: Sequence[str] = ("mean",), default: str | None = None) -> Any:
    """A head index (int) or one of ``extra`` ("mean", "all")."""
    options = [*extra, *map(str, range(n_heads))]
    names = {"mean": "mean of heads", "all": "all heads"}
    choice = st.selectbox(label, options, index=options.index(default) if default in options else 0, key=key,
                          format_func=lambda o: names.get(o, f"head {o}"))
    return int(choice) if str(choice).isdigit() else choice


def clamp_head(head: Any, n_heads: int) -> Any:
    """The picked head for a model with ``n_heads`` heads: "mean" / "all" as they are; an index
    beyond this model's heads (picked for a wider model in the comparison) becomes its last head;
    anything else goes through :func:`repo_lens.validation.check_index`.
    """
    if isinstance(head, str) and head in HEAD_CHOICES:
        return head
    if isinstance(head, SupportsIndex) and not isinstance(head, bool):
        head = min(operator.index(head), n_heads - 1)
    return check_index(head, n_heads, "head")


def per_item(items: Sequence[Item], render: Callable[[Item], None]) -> None:
    """Render each item; when comparing, one under the other at full width, each under its model's name."""
    if len(items) == 1:
        with guard(items[0].label):
            render(items[0])
        return
    for item in items:
        st.subheader(item.label, divider="gray")
        with guard(item.label):
            render(item)


def first_learned_layer(trace: Trace) -> int:
    """The first layer whose positions are learned (the registry says which kinds are), else the last layer."""
    learned = learned_layers(trace.layer_kinds)
    return learned[0] if learned else trace.n_layers - 1
