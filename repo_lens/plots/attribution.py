"""Why a token gets its position, drawn: the components that move it (bars), the components × heads map of
one layer, and the context tokens that move it (a strip over the text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import (
    COLORBAR_MARGIN_PX,
    DIVERGING,
    MONO_FAMILY,
    OKABE_ITO,
    ROW_LABEL_STANDOFF,
    escape_tokens,
    styled,
)
from repo_lens.validation import check_int

if TYPE_CHECKING:  # the analysis imports torch; drawing its results needs only the arrays
    from repo_lens.analysis.position_attribution import PositionAttribution, TokenAttribution

RAISES, LOWERS = OKABE_ITO[5], OKABE_ITO[0]  # vermillion: the component raises the position; blue: lowers it


def _row(attribution: PositionAttribution, head: int, token: int) -> np.ndarray:
    if type(attribution).__name__ != "PositionAttribution":
        raise InputError(f"attribution must be a PositionAttribution (from position_attribution), "
                         f"got {type(attribution).__name__}")
    head, token = check_int(head, "head"), check_int(token, "token")  # 1.0 or True would match head 1
    if head not in attribution.heads:
        raise InputError(f"head {head!r} was not attributed; the attribution has heads {attribution.heads}")
    if token not in attribution.tokens:
        raise InputError(f"token {token!r} was not attributed; pass tokens=[{token}] (or all) to position_attribution")
    return attribution.values[attribution.heads.index(head), attribution.tokens.index(token)]


def position_attribution_bars(attribution: PositionAttribution, head: int, token: int, top: int = 10,
                              title: str | None = None) -> go.Figure:
    """The ``top`` components that move head ``head``'s position of token ``token`` most, as horizontal bars
    (largest on top): vermillion where the component raises the position (removing it lowers it), blue where
    it lowers it; the bars' side of zero says the same in print.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import PositionAttribution
        >>> found = PositionAttribution(3, [0], [4], ["embed", "0_attn_out", "L0H1"],
        ...                             np.array([[[0.5, -2.0, 1.0]]]), np.array([[7.0]]), "ablation")
        >>> list(position_attribution_bars(found, head=0, token=4, top=2).data[0].y)
        ['L0H1', '0_attn_out']
    """
    row = _row(attribution, head, token)
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise InputError(f"top must be a positive number of components, got {top!r}")
    order = list(np.argsort(-np.abs(row), kind="stable")[:top])[::-1]  # plotly draws the first bar at the bottom
    values = row[order]
    fig = go.Figure(go.Bar(
        x=values, y=[attribution.labels[i] for i in order], orientation="h",
        marker_color=[RAISES if value >= 0 else LOWERS for value in values],
        hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    position = attribution.positions[attribution.heads.index(head), attribution.tokens.index(token)]
    how = "path ablation" if attribution.method == "ablation" else "gradient × component"
    styled(fig, title or f"L{attribution.layer}H{head}, token {token} (z = {position:.2f}): {how}",
           height=120 + 26 * len(order))
    fig.update_xaxes(title_text="z − z without the component", zeroline=True,
                     zerolinecolor="#888888")
    fig.update_yaxes(type="category", **ROW_LABEL_STANDOFF)
    fig.update_layout(meta={"kind": "position_attribution_bars"})
    return fig


def attribution_map_figure(attribution: PositionAttribution, token: int, title: str | None = None) -> go.Figure:
    """The components × heads map of one layer for token ``token``: components down (in the order of
    ``labels``: the embedding, then each earlier layer's blocks and heads), the layer's heads across, a
    diverging colour centred at zero (the same grey for "moves nothing" in colour and in print).

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import PositionAttribution
        >>> found = PositionAttribution(3, [0, 1], [4], ["embed", "L0H0"], np.array([[[1.0, 0.0]], [[-1.0, 2.0]]]),
        ...                             np.array([[7.0], [3.0]]), "ablation")
        >>> fig = attribution_map_figure(found, token=4)
        >>> fig.data[0].z.tolist(), list(fig.data[0].y), list(fig.data[0].x)
        ([[1.0, -1.0], [0.0, 2.0]], ['embed', 'L0H0'], ['h0', 'h1'])
    """
    rows = np.stack([_row(attribution, head, token) for head in attribution.heads], axis=1)  # [component, head]
    limit = float(np.nanmax(np.abs(rows))) if rows.size and np.isfinite(rows).any() else 1.0
    fig = go.Figure(go.Heatmap(
        z=rows, y=attribution.labels, x=[f"h{head}" for head in attribution.heads], colorscale=DIVERGING,
        zmid=0.0, zmin=-limit, zmax=limit, xgap=1, ygap=1,
        colorbar=dict(title=dict(text="z − z without it")),
        hovertemplate="%{y} on head %{x}: %{z:.3f}<extra></extra>"))
    styled(fig, title or f"Layer {attribution.layer}: what moves token {token}'s position",
           height=140 + 20 * len(attribution.labels))
    fig.update_layout(margin_r=COLORBAR_MARGIN_PX, meta={"kind": "attribution_map"})
    fig.update_yaxes(autorange="reversed", type="category", **ROW_LABEL_STANDOFF)
    fig.update_xaxes(type="category", title_text=f"head of layer {attribution.layer}")
    return fig


def token_attribution_strip(attribution: TokenAttribution, tokens: Sequence[str], window: int | None = 48,
                            title: str | None = None) -> go.Figure:
    """The context tokens that move one position, as a strip over the text: each token in a cell coloured by
    gradient · embedding (diverging, centred at zero) and written under it, the attributed token outlined.
    ``window`` keeps the last ``window`` tokens up to it (None: all).

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import TokenAttribution
        >>> found = TokenAttribution(2, 1, 2, 3.5, np.zeros((3, 4)), np.array([0.1, -0.4, 0.2]))
        >>> fig = token_attribution_strip(found, ["The", " cat", " sat", " on"])
        >>> [list(row) for row in fig.data[0].z], list(fig.data[0].text[0])
        ([[0.1, -0.4, 0.2]], ['The', ' cat', ' sat'])
    """
    if type(attribution).__name__ != "TokenAttribution":
        raise InputError(f"attribution must be a TokenAttribution (from token_attribution), "
                         f"got {type(attribution).__name__}")
    if isinstance(tokens, str) or len(tokens) <= attribution.token:
        raise InputError(f"tokens must be the list of the input's token strings (at least {attribution.token + 1}), "
                         f"got {len(tokens) if not isinstance(tokens, str) else 'a string'}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1):
        raise InputError(f"window must be a positive number of tokens or None, got {window!r}")
    start = 0 if window is None else max(0, attribution.token + 1 - window)
    values = attribution.values[start:attribution.token + 1]
    shown = escape_tokens(list(tokens[start:attribution.token + 1]))
    limit = float(np.abs(values).max()) or 1.0
    x = list(range(start, attribution.token + 1))
    fig = go.Figure(go.Heatmap(
        z=[values.tolist()], x=x, y=[""], text=[shown], texttemplate="%{text}", textfont=dict(family=MONO_FAMILY, size=12),
        colorscale=DIVERGING, zmid=0.0, zmin=-limit, zmax=limit, xgap=1,
        colorbar=dict(title=dict(text="gradient · embedding")),
        hovertemplate="token %{x} %{text}: %{z:.3f}<extra></extra>"))
    fig.add_shape(type="rect", x0=attribution.token - 0.5, x1=attribution.token + 0.5, y0=-0.5, y1=0.5,
                  line=dict(color="#000000", width=2))
    styled(fig, title or (f"Which tokens move L{attribution.layer}H{attribution.head}'s position of token "
                          f"{attribution.token} (z = {attribution.position:.2f})"), height=190)
    fig.update_layout(margin_r=COLORBAR_MARGIN_PX, meta={"kind": "token_attribution_strip"})
    # the tokens under their cells as well: a paper layout drops cell text that does not fit its cell
    fig.update_xaxes(title_text=f"the tokens up to token {attribution.token}", showgrid=False, tickmode="array",
                     tickvals=x, ticktext=shown, tickfont=dict(family=MONO_FAMILY))
    fig.update_yaxes(showticklabels=False, showgrid=False)
    return fig
