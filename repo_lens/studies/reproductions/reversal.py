"""RePo App. C Fig. 6 on the zoo: the mirror effect in the text-reversal models.

Each prompt is "<bos> Reverse the following words : x1 … xL <sep> xL … x1"; the output copy of
input item i sits at output index L − 1 − i. The *mirror ratio* of a head is the mean |z| gap
between an input item and its own copy, divided by the mean gap between an input item and every
output item: below 1, copies sit closer to their source than to the other items (1 = no
mirroring; for RoPE the ratio is fixed by the index alone). Reported per layer as the mean and the
minimum over heads, over prompts of the lengths the paper plots.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from repo_lens.lens_inputs import trace_many
from repo_lens.studies.reproductions.common import save_study, stem



def mirror_ratios(positions: np.ndarray, input_start: int, output_start: int, length: int) -> np.ndarray:
    """(L, H) mirror ratio for one prompt; NaN where a head assigns all items the same position."""
    inputs = positions[:, :, input_start:input_start + length]  # (L, H, n)
    outputs = positions[:, :, output_start:output_start + length]
    copies = outputs[:, :, ::-1]  # copies[..., i] is the output copy of input item i
    own = np.abs(inputs - copies).mean(axis=-1)
    every = np.abs(inputs[..., :, None] - outputs[..., None, :]).mean(axis=(-1, -2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(every > 1e-3, own / every, np.nan)  # below 1e-3 the head is constant (NoPE-like)


def reversal_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                   progress: bool = True, batch_size: int = 1) -> dict[str, Any]:
    """App. C Fig. 6: mirror ratios per layer, ``batch_size`` prompts per forward pass."""
    from repo_lens.loading import load
    from repo_lens.train.tasks import REVERSAL_PROMPT, ReversalTask

    task = ReversalTask(batch_size=1)
    lengths = (10, 20) if quick else (5, 10, 15, 20)
    per_length = 5 if quick else 20
    results: dict[str, Any] = {}
    plots = {}
    for model in models:
        lens = load(model, device="cpu")
        examples = []
        for length in lengths:
            rng = random.Random(f"mirror-{length}")
            examples += [(length, task.example(rng, length)) for _ in range(per_length)]
        traces = trace_many(lens, [example.ids[:-1] for _, example in examples],  # without <eos>
                            batch_size=batch_size, progress=progress)
        ratios = [mirror_ratios(trace.positions, 1 + len(REVERSAL_PROMPT), example.answer_start, length)
                  for (length, example), trace in zip(examples, traces)]
        stacked = np.stack(ratios)  # (prompts, L, H)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a head constant in every prompt stays NaN
            by_head = np.nanmean(stacked, axis=0)
        results[model] = {
            "layer_kinds": list(lens.model.cfg.layer_mechanisms),
            "mirror_ratio_by_layer_head": by_head,
            "mean_by_layer": [None if np.isnan(row).all() else float(np.nanmean(row)) for row in by_head],
            "min_by_layer": [None if np.isnan(row).all() else float(np.nanmin(row)) for row in by_head],
            "constant_heads": int(np.isnan(by_head).sum()),
        }
        example = task.example(random.Random("figure"), 10)
        plots[f"fig6_reversal_{stem(model)}"] = _figure(lens.trace(example.ids[:-1]), example.answer_start, model)
    lines = ["| model | " + " | ".join(f"L{i} mean (min)" for i in range(len(next(iter(results.values()))["mean_by_layer"])))
             + " |", "|---|" + "---|" * len(next(iter(results.values()))["mean_by_layer"])]
    for model, result in results.items():
        cells = [("constant" if mean is None else f"{mean:.2f} ({low:.2f})")
                 for mean, low in zip(result["mean_by_layer"], result["min_by_layer"])]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    markdown = "Mirror ratio (1 = no mirror effect; the paper sees mirroring in layers 0, 2, 3):\n\n" + "\n".join(lines)
    document = {"study": "reversal_mirror", "settings": {"lengths": lengths, "prompts_per_length": per_length},
                "results": results, "markdown": markdown}
    return save_study(out, document, plots if figures else None)


def _figure(trace, answer_start: int, model: str):
    from plotly.subplots import make_subplots

    from repo_lens.plots.style import OKABE_ITO, styled

    n_layers, n_heads, n_tokens = trace.positions.shape
    figure = make_subplots(rows=1, cols=n_layers, subplot_titles=[f"L{layer} {trace.layer_kinds[layer]}"
                                                                   for layer in range(n_layers)])
    for layer in range(n_layers):
        for head in range(n_heads):
            figure.add_scatter(x=list(range(n_tokens)), y=trace.positions[layer, head].tolist(), mode="lines+markers",
                               line_color=OKABE_ITO[head % len(OKABE_ITO)], name=f"h{head}", showlegend=layer == 0,
                               text=trace.tokens, row=1, col=layer + 1)
        figure.add_vrect(x0=0, x1=answer_start - 0.5, fillcolor="#56B4E9", opacity=0.12, line_width=0,
                         row=1, col=layer + 1)
        figure.add_vrect(x0=answer_start - 0.5, x1=n_tokens - 1, fillcolor="#E69F00", opacity=0.12, line_width=0,
                         row=1, col=layer + 1)
    figure.update_xaxes(title_text="input order")
    figure.update_yaxes(title_text="position z", col=1)
    return styled(figure, f"{model}: positions in a reversal prompt (blue: input, orange: output)")
