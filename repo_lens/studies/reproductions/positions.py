"""RePo §5.2 on the zoo: ranges of assigned positions (Fig. 2) and chunk patterns (Fig. 3).

Both trace held-out English and Chinese documents (the zoo's validation split), cut to a fixed
number of tokens. Fig. 2 compares two lengths — the training context and twice that (the paper:
2K and 4K tokens); Fig. 3 uses Δ = 16, ε = 0.2 at the training context. Only layers whose
positions are learned count (RoPE layers of a RePo model are left out).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from repo_lens.model.registry import learned_layers
from repo_lens.lens_inputs import trace_many
from repo_lens.studies.reproductions.common import held_out_documents, save_study, stem

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.protocol import LensProtocol

PAPER_FIG3 = {"constant": 0.22, "mono": 0.04, "hybrid": 0.74}  # RePo §5.2 (hybrid = the rest)


def _texts(quick: bool) -> list[str]:
    return held_out_documents(4 if quick else 12)


def _per_model(models: list[str], quick: bool, progress: bool, measure, figure_prefix: str, batch_size: int):
    """``measure(model, lens, layer kinds, texts, progress, batch_size) -> (result, figure)`` on each model
    (loaded on the CPU); returns {model: result} and {figure name: figure}."""
    from repo_lens.loading import load

    texts = _texts(quick)
    results: dict[str, Any] = {}
    plots = {}
    for model in models:
        lens = load(model, device="cpu")
        results[model], plots[f"{figure_prefix}_{stem(model)}"] = measure(
            model, lens, list(lens.model.cfg.layer_mechanisms), texts, progress, batch_size)
    return results, plots


def _traces(lens: LensProtocol, texts: list[str], length: int, progress: bool, desc: str, batch_size: int):
    """Traces of every text that has at least ``length`` tokens, cut to exactly ``length``,
    ``batch_size`` texts per forward pass."""
    encoded = (lens.encode(text) for text in tqdm(texts, desc=desc, disable=not progress))
    cut = [ids[:length] for ids in encoded if len(ids) >= length]
    return trace_many(lens, cut, batch_size=batch_size, allow_beyond_context=True)


def range_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                progress: bool = True, batch_size: int = 1) -> dict[str, Any]:
    """Fig. 2: d = max z − min z per head, at the training context and at twice it."""
    results, plots = _per_model(models, quick, progress, _ranges, "fig2_ranges", batch_size)
    lines = ["| model | learned layers | T | mean d | max d | max d / T |", "|---|---|---|---|---|---|"]
    for model, result in results.items():
        for length, row in result["lengths"].items():
            lines.append(f"| {model} | {len(row['learned_layers'])} | {length} | {row['mean_d']:.1f} | "
                         f"{row['max_d']:.1f} | {row['max_d_over_tokens']:.2f} |")
    markdown = "\n".join(lines)
    document = {"study": "range_stats", "paper": "RePo Fig. 2: d grows with the context length (2K -> 4K) "
                "but stays far below it; the distribution over heads is non-uniform", "results": results,
                "markdown": markdown}
    return save_study(out, document, plots if figures else None)


def _ranges(model: str, lens: Lens, kinds: list[str], texts: list[str], progress: bool, batch_size: int):
    """One model's ranges at its training context and twice it, and its box plot of d per learned layer."""
    import plotly.graph_objects as go

    from repo_lens.analysis import range_stats
    from repo_lens.plots.style import OKABE_ITO, styled

    context = lens.context_length
    per_length = {}
    figure = go.Figure()
    layers = learned_layers(kinds) or list(range(len(kinds)))
    for index, length in enumerate((context, 2 * context)):
        ranges = np.stack([range_stats(t.positions) for t in
                           _traces(lens, texts, length, progress, f"{stem(model)} ranges T={length}", batch_size)])
        mean_by_head = ranges.mean(axis=0)  # (L, H)
        learned = mean_by_head[layers]
        per_length[str(length)] = {
            "tokens": length, "n_texts": int(ranges.shape[0]), "d_by_layer_head": mean_by_head,
            "learned_layers": layers, "mean_d": float(learned.mean()), "max_d": float(ranges[:, layers].max()),
            "max_d_over_tokens": float(ranges[:, layers].max() / length),
        }
        figure.add_box(x=[f"L{layer}" for layer in layers for _ in range(learned.shape[1])],
                       y=learned.reshape(-1), name=f"T = {length}", marker_color=OKABE_ITO[index], boxpoints="all")
    figure.update_layout(boxmode="group", yaxis_title="d = max z − min z (mean over texts)", xaxis_title="layer")
    result = {"layer_kinds": kinds, "context": context, "lengths": per_length}
    return result, styled(figure, f"{model}: position ranges per head")


def pattern_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                  progress: bool = True, batch_size: int = 1) -> dict[str, Any]:
    """Fig. 3: shares of constant / mono / hybrid chunks (Δ = 16, ε = 0.2) in the learned layers."""
    results, plots = _per_model(models, quick, progress, _patterns, "fig3_patterns", batch_size)
    lines = ["| model | constant | mono | hybrid |", "|---|---|---|---|",
             "| RePo OLMo-2 1B (paper, RULER) | 0.22 | 0.04 | 0.74 |"]
    for model, result in results.items():
        shares = result["learned"]
        lines.append(f"| {model} | {shares['constant']:.2f} | {shares['mono']:.2f} | {shares['hybrid']:.2f} |")
    markdown = "\n".join(lines)
    document = {"study": "pattern_fractions", "paper": PAPER_FIG3, "results": results, "markdown": markdown}
    return save_study(out, document, plots if figures else None)


def _patterns(model: str, lens: Lens, kinds: list[str], texts: list[str], progress: bool, batch_size: int):
    """One model's chunk-pattern shares (overall in the learned layers, and per layer) and their figure."""
    from repo_lens.analysis import chunk_patterns, pattern_fractions
    from repo_lens.plots import pattern_fractions_figure

    patterns = [chunk_patterns(t.positions, size=16, eps=0.2) for t in
                _traces(lens, texts, lens.context_length, progress, f"{stem(model)} patterns", batch_size)]
    all_patterns = np.concatenate(patterns, axis=-1)  # (L, H, chunks of every text)
    fractions = pattern_fractions(all_patterns)
    layers = learned_layers(kinds)
    learned = pattern_fractions(all_patterns[layers]) if layers else fractions
    result = {
        "layer_kinds": kinds, "learned_layers": layers, "n_chunks_per_head": int(all_patterns.shape[-1]),
        "learned": dict(zip(learned.labels, learned.overall.tolist())),
        "per_layer": {f"L{layer}": dict(zip(fractions.labels, fractions.per_layer[layer].tolist()))
                      for layer in range(len(kinds))},
    }
    return result, pattern_fractions_figure(fractions, kinds)
