"""Tables and figures of the ``position_interventions`` study (its results dict, one entry per model).

Rates are printed as ``value [low, high]`` (95 % Wilson intervals), mean log-probabilities and bits per
byte with 95 % bootstrap intervals; "=" marks an edit that moves no position (not run: the unedited
scores hold).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repo_lens.interventions.stats import interval_text


def mode_label(mode: Any) -> str:
    """A mode's short name, e.g. ``interpolate 0.05 to constant``.

    >>> from repo_lens.interventions import Interpolate
    >>> mode_label(Interpolate(p=0.05, toward="constant")), mode_label("affine")
    ('interpolate 0.05 to constant', 'affine')
    """
    from repo_lens.interventions import parse_mode

    return parse_mode(mode).label


def _name(model: str) -> str:
    return model.replace("zoo:", "").rstrip("/").rsplit("/", 1)[-1]


def _acc(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "–"
    if not entry.get("moves", True):
        return "="
    return f"{interval_text(entry['accuracy'])} ({entry['logprob']['value']:.1f})"


def _retrieval(results: dict[str, Any]) -> dict[str, Any]:
    return {model: result for model, result in results.items() if result["protocol"] == "retrieval"}


def _scored(results: dict[str, Any]) -> dict[str, Any]:
    """The models scored by exact match: retrieval prompts or a task's own sequences."""
    return {model: result for model, result in results.items() if result["protocol"] in ("retrieval", "task")}


def _row(result: dict[str, Any], group: str, where: str, modes: list[str]) -> list[str]:
    conditions = result["ablations"]["conditions"]
    return [_acc(conditions.get(f"{where} {mode}")) for mode in modes]


def _modes(result: dict[str, Any], group: str) -> list[str]:
    return list(dict.fromkeys(entry["mode"] for entry in result["ablations"]["conditions"].values()
                              if entry["group"] == group))


def all_layers_table(results: dict[str, Any]) -> str:
    """Accuracy [95 % interval] (mean log p of the answer, or of a task's scored tokens) with every learned
    layer edited, per model."""
    retrieval = _scored(results)
    if not retrieval:
        return ""
    modes = list(dict.fromkeys(mode for result in retrieval.values() for mode in _modes(result, "all")))
    lines = ["| model | n | unedited | " + " | ".join(modes) + " |", "|---|---|---|" + "---|" * len(modes)]
    for model, result in retrieval.items():
        unedited = result["ablations"]["unedited"]
        lines.append(f"| {_name(model)} | {result['prompts']} | {_acc(unedited)} | "
                     + " | ".join(_row(result, "all", "all", modes)) + " |")
    return "\n".join(lines)


def family_table(results: dict[str, Any], modes: tuple[str, ...] = ("integer", "constant", "affine", "rank",
                                                                     "random", "window 8")) -> str:
    """Accuracy per prompt family, unedited and with every learned layer edited."""
    lines = ["| model | family | n | unedited | " + " | ".join(modes) + " |", "|---|---|---|---|" + "---|" * len(modes)]
    for model, result in _scored(results).items():
        ablations = result["ablations"]
        for family, score in ablations["unedited"]["by_family"].items():
            cells = []
            for mode in modes:
                entry = ablations["conditions"].get(f"all {mode}")
                cells.append("–" if entry is None else "=" if not entry["moves"] else
                             interval_text(entry["by_family"][family]["accuracy"]))
            lines.append(f"| {_name(model)} | {family} | {score['accuracy']['n']} | "
                         f"{interval_text(score['accuracy'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unit_table(results: dict[str, Any], group: str) -> str:
    """One row per layer ("layer") or head ("head"): accuracy [interval] (log p) under each mode, and
    the accuracy per family (family order as in the prompts) under each mode."""
    blocks = []
    for model, result in _scored(results).items():
        modes = _modes(result, group)
        units = list(dict.fromkeys(
            (entry["layer"], entry["head"]) for entry in result["ablations"]["conditions"].values()
            if entry["group"] == group))
        lines = [f"{_name(model)}:", "", f"| {group} | " + " | ".join(modes) + " | per family: " + " / ".join(modes)
                 + " |", "|---|" + "---|" * (len(modes) + 1)]
        for layer, head in units:
            where = f"layer {layer}" if group == "layer" else f"head {layer}.{head}"
            label = f"L{layer}" if group == "layer" else f"L{layer} h{head}"
            families = []
            for mode in modes:
                entry = result["ablations"]["conditions"].get(f"{where} {mode}")
                families.append("=" if entry is None or not entry["moves"] else "/".join(
                    f"{score['accuracy']['value']:.2f}" for score in entry["by_family"].values()))
            lines.append(f"| {label} | " + " | ".join(_row(result, group, where, modes)) + " | "
                         + " ; ".join(families) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def sweep_table(results: dict[str, Any]) -> str:
    """Accuracy against p, interpolating every learned layer toward the integers and toward a constant."""
    lines = ["| model | " + " | ".join(["p → integer", "p → constant"]) + " |", "|---|---|---|"]
    for model, result in _scored(results).items():
        cells = []
        for toward in ("", " to constant"):
            points = [(key.split()[2], entry) for key, entry in result["ablations"]["conditions"].items()
                      if entry["group"] == "sweep" and key.endswith(toward) and (toward or "to" not in key)]
            cells.append("; ".join(f"{p}: {_acc(entry)}" for p, entry in points))
        lines.append(f"| {_name(model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison_table(results: dict[str, Any], limit: int = 12) -> str:
    """The head pairs whose exact match differs most under an edit (McNemar p)."""
    lines = ["| model | layer, mode, heads | difference [95 %] | p |", "|---|---|---|---|"]
    for model, result in _scored(results).items():
        ranked = sorted(result["ablations"]["head_comparisons"].items(),
                        key=lambda item: -abs(item[1]["difference"]["value"]))
        for key, test in ranked[:limit]:
            lines.append(f"| {_name(model)} | {key} | {interval_text(test['difference'])} | {test['p']:.3g} |")
    return "\n".join(lines)


def patching_table(results: dict[str, Any]) -> str:
    """Per model and token set, Δ log p(answer) of the moved-needle run per head: mean [95 % interval], and
    the mean in each prompt family."""
    blocks = []
    for model, result in _retrieval(results).items():
        patching = result["patching"]
        pearson = patching["attribution_pearson"]
        head = (f"{_name(model)}: {patching['pairs']} pairs; moved-needle log p {interval_text(patching['moved_logprob'])}, "
                f"clean {interval_text(patching['clean_logprob'])}; attribution vs exact (every token) Pearson "
                f"{'–' if pearson is None else f'{pearson:.2f}'}")
        maps = patching["maps"]
        by_family = patching.get("by_family") or {}
        first = np.asarray(next(iter(maps.values()))["value"], dtype=float)
        family_column = (f" per family ({' / '.join(by_family)}): " + " ; ".join(maps) + " |") if by_family else ""
        lines = [head, "", "| cell | " + " | ".join(maps) + " |" + family_column,
                 "|---|" + "---|" * (len(maps) + bool(by_family))]
        for layer, head_index in zip(*np.nonzero(np.isfinite(first))):
            cells = [interval_text({key: np.asarray(m[key], dtype=float)[layer, head_index]
                                    for key in ("value", "low", "high")}) for m in maps.values()]
            if by_family:
                cells.append(" ; ".join("/".join(f"{float(np.asarray(family[label]['value'], dtype=float)[layer, head_index]):+.2f}"
                                                 for family in by_family.values()) for label in maps))
            lines.append(f"| L{layer} h{head_index} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def language_model_table(results: dict[str, Any]) -> str:
    """Held-out bits per byte, unedited, and the change [95 %] under each edit of all / each learned layer."""
    lms = {model: result for model, result in results.items() if result["protocol"] == "language model"}
    if not lms:
        return ""
    modes = list(dict.fromkeys(entry["mode"] for result in lms.values() for entry in result["conditions"].values()))
    lines = ["| model | layers | unedited bits/byte | " + " | ".join(f"Δ {mode}" for mode in modes) + " |",
             "|---|---|---|" + "---|" * len(modes)]
    for model, result in lms.items():
        groups = ["all"] + sorted({entry["layer"] for entry in result["conditions"].values() if entry["layer"] is not None})
        for group in groups:
            where = "all" if group == "all" else f"layer {group}"
            cells = [interval_text(result["conditions"][f"{where} {mode}"]["change"])
                     if f"{where} {mode}" in result["conditions"] else "–" for mode in modes]
            lines.append(f"| {_name(model)} | {where} | {interval_text(result['unedited'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


CARRIER_MODES = ("integer", "constant", "affine", "random")
CARRIER_DROP = 0.1  # exact match: a unit carries the effect when its edit lowers accuracy by this much (p < 0.01)
CARRIER_BITS = 0.05  # bits per byte: ... or raises bits per byte by this much (interval above 0)


def carriers(result: dict[str, Any], group: str, mode: str, limit: int = 3) -> str:
    """The layers or heads (``group``) whose own ``mode`` edit changes the score beyond chance and by at
    least ``CARRIER_DROP`` accuracy (exact McNemar p < 0.01) or ``CARRIER_BITS`` bits per byte (bootstrap
    interval above 0), largest first, with the change; "none" when no unit does, "–" when none was edited.

    >>> entry = {"group": "layer", "layer": 2, "head": None, "mode": "affine", "moves": True,
    ...          "vs_unedited": {"accuracy": {"difference": {"value": -0.9}, "p": 1e-9}}}
    >>> carriers({"protocol": "task", "ablations": {"conditions": {"layer 2 affine": entry}}}, "layer", "affine")
    'L2 −0.90'
    """
    if result["protocol"] == "language model":
        entries = [entry for entry in result["conditions"].values() if entry["group"] == group and entry["mode"] == mode]
        found = [(entry, entry["change"]["value"]) for entry in entries
                 if entry["change"]["low"] > 0 and entry["change"]["value"] >= CARRIER_BITS]
        unit = "{:+.2f} bits"
    else:
        entries = [entry for entry in result["ablations"]["conditions"].values()
                   if entry["group"] == group and entry["mode"] == mode and entry.get("moves")]
        found = [(entry, entry["vs_unedited"]["accuracy"]["difference"]["value"]) for entry in entries
                 if entry["vs_unedited"]["accuracy"]["p"] < 0.01
                 and entry["vs_unedited"]["accuracy"]["difference"]["value"] <= -CARRIER_DROP]
        unit = "{:.2f}"
    if not entries:
        return "–"
    if not found:
        return "none"
    found.sort(key=lambda item: -abs(item[1]))
    names = [(f"L{entry['layer']}" if group == "layer" else f"L{entry['layer']} h{entry['head']}")
             + " " + unit.format(change).replace("-", "−") for entry, change in found[:limit]]
    return ", ".join(names) + (f" (+{len(found) - limit} more)" if len(found) > limit else "")


def mechanism_table(results: dict[str, Any]) -> str:
    """Every model in one table: its learned mechanism ("none" for RoPE and NoPE models), score and
    unedited score, and under each edit the layers and heads that carry the effect (see :func:`carriers`)."""
    from repo_lens.model.registry import learned_layers

    header = "| model | learned | score | unedited | " + " | ".join(
        f"{mode}: layers; heads" for mode in CARRIER_MODES) + " |"
    lines = [header, "|---|---|---|---|" + "---|" * len(CARRIER_MODES)]
    for model, result in results.items():
        kinds = [result["layer_kinds"][layer] for layer in learned_layers(result["layer_kinds"])] or ["none"]
        if result["protocol"] == "language model":
            score, unedited = "bits/byte", f"{result['unedited']['value']:.2f}"
        else:
            score = "exact match" if result["protocol"] == "retrieval" else f"{result['task']} exact match"
            unedited = f"{result['ablations']['unedited']['accuracy']['value']:.2f}"
        cells = [f"{carriers(result, 'layer', mode)}; {carriers(result, 'head', mode)}" for mode in CARRIER_MODES]
        lines.append(f"| {_name(model)} | {'/'.join(dict.fromkeys(kinds))} | {score} | {unedited} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """Every table of the study, with a heading each."""
    sections = [("Where the effect lives, per model: the layers; heads whose own edit changes the score (exact match "
                 f"−{CARRIER_DROP} or more, McNemar p < 0.01; bits per byte +{CARRIER_BITS} or more, interval above 0)",
                 mechanism_table(results)),
                ("Every learned layer edited: accuracy [95 % Wilson] (mean log p of the answer or the task's scored "
                 "tokens)", all_layers_table(results)),
                ("By prompt family or task test set (every learned layer edited)", family_table(results)),
                ("One layer at a time", unit_table(results, "layer")),
                ("One head at a time", unit_table(results, "head")),
                ("Head against head (exact McNemar on the same prompts)", comparison_table(results)),
                ("Interpolation p (the authors' dynamic_pe_pdrop toward the integers, and toward a constant)",
                 sweep_table(results)),
                ("Patching: needle moved, Δ log p(answer) per head, by the tokens patched", patching_table(results)),
                ("Language models: held-out bits per byte and its change [95 % bootstrap]", language_model_table(results))]
    return "\n\n".join(f"### {title}\n\n{table}" for title, table in sections if table)


def head_grid(result: dict[str, Any], mode: str) -> np.ndarray:
    """(n_layers, n_heads) accuracy with one head edited by ``mode``; NaN where not edited, the unedited
    accuracy where the edit moves no position.

    >>> entry = {"group": "head", "layer": 1, "head": 0, "mode": "constant", "moves": True,
    ...          "accuracy": {"value": 0.5}}
    >>> result = {"layer_kinds": ["a", "b"], "ablations": {"unedited": {"accuracy": {"value": 1.0}},
    ...           "conditions": {"head 1.0 constant": entry}}}
    >>> head_grid(result, "constant").tolist()
    [[nan], [0.5]]
    """
    entries = [entry for entry in result["ablations"]["conditions"].values() if entry["group"] == "head"]
    grid = np.full((len(result["layer_kinds"]), 1 + max(entry["head"] for entry in entries)), np.nan)
    for entry in entries:
        if entry["mode"] == mode:
            source = entry if entry["moves"] else result["ablations"]["unedited"]
            grid[entry["layer"], entry["head"]] = source["accuracy"]["value"]
    return grid


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """Per retrieval or task model: per-head accuracy under "constant" and "affine", and under every head
    edit with its interval; per retrieval model, the patching map and its per-head intervals."""
    from repo_lens.plots.heatmaps import HeatmapColors, layer_head_heatmap
    from repo_lens.plots.intervals import interval_figure
    from repo_lens.plots.style import DIVERGING

    out = {}
    for model, result in _scored(results).items():
        name, kinds = _name(model), result["layer_kinds"]
        for mode in ("constant", "affine"):
            out[f"head_{mode}_{name}"] = layer_head_heatmap(
                head_grid(result, mode), title=f"{name}: accuracy, one head's positions {mode}",
                colorbar_title="accuracy", layer_kinds=kinds, colors=HeatmapColors(zmin=0.0, zmax=1.0))
        heads = head_intervals(result)
        if heads is not None:
            out[f"head_intervals_{name}"] = interval_figure(
                heads[1], heads[0], "accuracy [95 % Wilson]", f"{name}: accuracy, one head's positions edited",
                reference=result["ablations"]["unedited"]["accuracy"]["value"], reference_label="unedited")
        if not result.get("patching"):
            continue
        out[f"patching_{name}"] = layer_head_heatmap(
            np.asarray(result["patching"]["maps"]["every token"]["value"], dtype=float),
            title=f"{name}: Δ log p(answer), needle moved", colorbar_title="Δ log p", layer_kinds=kinds,
            colors=HeatmapColors(colorscale=DIVERGING, zmid=0.0), value_format=".2f")
        units, estimates = patching_intervals(result["patching"])
        out[f"patching_intervals_{name}"] = interval_figure(
            estimates, units, "Δ log p(answer) [95 % bootstrap]", f"{name}: one head's clean positions patched in",
            reference=0.0)
    return out


def head_intervals(result: dict[str, Any]) -> tuple[list[str], dict[str, list[dict[str, float]]]] | None:
    """The heads whose edits move a position (rows, "L2 h3") and, per head mode, each head's accuracy
    estimate (an edit that moves nothing: the unedited one); None when no head was edited.

    >>> entry = {"group": "head", "layer": 1, "head": 0, "mode": "constant", "moves": True,
    ...          "accuracy": {"value": 0.5, "low": 0.2, "high": 0.8, "n": 8}}
    >>> head_intervals({"ablations": {"unedited": {}, "conditions": {"head 1.0 constant": entry}}})
    (['L1 h0'], {'constant': [{'value': 0.5, 'low': 0.2, 'high': 0.8, 'n': 8}]})
    """
    entries = [entry for entry in result["ablations"]["conditions"].values() if entry["group"] == "head"]
    heads = list(dict.fromkeys((entry["layer"], entry["head"]) for entry in entries if entry["moves"]))
    if not heads:
        return None
    modes = list(dict.fromkeys(entry["mode"] for entry in entries if entry["moves"]))
    found = {(entry["layer"], entry["head"], entry["mode"]): entry for entry in entries}
    unedited = result["ablations"]["unedited"].get("accuracy")
    estimates = {mode: [(found[(layer, head, mode)]["accuracy"] if found.get((layer, head, mode), {}).get("moves")
                         else unedited) for layer, head in heads] for mode in modes}
    return [f"L{layer} h{head}" for layer, head in heads], estimates


def patching_intervals(patching: dict[str, Any]) -> tuple[list[str], dict[str, list[dict[str, float]]]]:
    """The patched heads (rows) and, per set of patched tokens, each head's mean effect and interval."""
    maps = patching["maps"]
    first = np.asarray(next(iter(maps.values()))["value"], dtype=float)
    cells = list(zip(*np.nonzero(np.isfinite(first))))
    estimates = {label: [{key: float(np.asarray(grid[key], dtype=float)[layer, head]) for key in ("value", "low", "high")}
                         for layer, head in cells] for label, grid in maps.items()}
    return [f"L{layer} h{head}" for layer, head in cells], estimates
