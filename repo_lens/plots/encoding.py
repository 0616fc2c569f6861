"""What the learned positions encode: the index / content / span / rest shares of each head's variance
(:func:`repo_lens.analysis.position_variance_shares`) as layer × head heatmaps side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from repo_lens.errors import InputError
from repo_lens.plots.heatmaps import check_layer_kinds
from repo_lens.plots.style import COLORBAR_MARGIN_PX, SEQUENTIAL, layer_label, styled

_TITLES = {"index": "index (line R²)", "content": "content class", "rest": "rest"}


def overall_shares(shares: Any) -> dict[str, float]:
    """Each share over every layer and head, weighted by the heads' variance (heads whose positions do not
    vary left out): the share of all the heads' variance together.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import position_variance_shares
        >>> z = np.stack([np.arange(6.0), np.array([0.0, 1, 0, 0, 1, 0])])[None]
        >>> {name: round(value, 3) for name, value in overall_shares(position_variance_shares(z, ["a"] * 6)).items()}
        {'index': 0.929, 'content': 0.0, 'rest': 0.071}
    """
    parts = _parts(shares)
    variance = np.asarray(shares.variance, dtype=np.float64)
    weight = np.where(np.isfinite(parts["index"]), variance, 0.0)
    total = weight.sum()
    return {name: float(np.nansum(value * weight) / total) if total > 0 else float("nan")
            for name, value in parts.items()}


def _parts(shares: Any) -> dict[str, np.ndarray]:
    read = getattr(shares, "shares", None)
    if not callable(read) or not hasattr(shares, "variance"):
        raise InputError("expected a VarianceShares from repo_lens.analysis.position_variance_shares, "
                         f"got {type(shares).__name__}")
    parts = {name: np.asarray(value, dtype=np.float64) for name, value in read().items()}
    shape = parts["index"].shape
    if len(shape) != 2 or any(value.shape != shape for value in parts.values()):
        raise InputError("every share of a VarianceShares must be (n_layers, n_heads); got shapes "
                         f"{ {name: value.shape for name, value in parts.items()} }")
    return parts


def variance_shares_figure(shares: Any, layer_kinds: Sequence[str] | None = None,
                           title: str | None = None) -> go.Figure:
    """One heatmap per share of :func:`repo_lens.analysis.position_variance_shares` (token index,
    content class, the span if one was given, rest), layers down and heads across, on one 0–1 colour
    scale; each panel's title gives the share of all the heads' variance together (:func:`overall_shares`). Heads whose positions
    do not vary (NoPE, constants) stay empty.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import position_variance_shares
        >>> z = np.stack([np.arange(8.0), np.array([0.0, 3, 3, 0, 0, 3, 3, 0])])[None]
        >>> fig = variance_shares_figure(position_variance_shares(z, list("abbaabba"), spans=(2, 3), span_name="needle"))
        >>> [d.name for d in fig.data], fig.data[1].z[0].round(2).tolist()
        (['index', 'content', 'needle', 'rest'], [0.0, 1.0])
    """
    parts = _parts(shares)
    n_layers, n_heads = parts["index"].shape
    layer_kinds = check_layer_kinds(layer_kinds, n_layers)
    overall = overall_shares(shares)
    span_name = getattr(shares, "span_name", None) or "span"
    names = {name: span_name if name == "span" else name for name in parts}
    titles = [f"{_TITLES.get(name, names[name])}: {overall[name]:.0%}" for name in parts]
    fig = make_subplots(rows=1, cols=len(parts), shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=titles)
    y = [layer_label(layer, layer_kinds) for layer in range(n_layers)]
    x = [f"h{h}" for h in range(n_heads)]
    for col, (name, value) in enumerate(parts.items()):
        heatmap = go.Heatmap(z=value, x=x, y=y, coloraxis="coloraxis", name=names[name], xgap=1, ygap=1,
                             hovertemplate=f"{names[name]}: " + "%{y}, %{x}: %{z:.1%}<extra></extra>")
        if value.size <= 200:
            heatmap.update(texttemplate="%{z:.2f}", textfont=dict(size=10))
        fig.add_trace(heatmap, row=1, col=col + 1)
    texts = getattr(shares, "n_texts", 1)
    tokens = getattr(shares, "n_tokens", None)
    default = ("What the positions encode: shares of each head's variance"
               + (f" ({tokens:,} tokens of {texts} text{'s' if texts != 1 else ''})" if tokens else ""))
    styled(fig, title or default, height=170 + 34 * n_layers)
    fig.update_layout(margin_r=COLORBAR_MARGIN_PX)
    fig.update_layout(coloraxis=dict(colorscale=SEQUENTIAL, cmin=0.0, cmax=1.0, colorbar=dict(title=dict(text="share"))))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    fig.update_layout(meta={"kind": "variance_shares"})
    return fig
