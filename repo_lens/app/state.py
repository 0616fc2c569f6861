"""The session-state keys that more than one part of the app reads or writes, declared once.

A view owns the keys of its own widgets (e.g. ``"scatter_layer"``) and nothing else reads them;
a key that crosses that line (read by another view, the page, a callback or the URL) is declared
here, with who sets it and who reads it. No Streamlit here.
"""

from __future__ import annotations

VIEW = "view"  # the open tab (a View's name): set by the tab bar, bound to ?view= in the URL
INPUT = "input"  # the sidebar's input (a documents.Preset name): bound to ?input= in the URL
# chunk length (tokens) and ε of the chunk classification: Heatmaps sets them, the spaced-token strip reads them
CHUNK_SIZE = "chunk_size"
CHUNK_EPS = "chunk_eps"
# the highlighted token: the spaced-token view's number input, also set by a click on its plot and by "Clear"
HIGHLIGHT_TOKEN = "spaced_token"
# the spaced-token view's scale ("per layer" / "shared"), and the model it was last suggested for: a new first
# model gets the scale that shows it (plots.suggested_scale); a pick stands while the model does
SPACED_SCALE = "spaced_scale"
SPACED_SCALE_FOR = "_spaced_scale_for"
UPLOADED_TRACES = "_uploaded_traces"  # {upload id: Trace}: an uploaded trace parsed once (cache.load_uploaded_trace)
CHART_PREFIX = "chart-"  # + a chart's key: its selection (ui.show_figure draws it, click callbacks read it)

CHUNK_SIZE_DEFAULT = 16  # tokens: RePo's chunk length
CHUNK_EPS_DEFAULT = 0.2  # within ε of the chunk mean counts as constant


def chart_key(name: str) -> str:
    """The session-state key of chart ``name``'s selection.

    >>> chart_key("spaced-1a2b")
    'chart-spaced-1a2b'
    """
    return CHART_PREFIX + name
