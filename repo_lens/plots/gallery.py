"""Every public figure builder on one trace: what ``docs/gallery.py`` renders at paper sizes, and what
the paper-figure tests and ``bench/paper_figures.py`` measure.

Example:
    >>> figures = example_figures(synthetic_trace(n_layers=4, n_heads=2, n_tokens=60))
    >>> sorted(figures)[:3]
    ['attention_mass_figure', 'attention_mass_layers_figure', 'attention_split_figure']
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

EXAMPLE_TEXT = ("The magic number is 4271. Marie Curie was born in Warsaw in 1867 and moved to Paris to study "
                "physics; 人工智能 means artificial intelligence. Question: what is the magic number? Answer: 4271. ")

SPACING_TEXT = "Marie Curie, a Polish-born physicist, won two Nobel Prizes."  # the post's English sentence


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
    zoo's needle-in-a-haystack study measures, and the band, attention-split, character-spacing and drift
    figures illustrative inputs of the shape their analyses return (they need a model run, not a trace)."""
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
            trace, head=0, patterns=codes[:, 0], highlight=(n_tokens // 2, 2),
            style=plots.SpacedTokensStyle(chunk_size=chunk_size)),
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
        **_score_and_increment_figures(trace, needle, query),
    }


def _score_and_increment_figures(trace: Any, needle: tuple[int, int], query: tuple[int, int]) -> dict[str, go.Figure]:
    """The variance-share figure of ``trace`` and the band, attention-split, character-spacing and drift figures
    of illustrative inputs shaped like ``trace``'s model's."""
    from repo_lens import plots
    from repo_lens.analysis import content_classes, position_variance_shares

    positions, kinds = np.asarray(trace.positions), list(trace.layer_kinds)
    n_layers, n_heads, n_tokens = positions.shape
    learned_rows = _learned_rows(kinds)
    return {
        "variance_shares_figure": plots.variance_shares_figure(
            position_variance_shares(positions, content_classes(trace.tokens), spans=needle, span_name="needle"),
            kinds),
        "band_usage_figure": plots.band_usage_figure(_example_band_summary(kinds, n_heads)),
        "attention_split_figure": plots.attention_split_figure(
            _example_span_summary(n_layers - 1, n_heads, n_tokens, {"first": (0, 1), "needle": needle, "query": query}),
            head=0, spans=["needle", "query", "first", "rest"]),
        "char_spacing_figure": plots.char_spacing_figure(
            SPACING_TEXT, _example_char_increments(SPACING_TEXT, len(learned_rows)), [kinds[row] for row in learned_rows],
            layers=learned_rows, title="Characters spaced by their learned increments (shared scale)"),
        "category_drift_figure": plots.category_drift_figure(
            {f"L{row}": _example_drift(index) for index, row in enumerate(_first_middle_last(learned_rows))}),
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


def _learned_rows(kinds: list[str], most: int = 4) -> list[int]:
    """Up to ``most`` layers with learned positions, evenly spread (the last layer if every layer is RoPE)."""
    from repo_lens.model.registry import ROPE_KIND

    learned = [layer for layer, kind in enumerate(kinds) if kind != ROPE_KIND] or [len(kinds) - 1]
    return sorted({learned[round(k)] for k in np.linspace(0, len(learned) - 1, min(most, len(learned)))})


def _first_middle_last(rows: list[int]) -> list[int]:
    return [rows[k] for k in sorted({0, len(rows) // 2, len(rows) - 1})]


def _example_band_summary(kinds: list[str], n_heads: int, n_bands: int = 16) -> dict[str, Any]:
    """The fields of a ``bands`` study summary that the band-usage map reads, as ``summarize_bands`` writes them
    (lists, None for a head without a position part): RoPE's band frequencies 10000^(−b/n_bands) in every head;
    the position part of integer-position layers in the two fastest bands, of learned layers anywhere; sink mass
    growing with depth."""
    from repo_lens.model.registry import ROPE_KIND

    rng = np.random.default_rng(7)
    frequencies = (10000.0 ** (-np.arange(n_bands) / n_bands)).tolist()
    dominant: list[list[int | None]] = [
        [int(band) for band in rng.integers(0, 2 if kind == ROPE_KIND else n_bands, size=n_heads)] for kind in kinds]
    if len(kinds) > 1:
        dominant[-1][n_heads // 2] = None  # a head whose positions do not move its scores
    depth = np.linspace(0.1, 0.8, len(kinds))[:, None]
    sink = np.clip(depth + rng.normal(0.0, 0.1, size=(len(kinds), n_heads)), 0.0, 1.0).round(3)
    return {"layers": list(range(len(kinds))), "layer_kinds_measured": list(kinds), "n_bands": n_bands,
            "dominant_position_band_by_layer_head": dominant, "sink_mass_by_layer_head": sink.tolist(),
            "band_frequencies_by_layer_head": [[frequencies] * n_heads for _ in kinds]}


ILLUSTRATIVE_LIFTS = {"actual": {"first": 4.0, "needle": 3.0}, "content": {"first": 1.0, "needle": 3.5},
                      "position": {"first": 4.5, "query": 1.5}, "reference": {"first": 3.0, "query": 2.0}}


def _example_span_summary(layer: int, n_heads: int, n_tokens: int, spans: dict[str, tuple[int, int]],
                          n_queries: int = 4) -> Any:
    """What ``ScoreDecomposition.span_summary(spans)`` returns for the last ``n_queries`` rows of one layer over
    the keys before them: each pattern a softmax of noise lifted on some spans (:data:`ILLUSTRATIVE_LIFTS`),
    its mass summed per span, then "rest" and "all"."""
    import pandas as pd

    rng = np.random.default_rng(8)
    queries, keys = np.arange(n_tokens - n_queries, n_tokens), np.arange(n_tokens - n_queries)
    member = {name: (keys >= start) & (keys < end) for name, (start, end) in spans.items()}
    member["rest"] = ~np.any(list(member.values()), axis=0)
    member["all"] = np.ones(len(keys), dtype=bool)
    masses = {}
    for pattern, lifts in ILLUSTRATIVE_LIFTS.items():
        score = rng.normal(0.0, 1.0, size=(n_heads, n_queries, len(keys)))
        for name, lift in lifts.items():
            score[..., member[name]] += lift * rng.uniform(0.5, 1.5, size=(n_heads, 1, 1))
        weights = np.exp(score - score.max(-1, keepdims=True))
        masses[pattern] = weights / weights.sum(-1, keepdims=True)
    head, query = np.meshgrid(np.arange(n_heads), queries, indexing="ij")
    return pd.concat([pd.DataFrame({
        "layer": layer, "head": head.ravel(), "query": query.ravel(), "span": name, "keys": int(inside.sum()),
        **{pattern: mass[..., inside].sum(-1).ravel() for pattern, mass in masses.items()},
        "position_share": rng.uniform(0.0, 1.0, size=head.size)}) for name, inside in member.items()],
        ignore_index=True)


def _example_char_increments(text: str, n_rows: int) -> np.ndarray:
    """``char_increments`` (shared scale) of illustrative byte increments of ``text``, one row per layer: small
    inside words, large at spaces and punctuation, larger in later rows."""
    from repo_lens.analysis import char_increments

    rng = np.random.default_rng(9)
    data = text.encode("utf-8")
    step = np.array([2.0 if chr(byte) in " ,.-" else 0.6 for byte in data])
    byte_increments = np.linspace(0.7, 1.4, n_rows)[:, None] * step * rng.lognormal(0.0, 0.25, size=(n_rows, len(data)))
    return char_increments(byte_increments, text, scale="shared")


def _example_drift(layer_index: int) -> Any:
    """``relative_drift`` of an illustrative vocabulary's δ in the delta-graft script's categories: sentence
    punctuation above the mean, subword continuations below, more so in later layers."""
    from repo_lens.analysis import VOCABULARY_CATEGORIES, relative_drift

    rng = np.random.default_rng(10 + layer_index)
    shift = dict(zip(VOCABULARY_CATEGORIES, (0.08, 0.04, 0.01, -0.03, 0.03, 0.0)))
    labels = rng.choice(VOCABULARY_CATEGORIES, p=[0.01, 0.02, 0.02, 0.35, 0.45, 0.15], size=3000)
    delta = 1.0 + (1.0 + 0.5 * layer_index) * np.array([shift[label] for label in labels])
    return relative_drift(delta + rng.normal(0.0, 0.1, size=labels.size), labels, n_boot=200)
