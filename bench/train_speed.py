"""What makes the zoo's CPU training faster (issue 17): bf16 autocast vs fp32, and 512- vs 1,024-byte rows.

Times training steps (forward, weighted loss, backward, AdamW) of the `bytes-1k` preset's model
(d_model 128, 4 layers, 4 heads, batch 8) on real batches of the retrieval mixture, interleaving the
settings so that machine noise hits them alike, and prints seconds per step, bytes per second and
the ratios:
    python bench/train_speed.py [--mechanism repo] [--threads 1] [--steps 4]

On a CPU without native bf16 matmuls (AVX2 only, like this project's 2-core machine) autocast is
expected to be slower; on AVX512-BF16 / AMX CPUs it may help.
"""

from __future__ import annotations

import argparse
import time

import torch

from repo_lens.train import build_model, build_task, preset


def step_seconds(model, optimizer, batch, autocast: bool) -> float:
    inputs, targets, weights = batch
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(inputs)
    per_token = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    loss = (per_token * weights.flatten()).sum() / weights.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", default="repo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = preset("bytes-1k", mechanism=args.mechanism)
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = {}
    for step in range(200):  # one real batch of each row length
        batch = task.train_batch(step)
        batches.setdefault(batch[0].shape[1], batch)
        if len(batches) == len(cfg.task_options["lengths"]):
            break
    settings = [(length, autocast) for length in sorted(batches) for autocast in (False, True)]
    times: dict[tuple[int, bool], list[float]] = {setting: [] for setting in settings}
    for setting in settings:  # warm-up
        step_seconds(model, optimizer, batches[setting[0]], setting[1])
    for _ in range(args.steps):
        for setting in settings:
            times[setting].append(step_seconds(model, optimizer, batches[setting[0]], setting[1]))
    print(f"{args.mechanism}, {args.threads} thread(s), batch {cfg.batch_size}, median of {args.steps} steps")
    print("| row bytes | dtype | s/step | bytes/s |")
    print("|---|---|---|---|")
    median = {setting: sorted(values)[len(values) // 2] for setting, values in times.items()}
    for (length, autocast), seconds in median.items():
        print(f"| {length} | {'bf16 autocast' if autocast else 'fp32'} | {seconds:.2f} | "
              f"{cfg.batch_size * length / seconds:,.0f} |")
    for length in sorted(batches):
        print(f"bf16 autocast / fp32 step time at {length} bytes: {median[(length, True)] / median[(length, False)]:.2f}x")
    short, long = sorted(batches)
    per_byte = (median[(short, False)] / short) / (median[(long, False)] / long)
    print(f"fp32 time per byte, {short}-byte rows / {long}-byte rows: {per_byte:.2f}x")


if __name__ == "__main__":
    main()
