"""The Interventions view: ablate the positions of chosen layers and heads on the NIAH prompt and see
the answer's probability and the spaced tokens before and after, and a layer × head map of what
ablating each head alone does (``repo_lens.interventions``; one forward per change, the map batched)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import streamlit as st

from repo_lens import InputError, interventions
from repo_lens.model.registry import learned_layers
from repo_lens.protocol import LensProtocol
from repo_lens.plots import DIVERGING, HeatmapColors, SpacedTokensStyle, layer_head_heatmap, spaced_tokens_figure

from repo_lens.app import cache, config
from repo_lens.app.names import export_name
from repo_lens.app.sidebar import Selection
from repo_lens.app.ui import Item, clamp_head, head_picker, per_item, show_figure

MODES = {"integer (RoPE's positions)": "integer", "constant (NoPE-like)": "constant",
         "affine (each head's own straight line)": "affine",
         "rank (order kept, spacing made even)": "rank",
         "scaled (the integers at each head's own range)": "scaled",
         "random (a random edit as large as affine)": "random",
         "window (shuffled within blocks of 8 tokens)": "window", "shuffle": "shuffle",
         "interpolate toward the integers (the authors' pdrop)": "interpolate",
         "interpolate toward a constant": "interpolate-constant"}


@dataclass(kw_only=True)
class InterventionResult:
    """The answer before and after (``probability``: of the whole answer, ``exact``: greedy decoding
    reproduces it), the positions under the ablation (L, H, T) and each head's effect alone (L, H)."""

    before: dict[str, float]
    after: dict[str, float]
    positions: np.ndarray
    effects: np.ndarray


def mode_argument(choice: str, p: float) -> interventions.Mode:
    """The ``mode`` of ``repo_lens.interventions`` for a choice of the view's mode box (``p``: interpolation's).

    >>> mode_argument("interpolate", 0.25), mode_argument("interpolate-constant", 1.0), mode_argument("shuffle", 0.5)
    (Interpolate(p=0.25, toward='integer'), Interpolate(p=1.0, toward='constant'), Shuffle(seed=0))
    """
    if choice.startswith("interpolate"):
        return interventions.Interpolate(p=float(p), toward="constant" if choice.endswith("constant") else "integer")
    return interventions.parse_mode(choice)


@dataclass(frozen=True, kw_only=True)
class InterventionRequest:
    """What the view asks for: the mode box's ``choice`` (a value of ``MODES``) and its ``p``, the ``layers``
    and ``heads`` edited, and ``with_map``: the layer × head map of each head ablated alone."""

    choice: str
    p: float
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    with_map: bool

    @property
    def mode(self) -> interventions.Mode:
        return mode_argument(self.choice, self.p)


def intervention_result(lens: LensProtocol, ids: Sequence[int], answer: tuple[int, int], mode: interventions.Mode,
                        layers: list[int], heads: list[int], with_map: bool) -> InterventionResult:
    """Everything the view shows, for one model and prompt."""
    target = (np.asarray(ids, dtype=np.int64), cast("tuple[int, int]", tuple(answer)))
    logprob, exact = interventions.answer_logprob(target), interventions.niah_exact_match(target)

    def scores(logits: Any) -> dict[str, float]:
        value = float(logprob(logits)[0])
        return {"logprob": value, "probability": math.exp(value), "exact": float(exact(logits)[0])}

    before = scores(interventions.ablate(lens, list(ids), mode=interventions.Interpolate(p=0.0)))
    after = scores(interventions.ablate(lens, list(ids), mode=mode, layers=layers, heads=heads))
    positions = interventions.ablated_positions(lens, list(ids), mode=mode, layers=layers, heads=heads)
    effects = np.full((lens.n_layers, lens.n_heads), np.nan)
    if with_map:
        effects = interventions.ablation_grid(lens, list(ids), logprob, mode=mode, layers=layers, heads=heads,
                                              options=interventions.GridOptions(progress=False)).effects
    return InterventionResult(before=before, after=after, positions=positions, effects=effects)


@st.cache_data(show_spinner="Ablating positions…", max_entries=32)
def get_intervention(source: str, stamp: float | str, kind: str, text: str, params_json: str,
                     request: InterventionRequest) -> InterventionResult:
    """Cached :func:`intervention_result` of the sidebar's input for ``source``."""
    doc = cache.get_document(source, stamp, kind, text, params_json)
    if doc.query is None:
        raise InputError("interventions score the answer of a prompt; pick the NIAH input")
    return intervention_result(cache.get_lens(source, stamp), doc.ids, doc.query, request.mode, list(request.layers),
                               list(request.heads), request.with_map)


CHIPS_PER_ROW = 8  # more layers or heads than this and their pickers take a row each, so every chip shows


def _controls(items: Sequence[Item]) -> tuple[InterventionRequest, Any]:
    trace = items[0].trace
    kinds = trace.layer_kinds
    edited = learned_layers(kinds) or list(range(trace.n_layers))  # what layers=None edits
    if max(len(edited), trace.n_heads) > CHIPS_PER_ROW:
        pick_layers, pick_heads = st.container(), st.container()
    else:
        pick_layers, pick_heads = st.columns(2)
    layers = pick_layers.multiselect("Layers", list(range(trace.n_layers)), default=edited,
                                     format_func=lambda l: f"L{l} {kinds[l]}" if l < len(kinds) else f"L{l}",
                                     key="iv_layers")
    heads = pick_heads.multiselect("Heads", list(range(trace.n_heads)), default=list(range(trace.n_heads)),
                                   format_func=lambda h: f"h{h}", key="iv_heads")
    c1, c2, c3 = st.columns([3, 1.6, 1.4], vertical_alignment="bottom")
    choice = MODES[c1.selectbox("Replace their positions by", list(MODES), key="iv_mode")]
    p = 1.0
    if choice.startswith("interpolate"):
        p = c1.slider("p: z' = (1 − p)·z + p·target", 0.0, 1.0, 0.5, 0.05, key="iv_p")
    with c2:
        head = head_picker("Spaced tokens of", "iv_head", trace.n_heads, extra=("mean",), default="mean")
    with_map = c3.toggle("Head map", value=True, key="iv_map",
                         help="ablate each selected head alone (one batched pass per 16 heads)")
    return InterventionRequest(choice=choice, p=float(p), layers=tuple(layers), heads=tuple(heads),
                               with_map=with_map), head


def interventions_view(items: Sequence[Item], selection: Selection) -> None:
    """Pick layers, heads and a mode; see the answer's probability, the spaced tokens before and after,
    and the effect of ablating each head alone."""
    request, head = _controls(items)
    if not request.layers or not request.heads:
        st.info("Pick at least one layer and one head to ablate.")
        return

    def render(item: Item) -> None:
        if item.source is None:
            st.caption("Interventions run the model: pick a model, not a saved trace.")
            return
        result = get_intervention(item.source, item.stamp, selection.kind, selection.text, selection.params_json,
                                  request)
        _answer_metrics(result)
        h = clamp_head(head, item.trace.n_heads)
        after = dataclasses.replace(item.trace, positions=result.positions)
        window = (0, min(len(after), config.DEFAULT_WINDOW))
        for label, trace in (("before", item.trace), ("after", after)):
            style = SpacedTokensStyle(max_tokens=config.SPACED_TOKEN_LIMIT, width=config.PLOT_WIDTH_PX,
                                      title=f"Positions {label}")
            fig = spaced_tokens_figure(trace, head=h, window=window, style=style)
            show_figure(fig, f"iv-spaced-{label}-{item.key}",
                        export_name(item.label, f"intervention-{label}", item.input_id, head=h))
        if request.with_map:
            fig = layer_head_heatmap(result.effects, title="Δ log p(answer), one head ablated at a time",
                                     colorbar_title="Δ log p", layer_kinds=item.trace.layer_kinds,
                                     colors=HeatmapColors(colorscale=DIVERGING, zmid=0.0), value_format=".2f")
            show_figure(fig, f"iv-map-{item.key}", export_name(item.label, "intervention-map", item.input_id))

    per_item(items, render)


def _answer_metrics(result: InterventionResult) -> None:
    c1, c2, c3 = st.columns(3)
    c1.metric("p(answer) before", f"{result.before['probability']:.3g}")
    c2.metric("p(answer) after", f"{result.after['probability']:.3g}",
              delta=f"{result.after['logprob'] - result.before['logprob']:+.2f} log p")
    c3.metric("greedy answer correct", f"{'yes' if result.before['exact'] else 'no'} → "
              f"{'yes' if result.after['exact'] else 'no'}")
