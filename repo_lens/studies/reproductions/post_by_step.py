"""The byte-model findings of "Learned position increments" (Brendan Long) along a training run: the post's
analyses (:mod:`~repo_lens.studies.reproductions.post_analyses`) on each loadable step of a run — its
``snapshots/step_N`` folders (``repo-lens train --snapshot-every N``) and its finished model — each reduced to
one row of findings, beside the post and its author's rerun:

- **held-out bits/byte** at that step (the run's own evaluation, when it recorded one there);
- **layer-0 boundary saturation** (per-layer δ): layer 0's mean δ over the boundary bytes (capitals,
  punctuation, EOS, space, newline) as a document's first byte, as a share of ``max_delta``, and the same
  for lower-case letters (the post: 0.985 and 0.164 of its ``max_delta`` = 10);
- **δ by byte category**: Spearman ρ of the categories' mean δ with the post's table (its shared model's,
  or its per-layer model's layer 0);
- **Chinese word-boundary AUC by layer** (jieba, gaps between two CJK characters);
- **the entity test** ("New York" vs "York New"): per layer, the two-sided Wilcoxon p and whether the real
  order gets the smaller δ;
- **the spacing plot** of the post's two sentences at the last step (a figure).

A finding *appears* at the first step from which it holds at every later step (criteria in
:data:`CRITERIA`). Writes ``results.json``, ``findings_by_step.md`` and figures.

Example (a run trained with ``--snapshot-every``; any folder list works)::

    from repo_lens.studies.reproductions.post_by_step import post_findings_by_step
    post_findings_by_step(Path("build/by_step"), ["runs/bytes-post-lpi-resid"], quick=True)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from repo_lens.errors import InputError
from repo_lens.studies.reproductions.common import save_study, stem
from repo_lens.studies.reproductions.increment_findings import POST_AUC, POST_ENTITY
from repo_lens.studies.reproductions.post_analyses import (POST_BYTE_MEANS, analyse, figures_of,
                                                           post_markdown)

# The author's second run of the per-layer model (the post's repository, experiments/selective_pe): the AUCs
# move between runs, so a finding is judged against both.
POST_RERUN_AUC = [0.516, 0.528, 0.634, 0.414, 0.722, 0.411]
BOUNDARY_BYTES = ("Capital letters (A-Z)", "Sentence punct (. ! ?)", "Other punct (, ; : -)", "EOS", "Space",
                  "Newline")
LETTERS = "English within-word (a-z)"
STEP_FOLDER = re.compile(r"step_(\d+)")
CRITERIA = {
    "saturation": "layer 0: boundary bytes ≥ 0.9 of max_delta and letters ≤ 0.3 of it (the post: 0.985, 0.164)",
    "categories": "Spearman ρ ≥ 0.8 between our category means and the post's table",
    "boundaries": "the layers where the post and its rerun both lie ≥ 0.05 from 0.5 on the same side "
                  "(L2 above, L3 below, L4 above) do so here too",
    "entities": "the real order gets the smaller δ with p < 0.01 in at least 3 of layers 1-5 (the post: 4)",
}


def run_steps(run: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of every loadable model of a training run, by step: its ``snapshots/step_N`` folders
    and, once it finished, the run folder itself (at its card's step count). A checkpoint folder that is not
    a run gives one entry, at the step its card records (0 if none).

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> for step in (500, 250):
    ...     folder = run / "snapshots" / f"step_{step}"; folder.mkdir(parents=True)
    ...     _ = (folder / "config.json").write_text("{}")
    >>> [(step, path.name) for step, path in run_steps(run)]
    [(250, 'step_250'), (500, 'step_500')]
    """
    from repo_lens.zoo import parse_zoo_name, resolve_zoo_name

    name = parse_zoo_name(run)
    folder = resolve_zoo_name(name) if name is not None else Path(run)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder; pass a training run's output folder (with snapshots/) "
                         "or a checkpoint folder")
    steps = [(int(match.group(1)), path) for path in (folder / "snapshots").glob("step_*")
             if (match := STEP_FOLDER.fullmatch(path.name)) and (path / "config.json").exists()]
    if (folder / "config.json").exists():
        card = _card(folder)
        steps.append((int(card.get("steps", card.get("step", 0))), folder))
    if not steps:
        raise InputError(f"{folder} holds no snapshots/step_N folders and no config.json: train it with "
                         "`repo-lens train ... --snapshot-every N`, or pass a checkpoint folder")
    return sorted(steps)


def _card(folder: Path) -> dict[str, Any]:
    try:
        info = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("info", {})
    except (OSError, ValueError, AttributeError) as error:
        raise InputError(f"{folder}/config.json cannot be read as a checkpoint config ({error})") from None
    return info if isinstance(info, dict) else {}


def recorded_bpb(run: Path, folders: list[tuple[int, Path]]) -> dict[int, float]:
    """Held-out bits/byte recorded by step: the run's training-state history (measured on the training
    weights), then each checkpoint card's metrics at the card's step (measured on its shipped weights)."""
    recorded: dict[int, float] = {}
    progress = run / "train_state" / "progress.json"
    if progress.exists():
        history = json.loads(progress.read_text(encoding="utf-8")).get("history", [])
        recorded.update({int(entry["step"]): float(entry["val_bpb"]) for entry in history if "val_bpb" in entry})
    for step, folder in folders:
        metrics = _card(folder).get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("val_bpb"), (int, float)):
            recorded[step] = float(metrics["val_bpb"])
    return recorded


def _spearman(ours: list[float], theirs: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(ours, theirs).statistic)


def findings_row(result: dict[str, Any], max_delta: float | None) -> dict[str, Any]:
    """One step's findings from :func:`post_analyses.analyse`'s result (``max_delta``: the per-layer δ's bound,
    None for an unbounded shared δ)."""
    table = result["byte_table"]["vocabulary"][0]
    post = POST_BYTE_MEANS["shared" if result["shared_delta"] else "per-layer L0"]
    common = [name for name in post if table.get(name, {}).get("count")]
    row: dict[str, Any] = {"category_rho": _spearman([table[n]["mean"] for n in common], [post[n] for n in common]),
                           "category_means": {n: table[n]["mean"] for n in common}}
    if max_delta is not None and not result["shared_delta"]:
        boundary = [table[name]["mean"] for name in BOUNDARY_BYTES if table.get(name, {}).get("count")]
        row["saturation"] = float(np.mean(boundary)) / max_delta
        row["letters"] = table[LETTERS]["mean"] / max_delta
    entities = result["entities"]
    row["auc"] = result["boundaries"]["auc"]
    row["entity_p"] = entities["p_value"]
    pairs = list(zip(entities["mean_real"], entities["mean_reversed"]))
    row["entity_real_smaller"] = [real < reversed_ for real, reversed_ in pairs]
    row["entity_real_larger"] = [real > reversed_ for real, reversed_ in pairs]
    row["holds"] = finding_holds(row, result["rows"])
    return row


def finding_holds(row: dict[str, Any], rows: list[int]) -> dict[str, bool | None]:
    """Which of :data:`CRITERIA` hold in one step's ``row`` (None where a finding does not apply)."""
    holds: dict[str, bool | None] = {"categories": row["category_rho"] >= 0.8}
    holds["saturation"] = (row["saturation"] >= 0.9 and row["letters"] <= 0.3) if "saturation" in row else None
    by_layer = dict(zip(rows, range(len(rows))))
    if len(rows) > 1 and all(layer in by_layer for layer in (2, 3, 4)):
        signs = {2: 1, 3: -1, 4: 1}
        holds["boundaries"] = all(signs[layer] * (row["auc"][by_layer[layer]] - 0.5) >= 0.05 for layer in signs)
        strong = [row["entity_p"][by_layer[layer]] < 0.01 and row["entity_real_smaller"][by_layer[layer]]
                  for layer in (1, 2, 3, 4, 5) if layer in by_layer]
        holds["entities"] = sum(strong) >= 3
    else:  # a shared δ is the same in every layer: the post's per-layer findings do not apply
        holds["boundaries"] = holds["entities"] = None
    return holds


def first_lasting_step(steps: list[int], holds: list[bool | None]) -> int | None:
    """The first step from which a finding holds at every later step (None if it does not hold at the last).

    >>> first_lasting_step([250, 500, 750, 1000], [True, False, True, True])
    750
    """
    found = None
    for step, held in zip(steps, holds):
        if held and found is None:
            found = step
        elif not held:
            found = None
    return found


def _max_delta(folder: Path) -> float | None:
    model = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model", {})
    value = model.get("lpi_max_delta")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_findings(run: str | Path, held_out: dict[str, list[str]], documents: int, max_gaps: int,
                 steps: list[int] | None = None) -> dict[str, Any]:
    """Every step's analyses and findings of one run (``steps``: only these, default all)."""
    found = run_steps(run)
    if steps is not None:
        missing = sorted(set(steps) - {step for step, _ in found})
        if missing:
            raise InputError(f"{run} has no model at steps {missing}; it has {[step for step, _ in found]}")
        found = [(step, folder) for step, folder in found if step in steps]
    bpb = recorded_bpb(Path(run), found)
    by_step: dict[str, dict[str, Any]] = {}
    for step, folder in found:
        result = analyse(str(folder), held_out, documents, max_gaps)
        by_step[str(step)] = {"folder": str(folder), "val_bpb": bpb.get(step), "result": result,
                              "findings": findings_row(result, _max_delta(folder))}
    ordered = [int(step) for step in by_step]
    appears = {name: first_lasting_step(ordered, [by_step[str(s)]["findings"]["holds"][name] for s in ordered])
               for name in CRITERIA}
    return {"steps": by_step, "appears": appears}


def _cells(values: list[float], digits: int = 2) -> str:
    return " ".join(f"{value:.{digits}f}" for value in values)


def _step_line(step: str, entry: dict[str, Any]) -> str:
    row = entry["findings"]
    bpb = f"{entry['val_bpb']:.3f}" if entry["val_bpb"] is not None else "–"
    saturation = f"{row['saturation']:.3f} / {row['letters']:.3f}" if "saturation" in row else "–"
    entity = " ".join(f"{p:.1g}{'*' if larger else ''}" for p, larger in
                      zip(row["entity_p"], row["entity_real_larger"]))
    return (f"| {int(step):,} | {bpb} | {saturation} | {row['category_rho']:.2f} | {_cells(row['auc'])} | "
            f"{entity} |")


def by_step_markdown(runs: dict[str, dict[str, Any]]) -> str:
    lines = ["# The learned-increments post's findings along training", "",
             "Boundary / letters: layer 0's mean δ of boundary bytes and of lower-case letters, ÷ max_delta. ρ: "
             "Spearman of the byte categories' mean δ with the post's table. Entity p per layer (two-sided "
             "Wilcoxon); * marks a layer where the real order's δ is the larger.", ""]
    for run, found in runs.items():
        lines += [f"## {run}", "", "| step | bits/byte | boundary / letters | ρ | Chinese AUC by layer | entity p |",
                  "|---|---|---|---|---|---|"]
        lines += [_step_line(step, entry) for step, entry in found["steps"].items()]
        lines += [f"| the post | – | 0.985 / 0.164 | 1 | {_cells(POST_AUC)} | "
                  + " ".join(f"{p:.1g}" for p in POST_ENTITY["p_value"]) + " |",
                  f"| the post's rerun | – | – | – | {_cells(POST_RERUN_AUC, 3)} | – |", ""]
        for name, criterion in CRITERIA.items():
            step = found["appears"][name]
            lines.append(f"- {name} ({criterion}): " + (f"holds from step {step:,}" if step is not None else
                                                        "does not hold at the last step"))
        lines.append("")
    return "\n".join(lines)


def by_step_figures(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Chinese word-boundary AUC by layer at each step beside the post and its rerun, and the post's figures
    (byte table, spacing plots) at each run's last step."""
    from repo_lens.plots import layer_series_figure

    figures = {}
    for run, found in runs.items():
        series = {f"step {int(step):,}": entry["findings"]["auc"] for step, entry in found["steps"].items()}
        last = list(found["steps"].values())[-1]
        if len(last["result"]["rows"]) == len(POST_AUC):
            series.update({"the post": POST_AUC, "the post's rerun": POST_RERUN_AUC})
        figures[f"{stem(run)}_auc_by_step"] = layer_series_figure(
            series, "ROC-AUC", f"{Path(run).name}: Chinese word-boundary AUC along training", reference=0.5)
        figures.update(figures_of({Path(run).name: last["result"]}))
    return figures


def post_findings_by_step(out: Path, runs: list[str], quick: bool = False, figures: bool = True,
                          progress: bool = True, held_out: dict[str, list[str]] | None = None,
                          steps: list[int] | dict[str, list[int]] | None = None) -> dict[str, Any]:
    """The post's findings at every step of each run in ``runs`` (training output folders, or checkpoint
    folders for one row each); the analyses' settings as :func:`post_analyses.post_scripts_study`'s
    (quick: 4 documents, 2,000 gaps). ``steps``: only these steps of every run, or {run: its steps} (a run
    not named: every step)."""
    documents, max_gaps = (4, 2_000) if quick else (30, 40_000)
    if held_out is None:
        from repo_lens.data.bilingual import bilingual_splits

        splits = bilingual_splits()
        held_out = {"en": splits["en"][1], "zh": splits["zh"][1]}
    per_run = steps if isinstance(steps, dict) else {run: steps for run in runs}
    for run, chosen in per_run.items():
        if chosen is not None and (not isinstance(chosen, (list, tuple)) or not all(
                isinstance(step, int) and not isinstance(step, bool) for step in chosen)):
            raise InputError(f"steps for {run} is {chosen!r}; pass a list of whole training steps, e.g. [250, 500]")
    unknown = sorted(set(per_run) - set(runs))
    if unknown:
        raise InputError(f"steps names runs {unknown} that are not among runs {runs}; name each run as in runs")
    found = {run: run_findings(run, held_out, documents, max_gaps, per_run.get(run)) for run in runs}
    last = {Path(run).name: list(result["steps"].values())[-1]["result"] for run, result in found.items()}
    document = {"study": "increment_post_by_step", "criteria": CRITERIA,
                "settings": {"documents": documents, "max_gaps": max_gaps},
                "runs": found, "markdown": by_step_markdown(found) + "\n" + post_markdown(last),
                "post": {"auc_jieba": POST_AUC, "auc_rerun": POST_RERUN_AUC, "entities": POST_ENTITY}}
    return save_study(out, document, by_step_figures(found) if figures else None, table="findings_by_step.md")
