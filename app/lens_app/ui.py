"""Small Streamlit building blocks: error guard, figure display with export buttons, pickers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from repo_lens import RepoLensError, Trace
from repo_lens.plots import figure_bytes

from lens_app.documents import Document

LOG = logging.getLogger("repo_lens.app")
_CONTROL_FLOW = {"StopException", "RerunException", "ScriptControlException"}
EXPORT_FORMATS = (("PNG", "png", "image/png"), ("SVG", "svg", "image/svg+xml"), ("PDF", "pdf", "application/pdf"),
                  ("HTML", "html", "text/html"))


@dataclass
class Item:
    """One trace shown by the views: from a model (source set) or from a file."""

    label: str
    trace: Trace
    doc: Document | None
    source: str | None = None
    stamp: float = 0.0
    key: str = ""


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


def show_figure(fig: go.Figure, key: str, name: str) -> None:
    """The interactive chart, then a row of PNG / SVG / PDF / HTML downloads rendered only when clicked."""
    st.plotly_chart(fig, theme=None, key=f"chart-{key}", width="stretch",
                    config={"displaylogo": False, "toImageButtonOptions": {"format": "svg", "filename": name}})
    columns = st.columns([1, 1, 1, 1, 6], gap="small")
    for column, (label, fmt, mime) in zip(columns, EXPORT_FORMATS):
        column.download_button(label, data=_renderer(fig, fmt), file_name=f"{name}.{fmt}", mime=mime,
                               key=f"export-{fmt}-{key}", on_click="ignore", icon=":material/download:",
                               help=f"Download this figure as {label}")


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
    return min(head, n_heads - 1) if isinstance(head, int) else head


def per_item(items: Sequence[Item], render: Callable[[Item], None]) -> None:
    """Render each item, side by side when comparing."""
    if len(items) == 1:
        with guard(items[0].label):
            render(items[0])
        return
    for column, item in zip(st.columns(len(items)), items):
        with column:
            st.markdown(f"**{item.label}**")
            with guard(item.label):
                render(item)


def first_learned_layer(trace: Trace) -> int:
    for layer, kind in enumerate(trace.layer_kinds):
        if kind not in ("rope", "nope"):
            return layer
    return trace.n_layers - 1
