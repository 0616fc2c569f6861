"""``repo-lens tiny``: a small random-weight checkpoint, for pipeline checks."""

from __future__ import annotations

import argparse
from pathlib import Path

from repo_lens.cli_args import output_dir, seed_value, whole_number
from repo_lens.errors import InputError, RepoLensError


def run(args: argparse.Namespace) -> int:
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    directory = Path(args.directory)
    if (directory / "config.json").exists() and not args.force:
        raise RepoLensError(f"{directory} already holds a checkpoint; pass --force to overwrite it")
    if args.shape and args.layers is not None:
        raise InputError(f"--layers {args.layers} conflicts with --shape {args.shape}, which sets the layers; "
                         "pass one of them")
    model = tiny_model(args.mechanism, n_layers=args.layers or 4, seed=args.seed, shape=args.shape)
    name = f"tiny-random-{args.mechanism}" + (f"-{args.shape}" if args.shape else "")
    save_checkpoint(model, directory, tokenizer="bytes",
                    info={"name": name, "note": "random weights, for pipeline checks"})
    cfg = model.cfg
    print(f"wrote a random {cfg.n_layers}-layer × {cfg.n_heads}-head byte-level {args.mechanism} model "
          f"(context {cfg.max_position_embeddings}) to {directory}")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """``tiny``: a small random checkpoint."""
    from repo_lens.model.registry import DEFAULT_KIND, mechanism_kinds

    tiny = commands.add_parser("tiny", help="write a small random byte-level checkpoint (for pipeline checks)")
    tiny.add_argument("directory", type=output_dir)
    tiny.add_argument("--mechanism", default=DEFAULT_KIND, choices=mechanism_kinds())
    tiny.add_argument("--layers", type=whole_number(1, 256), default=None, help="number of layers, 1..256 (default 4)")
    tiny.add_argument("--shape", default=None,
                      help="a published model's layers, heads, first learned layer and context at a small "
                           "d_model, e.g. olmo2-1b (SakanaAI/RePo-OLMo2-1B-stage2-L5: 16 × 16, RePo from layer 5)")
    tiny.add_argument("--seed", type=seed_value, default=0)
    tiny.add_argument("--force", action="store_true")
    tiny.set_defaults(handler=run)
