"""Tables and figures of the ``position_interventions`` study (its results dict, one entry per model)."""

from __future__ import annotations

from typing import Any

import numpy as np

ALL_MODES = ("integer", "constant", "mean", "shuffle")


def _cell(score: dict[str, float] | None) -> str:
    return "=" if score is None else f"{score['accuracy']:.2f} ({score['logprob']:.1f})"


def _name(model: str) -> str:
    return model.replace("zoo:", "")


def summary_table(results: dict[str, Any]) -> str:
    """Accuracy (mean answer log-probability) with every edited layer's positions replaced; "=" marks an
    edit that moves no position (not run: the scores are the unchanged ones).

    >>> score = {"accuracy": 1.0, "logprob": -0.5}
    >>> print(summary_table({"zoo:m": {"ablations": {"baseline": score, "all": {"integer": score}}}}).splitlines()[2])
    | m | 1.00 (-0.5) | 1.00 (-0.5) | = | = | = |
    """
    lines = ["| model | unchanged | integer | constant | mean | shuffle |", "|---|---|---|---|---|---|"]
    for model, result in results.items():
        ablations = result["ablations"]
        row = [_cell(ablations["baseline"])] + [_cell(ablations["all"].get(mode)) for mode in ALL_MODES]
        lines.append(f"| {_name(model)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def layer_table(results: dict[str, Any]) -> str:
    """One row per model and layer: accuracy (log-probability) with that layer made integer / constant."""
    lines = ["| model | layer | integer | constant |", "|---|---|---|---|"]
    for model, result in results.items():
        for layer, modes in result["ablations"]["layer"].items():
            lines.append(f"| {_name(model)} | {layer} | {_cell(modes.get('integer'))} | {_cell(modes.get('constant'))} |")
    return "\n".join(lines)


def head_grid(result: dict[str, Any], mode: str, field: str = "accuracy") -> np.ndarray:
    """(n_layers, n_heads) of one mode's per-head scores; NaN for layers not edited.

    >>> head_grid({"layer_kinds": ["a", "b"], "ablations": {"head": {"1.0": {"constant": {"accuracy": 0.5}}}}},
    ...           "constant").tolist()
    [[nan], [0.5]]
    """
    heads = result["ablations"]["head"]
    n_heads = 1 + max(int(key.split(".")[1]) for key in heads)
    grid = np.full((len(result["layer_kinds"]), n_heads), np.nan)
    for key, modes in heads.items():
        layer, head = (int(part) for part in key.split("."))
        if modes.get(mode) is not None:
            grid[layer, head] = modes[mode][field]
        elif mode in modes:  # an edit that moves no position: the unchanged score
            grid[layer, head] = result["ablations"]["baseline"][field]
    return grid


def head_table(results: dict[str, Any]) -> str:
    """Per model, a layer × head table of accuracy with one head made integer / constant (an edit that
    moves no position shows the unchanged accuracy)."""
    blocks = []
    for model, result in results.items():
        integer, constant = head_grid(result, "integer"), head_grid(result, "constant")
        header = "| layer | " + " | ".join(f"h{head}" for head in range(integer.shape[1])) + " |"
        lines = [f"{_name(model)} (integer / constant):", "", header, "|---|" + "---|" * integer.shape[1]]
        for layer in range(integer.shape[0]):
            if np.isfinite(integer[layer]).any():
                cells = [f"{a:.2f} / {b:.2f}" for a, b in zip(integer[layer], constant[layer])]
                lines.append(f"| {layer} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def sweep_table(results: dict[str, Any]) -> str:
    """Accuracy against p, interpolating every edited layer toward the integers and toward a constant."""
    columns = [(model, toward) for model in results for toward in ("integer", "constant")]
    ps = list(next(iter(results.values()))["ablations"]["sweep"]["integer"])
    lines = ["| p | " + " | ".join(f"{_name(model)} → {toward}" for model, toward in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for p in ps:
        row = [_cell(results[model]["ablations"]["sweep"][toward].get(p)) for model, toward in columns]
        lines.append(f"| {p} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def patching_table(results: dict[str, Any]) -> str:
    """Per model, the mean change of the answer's log-probability when one head's clean positions are written."""
    blocks = []
    for model, result in results.items():
        patching = result["patching"]
        effects = np.asarray(patching["effects"], dtype=float)
        pearson = patching["attribution_pearson"]
        caption = (f"{_name(model)}: {patching['pairs']} pairs, corrupted log p {patching['baseline_logprob']:.2f}, "
                   f"clean {patching['clean_logprob']:.2f}, attribution vs exact Pearson "
                   f"{'–' if pearson is None else f'{pearson:.2f}'}:")
        lines = [caption, "",
                 "| layer | " + " | ".join(f"h{head}" for head in range(effects.shape[1])) + " |",
                 "|---|" + "---|" * effects.shape[1]]
        for layer in range(effects.shape[0]):
            if np.isfinite(effects[layer]).any():
                lines.append(f"| {layer} | " + " | ".join(f"{value:+.3f}" for value in effects[layer]) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def markdown(results: dict[str, Any]) -> str:
    """Every table of the study, with a heading each."""
    sections = [("Every edited layer at once: accuracy (answer log-probability)", summary_table(results)),
                ("One layer at a time", layer_table(results)), ("One head at a time", head_table(results)),
                ("Interpolation p (the authors' dynamic_pe_pdrop toward the integers, and toward a constant)",
                 sweep_table(results)),
                ("Patching: needle moved (depth 0.25 → 0.75), Δ log p(answer) per head", patching_table(results))]
    return "\n\n".join(f"### {title}\n\n{table}" for title, table in sections)


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """Per model: per-head accuracy with the head made constant, and the patching map; and the p-sweep."""
    import plotly.graph_objects as go

    from repo_lens.plots.heatmaps import layer_head_heatmap
    from repo_lens.plots.style import DIVERGING, series_style, styled

    out = {}
    for model, result in results.items():
        name, kinds = _name(model), result["layer_kinds"]
        out[f"head_constant_{name}"] = layer_head_heatmap(
            head_grid(result, "constant"), title=f"{name}: NIAH accuracy, one head's positions constant",
            colorbar_title="accuracy", layer_kinds=kinds, zmin=0.0, zmax=1.0)
        out[f"patching_{name}"] = layer_head_heatmap(
            np.asarray(result["patching"]["effects"], dtype=float), title=f"{name}: Δ log p(answer), needle moved",
            colorbar_title="Δ log p", layer_kinds=kinds, colorscale=DIVERGING, zmid=0.0, value_format=".3f")
    sweep = go.Figure()
    for index, (model, toward) in enumerate((m, t) for m in results for t in ("integer", "constant")):
        unchanged = results[model]["ablations"]["baseline"]  # "=": the edit moves no position
        points = {p: score or unchanged for p, score in results[model]["ablations"]["sweep"][toward].items()}
        look = series_style(index)
        sweep.add_scatter(x=[float(p) for p in points], y=[score["accuracy"] for score in points.values()],
                          name=f"{_name(model)} → {toward}", mode="lines+markers",
                          line={"color": look["color"], "dash": look["dash"]}, marker={"symbol": look["symbol"]})
    sweep.update_layout(xaxis_title="p", yaxis_title="NIAH accuracy", yaxis_range=[-0.05, 1.05])
    out["interpolation_sweep"] = styled(sweep, "Interpolating positions: z' = (1 − p)·z + p·target")
    return out
