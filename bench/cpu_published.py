"""The published 1B model's shape on a CPU: what a user without a GPU can expect from
SakanaAI/RePo-OLMo2-1B-stage2-L5 (random weights in the published layout, bench/gpu_check.py's
checkpoint): load time, the process's peak memory, and the time of a trace and of a forward at
1,024 and 4,096 tokens (fp32, as ``repo_lens.load`` picks on a CPU), side by side in one run.

    python bench/cpu_published.py [--lengths 1024 4096] [--threads N]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import repo_lens  # noqa: E402
from gpu_check import PUBLISHED_1B, PUBLISHED_CONTEXT, random_ids, write_checkpoint  # noqa: E402


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kilobytes on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="published-1b-") as scratch:
        path = write_checkpoint(Path(scratch), PUBLISHED_1B, PUBLISHED_CONTEXT)
        start = time.perf_counter()
        lens = repo_lens.load(path, device="cpu")
        loaded = time.perf_counter() - start
        print(f"CPU: {torch.get_num_threads()} threads; loaded ({lens.meta['dtype']}) in {loaded:.1f} s, "
              f"peak memory {peak_gib():.1f} GiB")
        for length in args.lengths:
            ids = random_ids(length, PUBLISHED_1B.vocab, seed=1)
            start = time.perf_counter()
            lens.trace(ids.tolist(), progress=False)
            traced = time.perf_counter() - start
            start = time.perf_counter()
            with torch.inference_mode():
                lens.model(ids[None])
            forward = time.perf_counter() - start
            print(f"{length:,} tokens: trace {traced:.1f} s, forward {forward:.1f} s (trace / forward "
                  f"{traced / forward:.2f}); peak memory so far {peak_gib():.1f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
