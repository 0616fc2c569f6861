"""Word-boundary ROC-AUC of position increments per layer and head (Chinese word segmentation)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.heatmaps import HeatmapColors, check_layer_kinds, layer_head_heatmap, layer_head_values
from repo_lens.plots.style import DIVERGING
from repo_lens.validation import check_int


def boundary_auc_figure(auc: np.ndarray, layer_kinds: Sequence[str] | None = None, n_scored: int | None = None) -> go.Figure:
    """Heatmap of the AUC (L, H) from :func:`repo_lens.analysis.boundary_auc` on a diverging scale
    centred at 0.5 (chance): above 0.5 word boundaries get larger increments, below smaller ones.
    Each layer's label carries its mean over heads.

    Example:
        >>> import numpy as np
        >>> fig = boundary_auc_figure(np.array([[0.5, 0.7], [0.3, 0.5]]), ["rope", "repo"])
        >>> list(fig.data[0].y), fig.data[0].zmid
        (['L0 rope · mean 0.60', 'L1 repo · mean 0.40'], 0.5)
    """
    values = layer_head_values(auc, "auc")
    if ((values < 0) | (values > 1)).any():  # NaN (an undefined AUC) passes
        raise InputError(f"auc must lie in [0, 1] (from repo_lens.analysis.boundary_auc); got values from "
                         f"{np.nanmin(values):g} to {np.nanmax(values):g}")
    kinds = check_layer_kinds(layer_kinds, values.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer of undefined AUCs: its mean is NaN, said "nan"
        means = np.nanmean(values, axis=1)
    title = "Chinese word-boundary AUC of position increments (0.5 = chance)"
    if n_scored is not None:
        title += f" — {check_int(n_scored, 'n_scored (scored gaps; None leaves it out)', minimum=0)} scored gaps"
    fig = layer_head_heatmap(values, title=title, colorbar_title="AUC",
                             colors=HeatmapColors(colorscale=DIVERGING, zmin=0.0, zmax=1.0, zmid=0.5))
    labels = [f"L{layer}{' ' + kinds[layer] if kinds else ''} · mean {mean:.2f}" for layer, mean in enumerate(means)]
    fig.data[0].y = labels
    return fig
