"""Training speed of a preset's model on this machine: bf16 autocast vs fp32, per row length.

Times training steps (forward, loss, backward, AdamW) of a preset's model on real batches of its task,
interleaving the settings so that machine noise hits them alike, and prints seconds per step, bytes per
second and the ratios. `bytes-1k` (d_model 128, 4 layers, batch 8, the retrieval mixture at 512 and 1,024
bytes) is the default; `--preset bytes-post` times the learned-increments post's 6.4 M-parameter byte model
(256 wide, 6 layers, 16 × 512 bytes a step) and adds what its full run (50,000 steps of 64 × 512 bytes)
costs: the hours at the measured speed, and the FLOPs a step, from which a GPU's time follows:
    python bench/train_speed.py [--preset bytes-1k] [--mechanism repo] [--threads 1] [--steps 4]
    python bench/train_speed.py --preset bytes-post --mechanism lpi-resid --threads 2 --steps 3

On a CPU without native bf16 matmuls (AVX2 only, like this project's 2-core machine) autocast is
expected to be slower; on AVX512-BF16 / AMX CPUs it may help.
"""

from __future__ import annotations

import argparse
import time

import torch

from repo_lens.train import build_model, build_task, preset


def step_seconds(model, optimizer, batch, autocast: bool) -> float:
    inputs, targets, *weights = batch  # the retrieval mixture weighs each target; plain text does not
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(inputs)
    per_token = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    loss = (per_token * weights[0].flatten()).sum() / weights[0].sum() if weights else per_token.mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bytes-1k", choices=["bytes-1k", "bytes-post"])
    parser.add_argument("--mechanism", default=None, help="default: the preset's own (repo for bytes-1k)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {"mechanism": args.mechanism or "repo"} if args.preset == "bytes-1k" or args.mechanism else {}
    cfg = preset(args.preset, **overrides)
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = {}
    for step in range(200):  # one real batch of each row length
        batch = task.train_batch(step)
        batches.setdefault(batch[0].shape[1], batch)
        if len(batches) == len(cfg.task_options.get("lengths", [cfg.context])):
            break
    settings = [(length, autocast) for length in sorted(batches) for autocast in (False, True)]
    times: dict[tuple[int, bool], list[float]] = {setting: [] for setting in settings}
    for setting in settings:  # warm-up
        step_seconds(model, optimizer, batches[setting[0]], setting[1])
    for _ in range(args.steps):
        for setting in settings:
            times[setting].append(step_seconds(model, optimizer, batches[setting[0]], setting[1]))
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{args.preset} / {cfg.mechanism} ({parameters:,} parameters), {args.threads} thread(s), batch "
          f"{cfg.batch_size}, median of {args.steps} steps")
    print("| row bytes | dtype | s/step | bytes/s |")
    print("|---|---|---|---|")
    median = {setting: sorted(values)[len(values) // 2] for setting, values in times.items()}
    for (length, autocast), seconds in median.items():
        print(f"| {length} | {'bf16 autocast' if autocast else 'fp32'} | {seconds:.2f} | "
              f"{cfg.batch_size * length / seconds:,.0f} |")
    for length in sorted(batches):
        print(f"bf16 autocast / fp32 step time at {length} bytes: {median[(length, True)] / median[(length, False)]:.2f}x")
    if len(batches) == 2:
        short, long = sorted(batches)
        per_byte = (median[(short, False)] / short) / (median[(long, False)] / long)
        print(f"fp32 time per byte, {short}-byte rows / {long}-byte rows: {per_byte:.2f}x")
    if args.preset == "bytes-post":
        full_run(cfg, parameters, max(cfg.batch_size * length / median[(length, autocast)]
                                      for length, autocast in median if length == cfg.context))


POST_STEPS, POST_BATCH = 50_000, 64  # the post's run: 50,000 steps of 64 rows of 512 bytes


def step_flops(cfg, parameters: int, rows: int) -> float:
    """Training FLOPs of one step: 6 per parameter and token (forward and backward of the matmuls) plus the
    attention scores and mixing, 12 · layers · width · context per token (causal masking not discounted)."""
    tokens = rows * cfg.context
    return 6.0 * parameters * tokens + 12.0 * cfg.n_layers * cfg.d_model * cfg.context * tokens


def full_run(cfg, parameters: int, bytes_per_second: float) -> None:
    total_bytes = POST_STEPS * POST_BATCH * cfg.context
    flops = step_flops(cfg, parameters, POST_BATCH)
    print(f"the post's full run: {POST_STEPS:,} steps x {POST_BATCH} x {cfg.context} bytes = {total_bytes / 1e9:.2f} G bytes")
    print(f"  here, at the faster setting's {bytes_per_second:,.0f} bytes/s: {total_bytes / bytes_per_second / 3600:,.0f} hours")
    print(f"  {flops / 1e12:.2f} TFLOP a step, {flops * POST_STEPS / 1e15:.0f} PFLOP in all; at an assumed 100 TFLOP/s "
          f"sustained (a quarter to a third of one H100's dense bf16 peak) {flops * POST_STEPS / 1e14 / 60:.0f} minutes")


if __name__ == "__main__":
    main()
