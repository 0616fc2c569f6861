"""Figures at the published model's shape (16 layers × 16 heads × 4,096 tokens): figure JSON size and
build time (builder + ``fig.to_json()``, the bytes the app sends), today's builders beside those of a
baseline commit (loaded from git, same trace, same arguments, one run), and the time to write the
published-shape checkpoint and trace 4,096 tokens through it (the tests' ``published_shape_trace``).

    python bench/figures_at_scale.py [--baseline COMMIT] [--repeats 3] [--no-checkpoint]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "d3837a7f34043842669097b222194c8df2a6645d"  # before issue 15
SHAPE = (16, 16, 4096)
BUDGET_BYTES = 3_000_000


def synthetic_trace(seed: int = 0):
    """RoPE in layers 0–4, random-walk positions (RePo-like, with outliers) in 5–15, BPE-like word tokens."""
    from repo_lens.model.registry import DEFAULT_KIND, default_layer_kinds
    from repo_lens.plots.gallery import word_tokens
    from repo_lens.trace import Trace

    n_layers, n_heads, n_tokens = SHAPE
    rng = np.random.default_rng(seed)
    z = np.empty(SHAPE, dtype=np.float32)
    z[:5] = np.arange(n_tokens)
    z[5:] = rng.normal(0.2, 1.0, size=(n_layers - 5, n_heads, n_tokens)).cumsum(-1)
    z[5:, :, ::97] += 200.0
    kinds = default_layer_kinds(DEFAULT_KIND, n_layers, first_layer=5)
    return Trace(tokens=word_tokens(n_tokens, seed), token_ids=np.arange(n_tokens), positions=z, layer_kinds=kinds)


def builders(module_of):
    """(name, build) pairs; ``module_of(name)`` gives the plots module to take the builder from."""
    from repo_lens.analysis import AttentionMass, chunk_patterns, pattern_fractions, range_stats

    trace = synthetic_trace()
    patterns = chunk_patterns(trace.positions)
    fractions = pattern_fractions(patterns)
    mass = AttentionMass(per_token={"needle": 0.05, "query": 0.02, "rest": 9e-4},
                         by_layer_head={k: np.full(SHAPE[:2], v) for k, v in [("needle", .05), ("query", .02),
                                                                              ("rest", 9e-4)]},
                         span_lengths={"needle": 12, "query": 30, "rest": 4000}, query=(4090, 4096),
                         self_mass=np.zeros(SHAPE[:2]), layers=list(range(SHAPE[0])))
    spans = {"needle": (2000, 2012), "question": (4050, 4080), "query": (4050, 4090), "answer": (4090, 4096)}
    return [
        ("spaced tokens, 4,096 tokens, strip", lambda: spaced_tokens(module_of("spaced_tokens"), trace, patterns)),
        ("scatter, layer 8, all 16 heads", lambda: module_of("scatter").position_scatter_figure(
            trace, 8, "all", highlight=spans)),
        ("range heatmap 16 × 16", lambda: module_of("heatmaps").range_heatmap(range_stats(trace.positions),
                                                                              trace.layer_kinds)),
        ("pattern fractions 16 × 16 × 3", lambda: module_of("heatmaps").pattern_fractions_figure(
            fractions, trace.layer_kinds)),
        ("pattern strip 16 × 256 chunks", lambda: module_of("heatmaps").pattern_strip_figure(
            patterns[:, 0], 16, tokens=trace.tokens, layer_kinds=trace.layer_kinds)),
        ("attention mass", lambda: module_of("attention_mass").attention_mass_figure({"model": mass})),
    ]


def measure(build, repeats: int) -> tuple[int, float]:
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        size = len(build().to_json())
        times.append(time.perf_counter() - start)
    return size, statistics.median(times)


def spaced_tokens(module: types.ModuleType, trace, patterns: np.ndarray):
    """The spaced-token figure of 4,096 tokens with its strip, from ``module`` (a baseline from before
    ``SpacedTokensStyle`` takes ``max_tokens`` as a keyword of its own)."""
    if not hasattr(module, "SpacedTokensStyle"):
        return module.spaced_tokens_figure(trace, head=0, patterns=patterns[:, 0], max_tokens=4096)
    return module.spaced_tokens_figure(trace, head=0, patterns=patterns[:, 0],
                                       style=module.SpacedTokensStyle(max_tokens=4096))


def baseline_modules(commit: str):
    """The plots modules as of ``commit`` (from ``git show``), importing today's style helpers."""
    cache: dict[str, types.ModuleType] = {}

    def module_of(name: str) -> types.ModuleType:
        if name not in cache:
            source = subprocess.run(["git", "show", f"{commit}:repo_lens/plots/{name}.py"], cwd=ROOT, check=True,
                                    capture_output=True, text=True).stdout
            spec = importlib.util.spec_from_loader(f"baseline_{name}", loader=None)
            module = importlib.util.module_from_spec(spec)
            exec(compile(source, f"{commit[:7]}:{name}.py", "exec"), module.__dict__)
            cache[name] = module
        return cache[name]

    return module_of


def checkpoint_times() -> tuple[float, float]:
    import repo_lens
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import published_shape_model

    text = ("The needle is hidden in the haystack. " * 120)[:SHAPE[2]]
    start = time.perf_counter()
    directory = save_checkpoint(published_shape_model(), tempfile.mkdtemp(prefix="published-shape-"))
    lens = repo_lens.load(directory, device="cpu")
    built = time.perf_counter() - start
    start = time.perf_counter()
    trace = lens.trace(text, progress=False)
    traced = time.perf_counter() - start
    assert trace.positions.shape == SHAPE, trace.positions.shape
    return built, traced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args()
    import repo_lens.plots

    current = builders(lambda name: importlib.import_module(f"repo_lens.plots.{name}"))
    try:
        old = builders(baseline_modules(args.baseline))
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"(no baseline: git show {args.baseline[:7]} failed: {error})")
        old = [(name, None) for name, _ in current]
    print(f"figures at {SHAPE[0]} layers × {SHAPE[1]} heads × {SHAPE[2]:,} tokens "
          f"(JSON budget {BUDGET_BYTES / 1e6:.0f} MB; baseline {args.baseline[:7]}; median of {args.repeats})")
    print(f"{'figure':34} {'JSON now':>10} {'before':>10} {'ratio':>6} {'build now':>10} {'before':>8} {'ratio':>6}")
    for (name, build), (_, old_build) in zip(current, old):
        size, seconds = measure(build, args.repeats)
        if old_build is not None:
            old_size, old_seconds = measure(old_build, args.repeats)
            before = (f"{old_size / 1e6:9.2f}M {size / old_size:6.2f} {seconds:9.3f}s {old_seconds:7.3f}s "
                      f"{seconds / old_seconds:6.2f}")
        else:
            before = f"{'-':>10} {'-':>6} {seconds:9.3f}s {'-':>8} {'-':>6}"
        flag = "" if size <= BUDGET_BYTES else "  OVER BUDGET"
        print(f"{name:34} {size / 1e6:9.2f}M {before}{flag}")
    print(f"repo_lens.plots from {Path(repo_lens.plots.__file__).parent}")
    if not args.no_checkpoint:
        built, traced = checkpoint_times()
        print(f"published-shape checkpoint: written and loaded in {built:.2f} s; a {SHAPE[2]:,}-token trace "
              f"in {traced:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
