"""Figure builders: pure functions from a Trace, arrays or analysis results to a plotly Figure,
and :func:`export` to PNG / SVG / PDF / HTML.

Example:
    >>> import numpy as np
    >>> from repo_lens.trace import Trace
    >>> from repo_lens.plots import spaced_tokens_figure
    >>> t = Trace(tokens=list("hi!"), token_ids=[104, 105, 33], layer_kinds=["rope"],
    ...           positions=np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32))
    >>> spaced_tokens_figure(t, scale="shared").data[-1].x.tolist()
    [0.0, 1.0, 2.0]
"""

from repo_lens.plots.attention_mass import (
    attention_mass_figure,
    attention_mass_layers_figure,
)
from repo_lens.plots.attribution import (
    attribution_map_figure,
    position_attribution_bars,
    token_attribution_strip,
)
from repo_lens.plots.bands import attention_split_figure, band_usage_figure
from repo_lens.plots.boundaries import boundary_auc_figure
from repo_lens.plots.encoding import variance_shares_figure
from repo_lens.plots.export import (
    FORMATS,
    ExportError,
    PaperStyle,
    export,
    export_unavailable,
    figure_bytes,
    start_export_server,
)
from repo_lens.plots.heatmaps import (
    HeatmapColors,
    layer_head_heatmap,
    pattern_fractions_figure,
    pattern_strip_figure,
    range_heatmap,
)
from repo_lens.plots.increment_post import category_drift_figure, char_spacing_figure
from repo_lens.plots.increments import category_increments_figure, layer_series_figure
from repo_lens.plots.intervals import interval_figure
from repo_lens.plots.notebook import (
    STATIC_RENDERER,
    TRACE_FIGURE_KINDS,
    notebook_setup,
    trace_figure,
)
from repo_lens.plots.paper import FONT_FAMILIES, PAPER_LAYOUTS, PAPER_PRESETS
from repo_lens.plots.paper_layout import paper_figure
from repo_lens.plots.scatter import ScatterStyle, iqr_bounds, iqr_outliers, position_scatter_figure
from repo_lens.plots.spaced_tokens import SpacedTokensStyle, spaced_tokens_figure, suggested_scale
from repo_lens.plots import spaced_tokens_paper  # noqa: F401,I001  (registers the spaced-token paper layout)
from repo_lens.plots.style import (
    DIVERGING,
    FONT_FAMILY,
    KIND_COLORS,
    OKABE_ITO,
    PATTERN_COLORS,
    sample_indices,
)

__all__ = [
    "DIVERGING",
    "FONT_FAMILIES",
    "FONT_FAMILY",
    "FORMATS",
    "KIND_COLORS",
    "OKABE_ITO",
    "PAPER_LAYOUTS",
    "PAPER_PRESETS",
    "PATTERN_COLORS",
    "STATIC_RENDERER",
    "TRACE_FIGURE_KINDS",
    "ExportError",
    "HeatmapColors",
    "PaperStyle",
    "ScatterStyle",
    "SpacedTokensStyle",
    "attention_mass_figure",
    "attention_mass_layers_figure",
    "attention_split_figure",
    "attribution_map_figure",
    "band_usage_figure",
    "boundary_auc_figure",
    "category_drift_figure",
    "category_increments_figure",
    "char_spacing_figure",
    "export",
    "export_unavailable",
    "figure_bytes",
    "iqr_bounds",
    "interval_figure",
    "iqr_outliers",
    "layer_head_heatmap",
    "layer_series_figure",
    "notebook_setup",
    "paper_figure",
    "pattern_fractions_figure",
    "pattern_strip_figure",
    "position_attribution_bars",
    "position_scatter_figure",
    "range_heatmap",
    "sample_indices",
    "spaced_tokens_figure",
    "suggested_scale",
    "start_export_server",
    "token_attribution_strip",
    "trace_figure",
    "variance_shares_figure",
]
