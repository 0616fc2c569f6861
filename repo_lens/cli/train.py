"""``repo-lens train``: a small model trained from a preset, or a pretrained model re-positioned with
RePo (``--base``); both resumable."""

from __future__ import annotations

import argparse
from pathlib import Path

from repo_lens.cli_args import output_dir, positive_int, positive_number, seed_value, whole_number
from repo_lens.errors import InputError


def run(args: argparse.Namespace) -> int:
    if args.base is not None:
        return run_reposition(args)
    if args.preset is None:
        raise InputError("say what to train: --preset NAME (a small model from scratch) or --base MODEL "
                         "(a pretrained RoPE model re-positioned with RePo, e.g. --base zoo:smollm2-135m)")
    from repo_lens.train import build_task, preset, train

    cfg = preset(args.preset, mechanism=args.mechanism, steps=args.steps, seed=args.seed, threads=args.threads,
                 position_init_std=args.position_init_std, position_lr_scale=args.position_lr_scale)
    result = train(cfg, build_task(cfg), args.out, progress=not args.quiet,
                   info={"name": Path(args.out).name})
    print(f"trained {cfg.task}/{cfg.mechanism} for {result.steps} steps in {result.wall_seconds:.0f} s -> {args.out}")
    for key, value in result.metrics.items():
        print(f"  {key}: {value:.4f}")
    return 0


def run_reposition(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.train.reposition import RECIPE_KINDS, RepositionConfig, native_bf16, train_repositioned
    from repo_lens.train.text_tokens import TextTokens

    if args.preset is not None:
        raise InputError("--preset and --base are two different trainings; give one of them")
    mechanism = args.mechanism or RECIPE_KINDS[0]
    if mechanism not in RECIPE_KINDS:
        raise InputError(f"--base trains RePo ('--mechanism repo'), its RoPE control ('--mechanism rope'), "
                         f"GRAPE-M with a content phase ('--mechanism grape-m') or per-layer learned increments "
                         f"('--mechanism lpi-layer'), not {mechanism!r}")
    defaults = RepositionConfig()
    cfg = RepositionConfig(base=args.base, mechanism=mechanism, steps=args.steps or defaults.steps,
                           corpus=args.corpus or defaults.corpus,
                           seed=defaults.seed if args.seed is None else args.seed, threads=args.threads,
                           context=args.context or defaults.context, batch_size=args.batch_size or defaults.batch_size,
                           anneal_steps=defaults.anneal_steps if args.anneal_steps is None else args.anneal_steps,
                           autocast=not args.no_autocast and native_bf16(args.device or "cpu"))
    lens = repo_lens.load(args.base, device="cpu" if args.device is None else args.device, dtype="float32")
    text = TextTokens.from_corpus(cfg.corpus, lens.tokenizer)
    summary = train_repositioned(cfg, lens.model, text, args.out, progress=not args.quiet)
    last = [entry["held_out_bits"] for entry in summary["log"] if "held_out_bits" in entry]
    print(f"trained {mechanism} on {args.base} for {summary['steps']} steps ({summary['tokens']:,} tokens) in "
          f"{summary['wall_seconds']:.0f} s -> {args.out}; held-out bits per token {last[0]:.4f} -> {last[-1]:.4f}")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """``train``: a small model from a preset, or a pretrained model re-positioned with RePo (resumable)."""
    from repo_lens.model.registry import mechanism_kinds

    train = commands.add_parser("train", help="train a small model, or re-position a pretrained one with RePo "
                                              "(resumes if OUT has a train_state)")
    train.add_argument("--preset", default=None, help="bytes-small, bytes-1k, reversal, flipflop or tiny")
    train.add_argument("--base", default=None,
                       help="a pretrained RoPE causal LM to continue with RePo from layer ceil(L/3) (e.g. "
                            "zoo:smollm2-135m, a checkpoint directory or a .gguf file); --mechanism rope trains "
                            "the control the same way")
    train.add_argument("--mechanism", default=None, choices=mechanism_kinds())
    train.add_argument("--out", required=True, type=output_dir, help="output directory (a repo_lens checkpoint)")
    train.add_argument("--steps", type=positive_int, default=None)
    train.add_argument("--seed", type=seed_value, default=None)
    train.add_argument("--threads", type=whole_number(1, 256), default=None, help="CPU threads, 1..256")
    train.add_argument("--position-init-std", type=positive_number(10), default=None,
                       help="std of the learned position modules' initial weights (default 0.02, as every weight)")
    train.add_argument("--position-lr-scale", type=positive_number(1000), default=None,
                       help="factor on the learned position modules' learning rate (default 1)")
    train.add_argument("--context", type=positive_int, default=None, help="--base: tokens per sequence (1024)")
    train.add_argument("--batch-size", type=positive_int, default=None, help="--base: sequences per step (4)")
    train.add_argument("--anneal-steps", type=whole_number(0, 10**7), default=None,
                       help="--base: steps over which z goes from the integer index to f(h) (200)")
    train.add_argument("--corpus", default=None,
                       help="--base: the text to train on: brown (the default), or a text file, JSON lines, Parquet, "
                            "a folder of them or a saved dataset; every tenth document is held out")
    train.add_argument("--device", default=None, help="--base: cpu or cuda (default cpu)")
    train.add_argument("--no-autocast", action="store_true",
                       help="--base: train in fp32 (default: bf16 autocast where the device computes bf16 natively)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=run)
