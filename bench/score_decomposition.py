"""score_decomposition of one layer for the 16 answer rows of a NIAH prompt vs a plain forward (targets ≤ 1.5×
time, ≤ 1.2× peak memory), and every row of one layer, at the published RePo shape.

The model is the published RePo model's shape (OLMo-2 1B: 16 layers × 16 heads, RePo from layer 5) at a small
width, random weights; the prompt a RULER NIAH prompt of 4,096 byte tokens whose appended answer is 16 digits,
so its 16 answer tokens are the query rows. The decomposed layer is the last one (the forward runs almost
all of the model before it can stop). Each variant runs in its own subprocess:

  forward        model(ids) under inference_mode
  decomposition  score_decomposition(lens, ids, layer, queries=the 16 answer rows): content, position, the
                 four patterns (bands are computed when first read)
  with_bands     the same, then .bands read ([16 heads, 16 rows, 4,096 keys, 8 bands])
  every_row      every query row of the layer (4,096), in 4 calls of 4 heads each (each call runs its own
                 forward up to the layer; one call for all 16 heads would hold 6.4 GB of results)

Memory is the peak resident set size added by the call: VmHWM after it minus VmRSS before it, the high-water
mark reset just before (``/proc/self/clear_refs``), in a process started with ``MALLOC_MMAP_THRESHOLD_=65536``
so that RSS follows the live tensors; the peak RSS itself is printed too. Time is the median of ``--repeats``
calls after a warm-up in a separate process (every_row is timed once). Torch runs ``--threads`` threads (1 by
default: the ratio is what matters, and it is steadier on a shared machine).

    python bench/score_decomposition.py [--tokens 4096] [--repeats 3] [--threads 1] [--skip-every-row]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from attention_mass import _peak_kb, _reset_peak, _status_kb  # noqa: E402  (the same RSS probes)

VARIANTS = ("forward", "decomposition", "with_bands", "every_row")
TARGETS = {"time": 1.5, "memory": 1.2}
ROWS = 16


def _setup(tokens: int):
    import torch

    import repo_lens
    from repo_lens.data.niah import NiahSpec, niah_single
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo", shape="olmo2-1b", seed=0).eval()
    lens = repo_lens.Lens(model, ByteTokenizer())
    prompt = niah_single(ByteTokenizer(), tokens, depth=0.5, seed=0, spec=NiahSpec(value_digits=ROWS))
    start, end = prompt.query
    if end - start != ROWS:
        raise RuntimeError(f"the prompt's answer has {end - start} tokens, not {ROWS}")
    ids = list(prompt.ids)
    return lens, ids, list(range(start, end)), torch.tensor([ids])


def child(variant: str, tokens: int, repeats: int, mode: str, threads: int) -> None:
    import gc

    import torch

    from repo_lens.analysis import score_decomposition

    torch.set_num_threads(threads)
    lens, ids, rows, tensor = _setup(tokens)
    layer = lens.n_layers - 1

    def run():
        if variant == "forward":
            with torch.inference_mode():
                lens.model(tensor)
            return {}
        if variant in ("decomposition", "with_bands"):
            found = score_decomposition(lens, ids, layer, queries=rows)
            if variant == "with_bands":
                found.bands
            return {"mean_actual_on_first_key": float(found.patterns["actual"][:, :, 0].mean())}
        for first in range(0, lens.n_heads, 4):
            found = score_decomposition(lens, ids, layer, heads=list(range(first, first + 4)))
            del found
        return {}

    gc.collect()
    before = _status_kb("VmRSS") or 0
    reset = _reset_peak()
    start = time.perf_counter()
    result = run()
    first = time.perf_counter() - start
    peak = _peak_kb(reset)
    times = []
    for _ in range(repeats if mode == "time" and variant != "every_row" else 0):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    print(json.dumps({"variant": variant, "mode": mode, "tokens": len(ids), "rows": len(rows), "layer": layer,
                      "rss_before_mb": before / 1024, "peak_mb": peak / 1024, "added_mb": (peak - before) / 1024,
                      "peak_reset": reset, "time_s": statistics.median(times) if times else first,
                      "threads": torch.get_num_threads(), **result}))


def _run_child(variant: str, mode: str, args) -> dict:
    env = dict(os.environ)
    if mode == "memory":
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    command = [sys.executable, __file__, "--child", variant, "--mode", mode, "--tokens", str(args.tokens),
               "--repeats", str(args.repeats), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} ({mode}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-every-row", action="store_true")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("memory", "time"), default="time", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.tokens, args.repeats, args.mode, args.threads)
        return 0

    results = {}
    for variant in VARIANTS:
        if variant == "every_row" and args.skip_every_row:
            continue
        row = _run_child(variant, "memory", args)
        if variant != "every_row":
            row["time_s"] = _run_child(variant, "time", args)["time_s"]
        results[variant] = row

    base = results["forward"]
    print(f"score decomposition bench: published RePo shape (16 layers x 16 heads, d_model 128, random weights), "
          f"T={base['tokens']}, layer {results['decomposition']['layer']}, {results['decomposition']['rows']} answer "
          f"rows of a NIAH prompt, torch threads={base['threads']}, "
          f"peak via {'VmHWM reset' if base['peak_reset'] else 'ru_maxrss'}, MALLOC_MMAP_THRESHOLD_=65536")
    print(f"{'variant':<15}{'time s':>9}{'x fwd':>8}{'added MB':>10}{'x fwd':>8}{'peak RSS MB':>13}{'x fwd':>8}")
    for variant, row in results.items():
        print(f"{variant:<15}{row['time_s']:>9.3f}{row['time_s'] / base['time_s']:>8.2f}"
              f"{row['added_mb']:>10.1f}{row['added_mb'] / base['added_mb']:>8.2f}"
              f"{row['peak_mb']:>13.1f}{row['peak_mb'] / base['peak_mb']:>8.2f}")
    found = results["decomposition"]
    time_ratio = found["time_s"] / base["time_s"]
    memory_ratio = found["added_mb"] / base["added_mb"]
    ok = time_ratio <= TARGETS["time"] and memory_ratio <= TARGETS["memory"]
    print(f"score_decomposition, 16 rows: time {time_ratio:.2f}x a forward (target <= {TARGETS['time']}x), memory "
          f"added {memory_ratio:.2f}x (target <= {TARGETS['memory']}x; peak RSS "
          f"{found['peak_mb'] / base['peak_mb']:.2f}x) -> {'OK' if ok else 'MISSED'}")
    if "every_row" in results:
        every = results["every_row"]
        print(f"every row of layer {found['layer']} ({base['tokens']} rows x 16 heads, 4 calls of 4 heads): "
              f"{every['time_s']:.1f} s ({every['time_s'] / base['time_s']:.1f} forwards), "
              f"{every['added_mb']:.0f} MB added at the peak")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
