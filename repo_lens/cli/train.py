"""``repo-lens train``: a small model trained from a preset (resumable)."""

from __future__ import annotations

import argparse
from pathlib import Path

from repo_lens.cli_args import output_dir, positive_int, positive_number, seed_value, whole_number


def run(args: argparse.Namespace) -> int:
    from repo_lens.train import build_task, preset, train

    cfg = preset(args.preset, mechanism=args.mechanism, steps=args.steps, seed=args.seed, threads=args.threads,
                 position_init_std=args.position_init_std, position_lr_scale=args.position_lr_scale)
    result = train(cfg, build_task(cfg), args.out, progress=not args.quiet,
                   info={"name": Path(args.out).name})
    print(f"trained {cfg.task}/{cfg.mechanism} for {result.steps} steps in {result.wall_seconds:.0f} s -> {args.out}")
    for key, value in result.metrics.items():
        print(f"  {key}: {value:.4f}")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """``train``: a small model trained from a preset (resumable)."""
    from repo_lens.model.registry import DEFAULT_KIND, mechanism_kinds

    train = commands.add_parser("train", help="train a small model (resumes if OUT has a train_state)")
    train.add_argument("--preset", required=True, help="bytes-small, bytes-1k, reversal, flipflop or tiny")
    train.add_argument("--mechanism", default=DEFAULT_KIND, choices=mechanism_kinds())
    train.add_argument("--out", required=True, type=output_dir, help="output directory (a repo_lens checkpoint)")
    train.add_argument("--steps", type=positive_int, default=None)
    train.add_argument("--seed", type=seed_value, default=None)
    train.add_argument("--threads", type=whole_number(1, 256), default=None, help="CPU threads, 1..256")
    train.add_argument("--position-init-std", type=positive_number(10), default=None,
                       help="std of the learned position modules' initial weights (default 0.02, as every weight)")
    train.add_argument("--position-lr-scale", type=positive_number(1000), default=None,
                       help="factor on the learned position modules' learning rate (default 1)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=run)
