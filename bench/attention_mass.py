"""Attention mass at 8K tokens vs a plain forward: peak memory and time (targets ≤ 1.5×, ≤ 1.3×).

Each variant runs in its own subprocess on the same random model (OLMo-2 blocks, d_model 256,
4 layers (rope, rope, repo, repo), 8 heads, byte vocabulary) and the same RULER NIAH prompt
(query rows = the appended answer tokens):

  forward         model(ids) under inference_mode
  attention_mass  repo_lens.analysis.attention_mass (query rows only, O(H·R·T))
  naive           model(ids) with hook_pattern hooked: full [1, H, T, T] patterns, reduced per layer

Memory is the peak resident set size *added* by the first call: VmHWM after the call minus
VmRSS before it, with the high-water mark reset just before (``/proc/self/clear_refs``; falls
back to ``ru_maxrss`` elsewhere), in a process started with ``MALLOC_MMAP_THRESHOLD_=65536`` so
that glibc maps every large tensor on its own and returns it on free: RSS then follows the live
tensors instead of the allocator's caching (without it the same run varies by ±50 MB). Time is
the median of ``--repeats`` calls after one warm-up call, in a separate process with the default
allocator (the naive variant is timed once, in its memory run).

    python bench/attention_mass.py [--tokens 8192] [--repeats 3] [--no-naive]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("forward", "attention_mass", "naive")
TARGETS = {"memory": 1.5, "time": 1.3}


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_kb(reset_worked: bool) -> int:
    if reset_worked:
        value = _status_kb("VmHWM")
        if value is not None:
            return value
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux


def _setup(tokens: int):
    import numpy as np
    import torch

    from repo_lens.data.niah import niah_single
    from repo_lens.model import LensModel, ModelConfig
    from repo_lens.model.byte_tokenizer import ByteTokenizer

    torch.manual_seed(0)
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=256, n_layers=4, n_heads=8, d_mlp=1024,
                      layer_mechanisms=["rope", "rope", "repo", "repo"], max_position_embeddings=tokens)
    model = LensModel(cfg).eval()
    prompt = niah_single(ByteTokenizer(), tokens, depth=0.5, seed=0)
    spans = prompt.pick("value", "query")
    ids = torch.as_tensor(np.asarray(prompt.ids))[None]
    return model, ids, spans, prompt.query


def _naive(model, ids, spans, query):
    """The obvious implementation: hook the full pattern of every layer, then reduce the rows."""
    import numpy as np
    import torch

    start, end = query
    per_layer = []

    def hook(pattern, hook):
        rows = pattern[0, :, start:end, :].double()
        out = {name: (rows[..., a:b].sum(-1).mean(-1) / (b - a)).numpy() for name, (a, b) in spans.items()}
        named = torch.zeros(pattern.shape[-1], dtype=torch.bool)
        for a, b in spans.values():
            named[a:b] = True
        rest = (~named[:start]).nonzero().squeeze(1)
        out["rest"] = (rows[..., rest].sum(-1).mean(-1) / len(rest)).numpy()
        per_layer.append(out)

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    with torch.inference_mode():
        model.run_with_hooks(ids, fwd_hooks=[(name, hook) for name in names])
    return {name: float(np.mean([layer[name] for layer in per_layer])) for name in per_layer[0]}


def child(variant: str, tokens: int, repeats: int, mode: str) -> None:
    import gc

    import torch

    from repo_lens.analysis.attention_mass import attention_mass

    model, ids, spans, query = _setup(tokens)

    def run():
        if variant == "forward":
            with torch.inference_mode():
                model(ids)
            return None
        if variant == "attention_mass":
            return attention_mass(model, ids, spans, query).per_token
        return _naive(model, ids, spans, query)

    gc.collect()
    before = _status_kb("VmRSS") or 0
    reset = _reset_peak()
    start = time.perf_counter()
    result = run()  # in "time" mode this is the warm-up
    first = time.perf_counter() - start
    peak = _peak_kb(reset)
    times = []
    for _ in range(repeats if mode == "time" else 0):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    print(json.dumps({
        "variant": variant, "mode": mode, "tokens": int(ids.shape[1]), "query_rows": query[1] - query[0],
        "rss_before_mb": before / 1024, "peak_mb": peak / 1024, "added_mb": (peak - before) / 1024,
        "peak_reset": reset, "time_s": statistics.median(times) if times else first,
        "per_token": result, "threads": torch.get_num_threads(),
    }))


def _run_child(variant: str, mode: str, args) -> dict:
    env = dict(os.environ)
    if mode == "memory":
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    command = [sys.executable, __file__, "--child", variant, "--mode", mode, "--tokens", str(args.tokens),
               "--repeats", str(args.repeats)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} ({mode}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-naive", action="store_true", help="skip the full-pattern variant (≈2 GB per layer at 8K)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("memory", "time"), default="time", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.tokens, args.repeats, args.mode)
        return 0

    results = {}
    for variant in VARIANTS:
        if variant == "naive" and args.no_naive:
            continue
        row = _run_child(variant, "memory", args)
        if variant != "naive":
            row["time_s"] = _run_child(variant, "time", args)["time_s"]
        results[variant] = row

    base = results["forward"]
    print(f"attention mass bench: T={base['tokens']}, query rows={results['attention_mass']['query_rows']}, "
          f"model olmo2 d_model=256 L=4 H=8, torch threads={base['threads']}, "
          f"peak via {'VmHWM reset' if base['peak_reset'] else 'ru_maxrss'}, MALLOC_MMAP_THRESHOLD_=65536")
    print(f"{'variant':<16}{'time s':>9}{'× fwd':>8}{'added MB':>10}{'× fwd':>8}{'peak RSS MB':>13}{'× fwd':>8}")
    for variant, row in results.items():
        print(f"{variant:<16}{row['time_s']:>9.3f}{row['time_s'] / base['time_s']:>8.2f}"
              f"{row['added_mb']:>10.1f}{row['added_mb'] / base['added_mb']:>8.2f}"
              f"{row['peak_mb']:>13.1f}{row['peak_mb'] / base['peak_mb']:>8.2f}")
    mass = results["attention_mass"]
    time_ratio = mass["time_s"] / base["time_s"]
    memory_ratio = mass["added_mb"] / base["added_mb"]
    ok = time_ratio <= TARGETS["time"] and memory_ratio <= TARGETS["memory"]
    print(f"attention_mass: memory {memory_ratio:.2f}× (target ≤ {TARGETS['memory']}×, added over the resident "
          f"model), time {time_ratio:.2f}× (target ≤ {TARGETS['time']}×) -> {'OK' if ok else 'MISSED'}")
    print("per-token mass (1e-2):", {k: round(100 * v, 4) for k, v in mass["per_token"].items()})
    if "naive" in results:
        diff = max(abs(mass["per_token"][k] - results["naive"]["per_token"][k]) for k in mass["per_token"])
        print(f"naive full-pattern result agrees within {diff:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
