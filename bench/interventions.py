"""Intervention grids side by side (targets: a per-head patching grid >= 3x the serial loop of one
forward per cell; attribution >= 20x faster than exact patching by that loop on a 16 x 16 grid, its
agreement printed; attribution is also timed against the batched exact grid).

Two setups, each with a clean NIAH prompt and a corrupted one whose needle moved (same key and
value, other depth, equal length), metric = the answer's log-probability in the corrupted run:

  zoo:bytes1k-repo   the shipped 1,024-byte RePo model (4 layers x 4 heads, RePo in layers 2-3)
  olmo2-1b shape     random weights at the published RePo-OLMo2-1B shape (16 layers x 16 heads,
                     RePo from layer 5: an 11 x 16 grid of learned heads), d_model 128

For each: the per-head grid by ``interventions.patch`` (batched copies started from the corrupted
run's cached residual stream) vs the TransformerLens way (the clean run cached, then one
``run_with_hooks`` forward from layer 0 per cell, serially), their largest difference, and
``interventions.attribute`` vs exact patching (the serial loop, and the batched grid): time and the
Pearson / Spearman correlation of the two grids' effects. The metric reads only the answer's logits,
so the grid's last block runs the answer's tokens alone (``first_row``). Times are the median of
``--repeats`` interleaved rounds.

    python bench/interventions.py [--tokens 400] [--repeats 3] [--threads 1] [--batch-size 16] [--only zoo|shape]
                                  [--layers 13,14,15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from scipy import stats

import repo_lens
from repo_lens import interventions
from repo_lens.data import PromptEncoding, niah_prompt
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import published_shape_model

TARGETS = {"grid": 3.0, "attribution": 20.0}


def prompt_pair(tokens: int, seed: int = 3):
    """A clean prompt and one whose needle moved, of equal length (the seed fixes key and value)."""
    tokenizer = ByteTokenizer()
    for shift in range(50):
        no_bos = PromptEncoding(add_special_tokens=False)
        clean = niah_prompt(tokenizer, tokens, depth=0.2, seed=seed + shift, encoding=no_bos)
        corrupted = niah_prompt(tokenizer, tokens, depth=0.8, seed=seed + shift, encoding=no_bos)
        if len(clean.ids) == len(corrupted.ids):
            return clean, corrupted
    raise RuntimeError("no equal-length prompt pair found")


def serial_grid(lens, clean, corrupted, metric, layers=None) -> np.ndarray:
    """TransformerLens' patching loop: cache the clean run, then one full forward per (layer, head)."""
    sites = interventions.select_sites(lens.model, layers)
    clean_ids = torch.as_tensor(np.asarray(clean.ids))[None]
    corrupted_ids = torch.as_tensor(np.asarray(corrupted.ids))[None]
    with torch.no_grad():
        _, cache = lens.model.run_with_cache(clean_ids, names_filter=[site.hook for site in sites])
        values = np.full((lens.n_layers, lens.n_heads), np.nan)
        for site in sites:
            for head in range(lens.n_heads):
                def hook(value, hook, head=head, name=site.hook):
                    value = value.clone()
                    value[:, head] = cache[name][:, head]
                    return value

                logits = lens.model.run_with_hooks(corrupted_ids, fwd_hooks=[(site.hook, hook)])
                values[site.layer, head] = float(metric(logits)[0])
    return values


def _timed(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def measure(lens, tokens: int, repeats: int, batch_size: int, layers=None) -> dict:
    """Median times of the serial loop, the batched grid and attribution, and how the grids agree."""
    clean, corrupted = prompt_pair(tokens)
    metric = interventions.answer_logprob(corrupted)
    run = {
        "serial": lambda: serial_grid(lens, clean, corrupted, metric, layers),
        "grid": lambda: interventions.patch(lens, clean, corrupted, metric, layers=layers,
                                            options=interventions.GridOptions(batch_size=batch_size, progress=False)),
        "attribution": lambda: interventions.attribute(lens, clean, corrupted, metric, layers=layers),
    }
    for function in run.values():  # warm-up
        function()
    times: dict[str, list[float]] = {name: [] for name in run}
    results = {}
    for _ in range(repeats):
        for name, function in run.items():
            seconds, results[name] = _timed(function)
            times[name].append(seconds)
    exact, estimate = results["grid"], results["attribution"]
    cells = np.isfinite(exact.values)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"tokens": len(corrupted.ids), "cells": int(cells.sum()), **median,
            "max_diff": float(np.nanmax(np.abs(results["serial"] - exact.values))),
            "pearson": float(stats.pearsonr(exact.effects[cells], estimate.effects[cells])[0]),
            "spearman": float(stats.spearmanr(exact.effects[cells], estimate.effects[cells])[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--batch-size", type=int, default=16, help="patched copies per forward pass")
    parser.add_argument("--only", choices=("zoo", "shape"), help="run one setup only")
    parser.add_argument("--layers", help="comma-separated layers to patch (default: every learned layer)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    setups = {}
    if args.only != "shape":
        setups["zoo:bytes1k-repo"] = repo_lens.load("zoo:bytes1k-repo", device="cpu")
    if args.only != "zoo":
        setups["olmo2-1b shape (random)"] = Lens(published_shape_model(), ByteTokenizer(), {"name": "olmo2-1b"})
    print(f"torch threads {torch.get_num_threads()}, batch size {args.batch_size}, median of {args.repeats}\n")
    print("| setup | tokens | cells | serial loop s | grid s | grid speed-up (>= 3x) | attribution s "
          "| vs batched grid | vs serial loop (>= 20x) | Pearson | Spearman | max |grid - serial| |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, lens in setups.items():
        layers = [int(layer) for layer in args.layers.split(",")] if args.layers else None
        row = measure(lens, args.tokens, args.repeats, args.batch_size, layers)
        print(f"| {name} | {row['tokens']} | {row['cells']} | {row['serial']:.3f} | {row['grid']:.3f} | "
              f"{row['serial'] / row['grid']:.1f}x | {row['attribution']:.3f} | "
              f"{row['grid'] / row['attribution']:.1f}x | {row['serial'] / row['attribution']:.1f}x | "
              f"{row['pearson']:.3f} | {row['spearman']:.3f} | "
              f"{row['max_diff']:.1e} |")


if __name__ == "__main__":
    main()
