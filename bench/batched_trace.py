"""Batched tracing vs one text at a time on the CPU (DESIGN target: batch 8 >= 2x the texts/s).

A random byte-level RePo model (16 layers, d_model 256, 4 heads, RePo from layer 6, the shape of
`repo-lens tiny --layers 16` at d_model 256) traces 64 texts of 128-512 tokens one at a time, in
batches of 8 and in batches of 32, interleaved per slice of 32 texts (`--repeats` rounds); the
script prints the texts/s of each, the ratios, and the largest position difference between batched
and one-at-a-time traces.
    python bench/batched_trace.py [--texts 64] [--repeats 1] [--threads N]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch

from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model

WORDS = ("the position of every token is learned from its content and the model reads "
         "these values in each head of the upper layers while lower layers keep integer indices").split()


def make_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` texts of 128-512 bytes (= tokens for the byte model), lengths spread uniformly."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        target = rng.randint(128, 512)
        text = ""
        while len(text) < target:
            text += rng.choice(WORDS) + " "
        texts.append(text[:target])
    return texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lens = Lens(tiny_model("repo", n_layers=16, d_model=256, context=512), ByteTokenizer(), {"name": "bench"})
    texts = make_texts(args.texts)
    batch_sizes = (1, 8, 32)
    lens.trace(texts[:8], batch_size=8, progress=False)  # warm-up
    times: dict[int, list[float]] = {size: [] for size in batch_sizes}
    traces: dict[int, list] = {size: [] for size in batch_sizes}
    share = max(batch_sizes)
    for _ in range(args.repeats):  # interleaved in slices of 32 texts, so a change in machine load hits every mode
        for first in range(0, len(texts), share):
            for size in batch_sizes:
                start = time.perf_counter()
                traced = lens.trace(texts[first:first + share], batch_size=size, progress=False)
                times[size].append(time.perf_counter() - start)
                traces[size][first:first + share] = traced
    seconds = {size: sum(times[size]) / args.repeats for size in batch_sizes}
    throughput = {size: len(texts) / seconds[size] for size in batch_sizes}
    tokens = sum(len(text) for text in texts)
    print(f"model: 16 layers, d_model 256, 4 heads, {lens.model.cfg.layer_mechanisms.count('rope')} RoPE layers "
          f"then RePo; {len(texts)} texts of 128-512 tokens ({tokens} tokens); CPU, {torch.get_num_threads()} "
          f"threads; mean of {args.repeats} round(s), interleaved per 32 texts")
    for size in batch_sizes:
        worst = max(float(np.abs(batched.positions - alone.positions).max())
                    for batched, alone in zip(traces[size], traces[1]))
        label = "one at a time" if size == 1 else f"batch {size}"
        print(f"{label:>14}: {throughput[size]:7.2f} texts/s  ({seconds[size]:6.2f} s)  "
              f"max |positions - one at a time| = {worst:.1e}")
    scale = max(float(np.abs(trace.positions).max()) for trace in traces[1])
    print(f"(positions reach |z| = {scale:.1f}; the differences are float32 rounding of other kernel shapes)")
    for size in batch_sizes[1:]:
        print(f"ratio batch {size} / one at a time = {throughput[size] / throughput[1]:.2f}x"
              + (" (target >= 2x)" if size == 8 else ""))


if __name__ == "__main__":
    main()
