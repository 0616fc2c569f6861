"""In-context and beyond-context NIAH accuracy of the models trained on the retrieval mixture.

The prompts are the mixture's held-out evaluation prompts (``RetrievalMixTask.niah_prompts``: RULER's
template, answer appended, needle depths evenly spread over 0–1, seeds disjoint from training's), the
same ones the model cards' ``niah_*`` metrics use; the score is exact match of greedy decoding
(computed teacher-forced, which is the same thing). Lengths go from 512 bytes to 4× the context, so
the table shows both retrieval in distribution and length extrapolation (RePo §4.3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from repo_lens.errors import InputError
from repo_lens.studies.reproductions.common import save_study


def settings_for(context: int) -> list[tuple[str, int, str, int]]:
    """(label, length, haystack, keys) of every cell: RULER's noise haystack from 512 bytes to 4× the
    context, a held-out Brown haystack and four needles at the context.

    >>> [label for label, *_ in settings_for(1024)]
    ['512', '1024', '2048', '4096', 'essay 1024', '4 keys 1024']
    """
    lengths = sorted({512, context, 2 * context, 4 * context})
    cells = [(str(length), length, "noise", 1) for length in lengths]
    return cells + [(f"essay {context}", context, "essay", 1), (f"4 keys {context}", context, "noise", 4)]


def niah_accuracy_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                        progress: bool = True, batch_size: int = 1) -> dict[str, Any]:
    """Exact-match NIAH accuracy per model and setting, ``batch_size`` prompts per forward pass."""
    from repo_lens.loading import load
    from repo_lens.train import TrainConfig, build_task
    from repo_lens.train.mixture import niah_accuracy

    count = 8 if quick else 32
    results: dict[str, Any] = {}
    for model in models:
        lens = load(model, device="cpu")
        train_config = (lens.meta.get("info") or {}).get("train_config") or {}
        if train_config.get("task") != "mix":
            raise InputError(f"{model} was not trained on the retrieval mixture (its card's task is "
                             f"{train_config.get('task')!r}); niah_accuracy needs a bytes1k-* model or a "
                             "checkpoint of `repo-lens train --preset bytes-1k`")
        task = build_task(TrainConfig.from_dict(train_config))
        cells = {}
        for label, length, haystack, keys in tqdm(settings_for(lens.context_length), desc=f"NIAH accuracy {model}",
                                                   disable=not progress):
            source = task.languages[0] if haystack == "essay" else haystack  # held-out Brown text
            prompts = task.niah_prompts(length, count, haystack=source, num_keys=keys)
            cells[label] = {"length": length, "haystack": haystack, "keys": keys, "prompts": count,
                            "accuracy": niah_accuracy(lens.model, prompts, batch_size=batch_size),
                            "in_context": length <= lens.context_length}
        results[model] = {"context": lens.context_length, "cells": cells,
                          "layer_kinds": list(lens.model.cfg.layer_mechanisms)}
    markdown = accuracy_table(results)
    document = {"study": "niah_accuracy", "settings": {"prompts": count}, "results": results, "markdown": markdown}
    return save_study(out, document, {"niah_accuracy_by_length": _figure(results)} if figures else None)


def accuracy_table(results: dict[str, Any]) -> str:
    """Markdown table, one row per model and one column per cell label across all models; models of
    different contexts have different cells, so a cell a model lacks shows as "–", never shifted.

    >>> cell = lambda length, haystack="noise", keys=1, accuracy=1.0: {"length": length, "haystack": haystack,
    ...                                                               "keys": keys, "accuracy": accuracy}
    >>> print(accuracy_table({"a": {"cells": {"512": cell(512), "1024": cell(1024, accuracy=0.5)}},
    ...                       "b": {"cells": {"256": cell(256, accuracy=0.25), "512": cell(512, accuracy=0)}}}))
    | model | 256 | 512 | 1024 |
    |---|---|---|---|
    | a | – | 1.00 | 0.50 |
    | b | 0.25 | 0.00 | – |
    """
    cells = {label: cell for result in results.values() for label, cell in result["cells"].items()}
    # one-needle noise cells by length first, then the essay / multi-key cells in order of appearance
    plain = sorted((label for label, cell in cells.items() if cell["haystack"] == "noise" and cell["keys"] == 1),
                   key=lambda label: cells[label]["length"])
    labels = plain + [label for label in cells if label not in plain]
    lines = ["| model | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for model, result in results.items():
        row = [f"{result['cells'][label]['accuracy']:.2f}" if label in result["cells"] else "–" for label in labels]
        lines.append(f"| {model} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    from repo_lens.plots.style import styled

    figure = go.Figure()
    for model, result in results.items():
        noise = [cell for cell in result["cells"].values() if cell["haystack"] == "noise" and cell["keys"] == 1]
        figure.add_scatter(x=[cell["length"] for cell in noise], y=[cell["accuracy"] for cell in noise],
                           mode="lines+markers", name=model.replace("zoo:", ""))
    if results:
        context = max(result["context"] for result in results.values())
        figure.add_vline(x=context, line_dash="dot", annotation_text="training context")
    figure.update_layout(xaxis_type="log", xaxis_title="prompt length (bytes)", yaxis_title="exact-match accuracy",
                         yaxis_range=[-0.05, 1.05])
    return styled(figure, "NIAH accuracy in and beyond the training context")
