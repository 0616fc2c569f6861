"""Seconds per training step of the SmolLM2-135M recipe (``repo-lens train --base zoo:smollm2-135m``) on this machine.

Times the forward and the backward + AdamW of real steps (random tokens, the recipe's model and optimizer) after
one warm-up step, and prints tokens per second and the hours a 2,048,000-token run takes:
    python bench/smollm2_train_step.py [--mechanism lpi-layer] [--batch-size 4] [--steps 2] [--autocast]

Needs the base's GGUF (``make setup`` installs it). Run it alone on the CPU: a training run beside it halves both.
"""

from __future__ import annotations

import argparse
import time

import torch

import repo_lens
from repo_lens.train.reposition import RepositionConfig, _optimizer, repositioned_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", default="lpi-layer")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autocast", action="store_true", help="bf16 autocast (fast only with AMX / AVX512-BF16)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = repo_lens.load("zoo:smollm2-135m", device="cpu", dtype="float32").model
    cfg = RepositionConfig(mechanism=args.mechanism, batch_size=args.batch_size, context=args.context,
                           autocast=args.autocast)
    model = repositioned_model(base, cfg)
    optimizer = _optimizer(model, cfg)
    model.train()
    batch = torch.randint(0, base.cfg.vocab_size, (args.batch_size, args.context + 1),
                          generator=torch.Generator().manual_seed(0))
    times = []
    for step in range(args.steps + 1):
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        forward = time.perf_counter() - started
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total = time.perf_counter() - started
        if step:  # the first step warms up
            times.append((forward, total))
    forward, total = (sorted(column)[len(column) // 2] for column in zip(*times))
    tokens = args.batch_size * args.context
    print(f"{args.mechanism}, {'bf16 autocast' if args.autocast else 'fp32'}, {args.threads} thread(s), "
          f"{args.batch_size} x {args.context} tokens, median of {args.steps} steps")
    print(f"forward {forward:.1f} s, backward + AdamW {total - forward:.1f} s, step {total:.1f} s: "
          f"{tokens / total:.0f} tokens/s, {2_048_000 / (tokens / total) / 3600:.1f} h for 2,048,000 tokens")


if __name__ == "__main__":
    main()
