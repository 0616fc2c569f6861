"""Spaced tokens at the published shape (16 layers × 16 heads × 4,096 BPE-like word tokens, learned rows
as random walks): ``spaced_tokens_figure`` build time with today's word labels beside the per-word labels
of a baseline commit (its ``spaced_token_labels`` module from git, everything else today's), one run.

    python bench/spaced_labels.py [--baseline COMMIT] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "e1925e3"  # words as labels, one word and row at a time
SHAPE = (16, 16, 4096)


def word_trace():
    from repo_lens.model.registry import DEFAULT_KIND, default_layer_kinds
    from repo_lens.plots.gallery import word_tokens
    from repo_lens.trace import Trace

    n_layers, n_heads, n_tokens = SHAPE
    rng = np.random.default_rng(0)
    z = np.empty(SHAPE, dtype=np.float32)
    z[:5] = np.arange(n_tokens)
    z[5:] = rng.normal(0.2, 1.0, size=(n_layers - 5, n_heads, n_tokens)).cumsum(-1)
    return Trace(tokens=word_tokens(n_tokens), token_ids=np.arange(n_tokens), positions=z,
                 layer_kinds=default_layer_kinds(DEFAULT_KIND, n_layers, first_layer=5))


def baseline_place_rows(commit: str):
    source = subprocess.run(["git", "show", f"{commit}:repo_lens/plots/spaced_token_labels.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("baseline_spaced_token_labels")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{commit}:spaced_token_labels.py", "exec"), module.__dict__)
    return module.place_rows


def median_seconds(build, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        build()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spaced_tokens = importlib.import_module("repo_lens.plots.spaced_tokens")
    trace = word_trace()
    today = spaced_tokens.place_rows
    build = lambda: spaced_tokens.spaced_tokens_figure(trace, head=0)  # noqa: E731
    build()  # imports and first-call set-up
    now = median_seconds(build, args.repeats)
    spaced_tokens.place_rows = baseline_place_rows(args.baseline)
    before = median_seconds(build, args.repeats)
    spaced_tokens.place_rows = today
    print(f"spaced_tokens_figure at {SHAPE[0]} × {SHAPE[1]} × {SHAPE[2]:,} word tokens (median of {args.repeats}): "
          f"now {now:.3f} s, with the labels of {args.baseline} {before:.3f} s, ratio {now / before:.3f} "
          f"(target: at most 0.5 s)")


if __name__ == "__main__":
    sys.exit(main())
