"""RePo App. D Fig. 8 on the zoo: positions of a few-shot prompt, by segment.

A question-answering few-shot prompt goes through the byte-level RePo model. For every head of
the learned layers we measure how much of the position variance the prompt's segments explain
(η², the correlation ratio: between-segment variance / total variance, segments = instruction,
each example's question and answer, the final question and answer) and compare it with the same
statistic for 200 random segmentations of equal lengths (contiguous, shuffled order), the share
of negative positions (Fig. 8c), and which bytes are the outliers (Fig. 8: punctuation and
function words). The figure plots the heads whose positions follow the segments most.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from repo_lens.model.registry import learned_layers
from repo_lens.studies.reproductions.common import save_study, stem

EXAMPLES = (("What is the capital of France?", "Paris"), ("How many legs does a spider have?", "Eight"),
            ("Which planet is closest to the sun?", "Mercury"))
QUERY = ("What colour is the sky on a clear day?", "Blue")


def correlation_ratio(values: np.ndarray, labels: np.ndarray) -> float:
    """η² = Σ_g n_g (mean_g − mean)² / Σ (x − mean)²; NaN for a constant ``values``."""
    total = ((values - values.mean()) ** 2).sum()
    if total < 1e-12:
        return float("nan")
    between = sum((labels == g).sum() * (values[labels == g].mean() - values.mean()) ** 2 for g in np.unique(labels))
    return float(between / total)


def segment_labels(prompt, n_tokens: int) -> np.ndarray:
    labels = np.full(n_tokens, -1)
    names = sorted((span for span in prompt.spans if span.endswith(("_input", "_output")) or span in
                    ("instruction", "query_input", "answer")), key=lambda name: prompt.spans[name][0])
    for index, name in enumerate(names):
        start, end = prompt.spans[name]
        labels[start:end] = index
    return labels


def boundary_tokens(tokenizer: Any, token_ids: Any) -> np.ndarray:
    """Which tokens are spaces, newlines or punctuation: bytes of a byte-level model, or subword tokens that
    hold nothing else (a word with its leading space is a word).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> boundary_tokens(ByteTokenizer(), list(b"a, b")).tolist()
    [False, True, True, False]
    """
    from repo_lens.analysis import byte_categories, subword_categories
    from repo_lens.model.byte_tokenizer import ByteTokenizer

    if isinstance(tokenizer, ByteTokenizer):
        return np.isin(byte_categories(token_ids), ("space", "punctuation", "newline"))
    tokens = tokenizer.convert_ids_to_tokens([int(token) for token in token_ids])
    return np.isin(subword_categories(tokens), ("whitespace", "punctuation"))


def fewshot_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                  progress: bool = True) -> dict[str, Any]:
    """App. D Fig. 8: η² of the learned heads' positions by prompt segment vs random segmentations,
    negative share, outliers."""
    from repo_lens.data import FewshotLayout, fewshot_prompt
    from repo_lens.loading import load
    from repo_lens.plots import iqr_outliers

    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    plots = {}
    for model in models:
        lens = load(model, device="cpu")
        prompt = fewshot_prompt(lens.tokenizer, EXAMPLES, QUERY[0], QUERY[1],
                                instruction="Answer each question with one word.",
                                layout=FewshotLayout(input_prefix="Q: ", output_prefix="A:"))
        trace = lens.trace(prompt.ids)
        labels = segment_labels(prompt, len(trace))
        inside = labels >= 0
        kinds = trace.layer_kinds
        boundary_bytes = boundary_tokens(lens.tokenizer, trace.token_ids)
        heads: list[dict[str, Any]] = []
        for layer in learned_layers(kinds):
            for head in range(trace.n_heads):
                z = trace.positions[layer, head].astype(np.float64)
                eta = correlation_ratio(z[inside], labels[inside])
                null = [correlation_ratio(z[inside], _shuffled_segments(labels[inside], rng)) for _ in range(200)]
                outliers = iqr_outliers(z)
                heads.append({"layer": layer, "head": head, "eta_squared": eta,
                              "null_95th": float(np.nanpercentile(null, 95)),
                              "negative_share": float((z < 0).mean()),
                              "outliers": int(outliers.sum()),
                              "outliers_boundary_share": float(boundary_bytes[outliers].mean()) if outliers.any() else None})
        aligned = [h for h in heads if np.isfinite(h["eta_squared"]) and h["eta_squared"] > h["null_95th"]]
        outlier_heads = [h for h in heads if h["outliers"]]
        results[model] = {
            "layer_kinds": kinds, "prompt": prompt.text, "heads": heads,
            "heads_aligned_with_segments": len(aligned), "learned_heads": len(heads),
            "negative_share": float(np.mean([h["negative_share"] for h in heads])) if heads else None,
            "outliers_boundary_share": (float(np.mean([h["outliers_boundary_share"] for h in outlier_heads]))
                                        if outlier_heads else None),
            "boundary_share_of_bytes": float(boundary_bytes.mean()),
        }
        best = sorted(aligned, key=lambda h: -h["eta_squared"])[:4] or heads[:4]
        if figures and best:
            plots[f"fig8_case_study_{stem(model)}"] = _figure(trace, labels, best, model)
    lines = ["| model | heads whose positions follow the segments (η² > 95th pct of random) | mean negative share | "
             "outliers that are space/punctuation (all bytes) |", "|---|---|---|---|"]
    for model, r in results.items():
        if not r["learned_heads"]:
            lines.append(f"| {model} | no learned positions (layers: {', '.join(sorted(set(r['layer_kinds'])))}) | — | — |")
            continue
        outlier = "—" if r["outliers_boundary_share"] is None else f"{r['outliers_boundary_share']:.2f}"
        lines.append(f"| {model} | {r['heads_aligned_with_segments']} / {r['learned_heads']} | "
                     f"{r['negative_share']:.2f} | {outlier} ({r['boundary_share_of_bytes']:.2f}) |")
    markdown = "\n".join(lines)
    document = {"study": "case_study", "results": results, "markdown": markdown}
    return save_study(out, document, plots if figures else None)


def _shuffled_segments(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The same segment lengths in a random order (contiguous), labelled 0..n-1."""
    groups = [labels[labels == g] for g in np.unique(labels)]
    order = rng.permutation(len(groups))
    return np.concatenate([np.full(len(groups[g]), index) for index, g in enumerate(order)])


def _figure(trace, labels: np.ndarray, heads: list[dict], model: str):
    from plotly.subplots import make_subplots

    from repo_lens.plots.style import OKABE_ITO, styled

    figure = make_subplots(rows=len(heads), cols=1, shared_xaxes=True,
                           subplot_titles=[f"L{h['layer']} h{h['head']} (η² = {h['eta_squared']:.2f})" for h in heads])
    colours = np.array([OKABE_ITO[label % len(OKABE_ITO)] if label >= 0 else "#999999" for label in labels])
    for row, head in enumerate(heads, start=1):
        z = trace.positions[head["layer"], head["head"]]
        figure.add_scatter(x=list(range(len(z))), y=z.tolist(), mode="markers", marker=dict(color=colours, size=4),
                           text=trace.tokens, showlegend=False, row=row, col=1)
    figure.update_xaxes(title_text="token index", row=len(heads), col=1)
    return styled(figure, f"{model}: positions of a few-shot prompt, coloured by segment", height=220 * len(heads))
