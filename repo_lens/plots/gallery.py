"""Every public figure builder on one trace: what ``docs/gallery.py`` renders at paper sizes, and what
the paper-figure tests and ``bench/paper_figures.py`` measure.

Example:
    >>> figures = example_figures(synthetic_trace(n_layers=4, n_heads=2, n_tokens=60))
    >>> sorted(figures)[:3]
    ['attention_mass_figure', 'attention_mass_layers_figure', 'attribution_map_figure']
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

EXAMPLE_TEXT = ("The magic number is 4271. Marie Curie was born in Warsaw in 1867 and moved to Paris to study "
                "physics; 人工智能 means artificial intelligence. Question: what is the magic number? Answer: 4271. ")


def synthetic_trace(n_layers: int = 16, n_heads: int = 16, n_tokens: int = 250, seed: int = 0) -> Any:
    """A trace shaped like a RePo model's (no model needed): RoPE positions 0..T-1 in the first quarter of
    the layers, then learned positions made of flat runs, rising runs and jumps; characters of
    :data:`EXAMPLE_TEXT` as tokens (spaces shown as ␣, as byte models show them)."""
    from repo_lens.model.registry import DEFAULT_KIND, ROPE_KIND
    from repo_lens.trace import Trace

    rng = np.random.default_rng(seed)
    rope_layers = max(1, n_layers // 4)
    z = np.empty((n_layers, n_heads, n_tokens), dtype=np.float32)
    z[:rope_layers] = np.arange(n_tokens)
    steps = rng.choice([0.0, 0.05, 1.0, 3.0], p=[0.35, 0.25, 0.3, 0.1], size=(n_layers - rope_layers, n_heads, n_tokens))
    steps *= rng.choice([1.0, -1.0], p=[0.85, 0.15], size=steps.shape)
    scale = rng.uniform(0.2, 4.0, size=(n_layers - rope_layers, n_heads, 1))
    z[rope_layers:] = (steps * scale).cumsum(-1) + rng.normal(0.0, 0.02, size=steps.shape)
    text = (EXAMPLE_TEXT * (n_tokens // len(EXAMPLE_TEXT) + 1))[:n_tokens]
    tokens = ["␣" if char == " " else char for char in text]
    ids = [ord(char) % 256 for char in text]
    kinds = [ROPE_KIND] * rope_layers + [DEFAULT_KIND] * (n_layers - rope_layers)
    return Trace(tokens=tokens, token_ids=np.asarray(ids), positions=z, layer_kinds=kinds)


def word_tokens(n_tokens: int, seed: int = 0) -> list[str]:
    """Tokens as a BPE tokenizer shows text (for examples and benchmarks): the words of
    :data:`EXAMPLE_TEXT` cut into 1–3 tokens, a leading space marked "Ġ" on a word's first token,
    punctuation and CJK characters as tokens of their own.

    >>> tokens = word_tokens(12)
    >>> len(tokens), "".join(tokens).replace("Ġ", " ").split()[0]
    (12, 'The')
    """
    rng = np.random.default_rng(seed)
    pieces: list[str] = []
    words = EXAMPLE_TEXT.split()
    while len(pieces) < n_tokens:
        for word in words:
            core, tail = (word[:-1], word[-1]) if word[-1] in ".;:?," and len(word) > 1 else (word, "")
            n_cuts = min(len(core) - 1, int(rng.integers(0, 3)))
            cuts = sorted(rng.choice(np.arange(1, len(core)), size=n_cuts, replace=False).tolist()) if n_cuts else []
            parts = [core[a:b] for a, b in zip([0, *cuts], [*cuts, len(core)])]
            if not core.isascii():
                parts = list(core)
            pieces += ["Ġ" + parts[0] if pieces else parts[0], *parts[1:]] + ([tail] if tail else [])
    return pieces[:n_tokens]


def example_figures(trace: Any, *, chunk_size: int = 16) -> dict[str, go.Figure]:
    """One figure of every public builder in :mod:`repo_lens.plots`, named after it (the spaced-token
    figure twice: plain, and with the chunk strip and a highlighted token), from ``trace`` and the
    analyses of its positions. The attention-mass figures use illustrative numbers of the size the
    zoo's needle-in-a-haystack study measures (they need a model run, not a trace)."""
    from repo_lens import plots
    from repo_lens.analysis import chunk_pattern_codes, chunk_patterns, pattern_fractions, range_stats

    positions, kinds = np.asarray(trace.positions), list(trace.layer_kinds)
    n_layers, n_heads, n_tokens = positions.shape
    learned = n_layers - 1
    codes = chunk_pattern_codes(positions, size=chunk_size)
    ranges = range_stats(positions)
    needle, query = (n_tokens // 10, n_tokens // 10 + 8), (n_tokens - 40, n_tokens - 25)
    token = min(n_tokens - 1, 40)
    attribution = _example_attribution(min(n_layers - 1, 2), min(n_heads, 4), token)
    return {
        "spaced_tokens_figure": plots.spaced_tokens_figure(trace, head=0),
        "spaced_tokens_figure (chunks, highlight)": plots.spaced_tokens_figure(
            trace, head=0, patterns=codes[:, 0], chunk_size=chunk_size, highlight=(n_tokens // 2, 2)),
        "position_scatter_figure": plots.position_scatter_figure(
            trace, layer=learned, head="all", highlight={"needle": needle, "query": query}),
        "layer_head_heatmap": plots.layer_head_heatmap(
            ranges / max(float(np.nanmax(ranges)), 1e-9), title="Range relative to the largest",
            colorbar_title="share", layer_kinds=kinds),
        "range_heatmap": plots.range_heatmap(ranges, kinds),
        "pattern_fractions_figure": plots.pattern_fractions_figure(
            pattern_fractions(chunk_patterns(positions, size=chunk_size)), kinds),
        "pattern_strip_figure": plots.pattern_strip_figure(codes[:, 0], chunk_size, tokens=list(trace.tokens),
                                                           layer_kinds=kinds),
        "boundary_auc_figure": plots.boundary_auc_figure(_example_auc(n_layers, n_heads), kinds, n_scored=n_tokens),
        "attention_mass_figure": plots.attention_mass_figure(_example_masses(n_layers, n_heads)),
        "attention_mass_layers_figure": plots.attention_mass_layers_figure(_example_masses(n_layers, n_heads)),
        "category_increments_figure": plots.category_increments_figure(_category_means(trace)),
        "layer_series_figure": plots.layer_series_figure(
            {name: list(_example_auc(n_layers, 1, seed)[:, 0]) for seed, name in enumerate(
                ("RePo", "learned increments", "learned increments per layer", "RoPE"))},
            "ROC-AUC", "Word-boundary AUC per layer", reference=0.5),
        "position_attribution_bars": plots.position_attribution_bars(attribution, head=0, token=token, top=8),
        "attribution_map_figure": plots.attribution_map_figure(attribution, token=token),
        "token_attribution_strip": plots.token_attribution_strip(_example_token_attribution(token), trace.tokens,
                                                                 window=12),
        "interval_figure": plots.interval_figure(
            _example_intervals(n_heads), [f"L{learned} h{head}" for head in range(n_heads)], "accuracy",
            "Accuracy with one head's positions edited", reference=0.75, reference_label="unedited"),
    }


def _example_intervals(n_heads: int) -> dict[str, list[dict[str, float]]]:
    rng = np.random.default_rng(3)
    out = {}
    for edit in ("integer", "constant", "affine", "random"):
        values = np.clip(rng.uniform(0.0, 0.8, n_heads), 0.02, 0.98)
        half = 1.96 * np.sqrt(values * (1 - values) / 200)
        out[edit] = [{"value": float(v), "low": float(max(0.0, v - h)), "high": float(min(1.0, v + h))}
                     for v, h in zip(values, half)]
    return out


def _example_attribution(layer: int, n_heads: int, token: int) -> Any:
    """Illustrative attributions of one layer (its heads, one token) to the embedding, the earlier blocks
    and their first four heads: what ``position_attribution`` returns, without a model."""
    from repo_lens.analysis import PositionAttribution

    labels = ["embed"] + [f"{l}_{part}" for l in range(layer) for part in ("attn_out", "mlp_out")]
    labels += [f"L{l}H{h}" for l in range(layer) for h in range(4)]
    values = np.random.default_rng(5).normal(0.0, 1.0, size=(n_heads, 1, len(labels))) ** 3
    return PositionAttribution(layer, list(range(n_heads)), [token], labels, values,
                               np.full((n_heads, 1), 12.5), "ablation")


def _example_token_attribution(token: int) -> Any:
    from repo_lens.analysis import TokenAttribution

    values = np.random.default_rng(6).normal(0.0, 0.3, size=token + 1)
    values[-1] = 1.2
    return TokenAttribution(2, 0, token, 12.5, np.zeros((token + 1, 1)), values)


def _example_auc(n_layers: int, n_heads: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(0.5 + rng.normal(0.0, 0.08, size=(n_layers, n_heads)), 0.0, 1.0)


def _example_masses(n_layers: int, n_heads: int) -> dict[str, Any]:
    from repo_lens.analysis import AttentionMass

    out = {}
    for index, (model, needle) in enumerate((("RoPE", 0.012), ("NoPE", 0.009), ("RePo", 0.031), ("LPI", 0.024))):
        per_token = {"needle": needle, "query": needle / 3, "rest": 2e-3}
        depth = np.linspace(0.5, 1.5, n_layers)[:, None] * np.ones((1, n_heads))
        out[model] = AttentionMass(
            per_token=per_token, by_layer_head={span: value * depth ** (index + 1) for span, value in per_token.items()},
            span_lengths={"needle": 8, "query": 15, "rest": 200}, query=(240, 250), self_mass=np.zeros((n_layers, n_heads)),
            layers=list(range(n_layers)))
    return out


def _category_means(trace: Any) -> list[dict[str, float]]:
    from repo_lens.analysis import byte_categories, increments_by_category, trace_increments

    table = increments_by_category(trace_increments(trace), byte_categories(trace.token_ids))
    means = np.nanmean(table.mean, axis=1)  # (layers, categories), mean over heads
    return [{label: float(means[layer, i]) for i, label in enumerate(table.labels)} for layer in range(len(means))]
