"""trace() capturing every layer's positions vs a plain forward of the same model (target <= 1.05x).

Runs both side by side, interleaved, and prints the ratio of medians.
    python bench/trace_overhead.py [--tokens 1024] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from repo_lens.capture import capture_positions
from repo_lens.model import LensModel, ModelConfig, repo_start_layer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    n_layers = 8
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=512, n_layers=n_layers, n_heads=8, d_mlp=2048,
                      max_position_embeddings=args.tokens,
                      layer_mechanisms=["rope" if l < repo_start_layer(n_layers) else "repo" for l in range(n_layers)])
    model = LensModel(cfg).eval()
    ids = torch.randint(0, 256, (1, args.tokens))

    @torch.inference_mode()
    def plain():
        model(ids)

    def traced():
        capture_positions(model, ids)

    plain(), traced()  # warm-up
    plain_times, trace_times = [], []
    for _ in range(args.repeats):
        for run, times in ((plain, plain_times), (traced, trace_times)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    plain_median, trace_median = statistics.median(plain_times), statistics.median(trace_times)
    print(f"model: {n_layers} layers, d_model 512, 8 heads, RePo from layer {repo_start_layer(n_layers)}; "
          f"{args.tokens} tokens, {args.repeats} interleaved repeats")
    print(f"plain forward  median {plain_median * 1000:8.1f} ms")
    print(f"trace (all L)  median {trace_median * 1000:8.1f} ms")
    print(f"ratio trace / plain = {trace_median / plain_median:.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
