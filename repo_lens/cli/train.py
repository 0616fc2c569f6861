"""``repo-lens train``: a small model trained from a preset, or a pretrained model re-positioned with
RePo (``--base``); both resumable."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from repo_lens.cli_args import output_dir, positive_int, positive_number, seed_value, whole_number
from repo_lens.errors import InputError

if TYPE_CHECKING:
    from repo_lens.train.config import TrainConfig


BASE_ONLY = ("context", "anneal_steps", "corpus", "adapters_from")  # flags of --base alone


def run(args: argparse.Namespace) -> int:
    if args.base is not None:
        return run_reposition(args)
    if args.preset is None:
        raise InputError("say what to train: --preset NAME (a small model from scratch) or --base MODEL "
                         "(a pretrained RoPE model re-positioned with RePo, e.g. --base zoo:smollm2-135m)")
    given = [_flag(name) for name in BASE_ONLY if getattr(args, name) is not None]
    if given:
        raise InputError(f"{', '.join(given)} only apply to --base (re-positioning a pretrained model); a --preset "
                         "sets them itself, so leave them out")
    from repo_lens.train import build_task, preset, train
    from repo_lens.train.loop import training_device_of

    cfg = preset(args.preset, mechanism=args.mechanism, steps=args.steps, seed=args.seed, threads=args.threads,
                 position_init_std=args.position_init_std, position_lr_scale=args.position_lr_scale,
                 decay=args.decay, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup, device=args.device,
                 autocast=False if args.no_autocast else None)
    _check_decay(cfg)
    training_device_of(cfg)  # before the corpora are read or anything is written
    result = train(cfg, build_task(cfg), args.out, progress=not args.quiet,
                   info={"name": Path(args.out).name})
    decay = "" if cfg.decay == "none" else f" with decay {cfg.decay}"
    print(f"trained {cfg.task}/{cfg.mechanism}{decay} for {result.steps} steps in {result.wall_seconds:.0f} s "
          f"-> {args.out}")
    for key, value in result.metrics.items():
        print(f"  {key}: {value:.4f}")
    return 0


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_decay(cfg: TrainConfig) -> None:
    """A decay adds its bias on top of rotary layers: a mechanism that biases the scores itself is refused."""
    from repo_lens.model.registry import mechanism_traits
    from repo_lens.train.loop import layer_mechanisms

    if cfg.decay == "none":
        return
    biased = sorted({kind for kind in layer_mechanisms(cfg) if mechanism_traits(kind).role != "rotary"})
    if biased:
        raise InputError(f"--decay {cfg.decay} adds its bias on top of rotary layers, and --mechanism {biased[0]} biases "
                         "the scores itself; pick a rotary mechanism (e.g. rope, repo, lpi) or leave --decay out")


def run_reposition(args: argparse.Namespace) -> int:
    """``train --base``: every flag checked, then the base loaded and checked, before the corpus is read or
    anything is written."""
    import repo_lens
    from repo_lens.train.reposition import (DEFAULT_KIND, RECIPE_KINDS, check_out_directory, check_recipe,
                                            native_bf16, recipe_choices, recipe_config, train_repositioned)
    from repo_lens.model.registry import is_learned
    from repo_lens.train.text_tokens import TextTokens
    from repo_lens.zoo import parse_zoo_name

    if args.preset is not None:
        raise InputError("--preset and --base are two different trainings; give one of them")
    if args.decay not in (None, "none"):
        raise InputError("--decay trains a model from scratch with a decay (--preset); --base continues a pretrained "
                         "model, which has none: leave --decay out")
    mechanism = args.mechanism or DEFAULT_KIND
    if mechanism not in RECIPE_KINDS:
        raise InputError(f"--base trains {recipe_choices()}, not {mechanism!r}")
    if mechanism != DEFAULT_KIND:
        unused = {"position_init_std": "starts at the index, not at random weights",
                  "anneal_steps": "needs no anneal (it starts as the base)"}
        if not is_learned(mechanism):  # RoPE kept: the control
            unused = {"position_init_std": "has no position module", "position_lr_scale": "has no position module",
                      "anneal_steps": "has no position module to anneal"}
        given = [name for name in unused if getattr(args, name) is not None]
        if given:
            raise InputError(f"{_flag(given[0])} does not apply to --base with --mechanism {mechanism}, which "
                             f"{unused[given[0]]}; leave it out")
    check_out_directory(args.out)
    device = "cpu" if args.device is None else args.device
    base = args.base if parse_zoo_name(args.base) is not None else str(Path(args.base).expanduser().absolute())
    lens = repo_lens.load(args.base, device=device, dtype="float32")
    defaults = recipe_config(mechanism)  # the post's graft has its own (every layer re-positioned)
    context = args.context or min(defaults.context, lens.model.cfg.max_position_embeddings)
    scale = 1.0 if args.position_lr_scale is None else args.position_lr_scale
    lr = defaults.lr if args.lr is None else args.lr  # the position modules': the same × --position-lr-scale
    cfg = recipe_config(mechanism, base=base, steps=args.steps or defaults.steps,
                        corpus=args.corpus or defaults.corpus,
                        seed=defaults.seed if args.seed is None else args.seed, threads=args.threads,
                        context=context, batch_size=args.batch_size or defaults.batch_size,
                        anneal_steps=defaults.anneal_steps if args.anneal_steps is None else args.anneal_steps,
                        position_init_std=(defaults.position_init_std if args.position_init_std is None
                                           else args.position_init_std),
                        lr=lr, position_lr=(defaults.position_lr if args.lr is None else args.lr) * scale,
                        warmup=defaults.warmup if args.warmup is None else args.warmup,
                        adapters_from=args.adapters_from,
                        autocast=not args.no_autocast and native_bf16(next(lens.model.parameters()).device))
    check_recipe(cfg, lens.model)
    text = TextTokens.from_corpus(cfg.corpus, lens.tokenizer)
    summary = train_repositioned(cfg, lens.model, text, args.out, progress=not args.quiet)
    last = [entry["held_out_bits"] for entry in summary["log"] if "held_out_bits" in entry]
    print(f"trained {mechanism} on {args.base} for {summary['steps']} steps ({summary['tokens']:,} tokens) in "
          f"{summary['wall_seconds']:.0f} s -> {args.out}; held-out bits per token {last[0]:.4f} -> {last[-1]:.4f}")
    return 0


def training_device(text: str) -> str:
    """An argparse type: a device to train on (cpu, cuda, cuda:N or auto) that exists here.

    >>> training_device("cpu")
    'cpu'
    """
    import torch

    from repo_lens.model.loaders.device import resolve_device

    try:
        resolve_device(text)
    except InputError as error:
        reason = str(error).split(";")[0]
        fix = ("use --device cpu, or auto (a CUDA GPU where there is one), or run on a machine with a CUDA GPU and a "
               "CUDA build of PyTorch" if text.startswith("cuda") and not torch.cuda.is_available()
               else "use cpu, cuda, cuda:N or auto")
        raise argparse.ArgumentTypeError(f"{text!r} is not a device to train on here ({reason}); {fix}") from None
    return text


def add(commands: argparse._SubParsersAction) -> None:
    """``train``: a small model from a preset, or a pretrained model re-positioned with RePo (resumable)."""
    from repo_lens.model.registry import (
        DEFAULT_KIND, NO_DECAY, ZOO_ATTENTION, decay_names, kinds_in_attention, recipe_kinds,
    )

    train = commands.add_parser("train", help="train a small model, or re-position a pretrained one with RePo "
                                              "(resumes if OUT has a train_state)")
    train.add_argument("--preset", default=None, help="bytes-small, bytes-post, bytes-1k, reversal, flipflop or tiny")
    train.add_argument("--base", default=None,
                       help="a pretrained RoPE causal LM to continue with RePo from layer ceil(L/3) (e.g. "
                            "zoo:smollm2-135m, a checkpoint directory or a .gguf file); --mechanism rope trains "
                            "the control the same way")
    recipe = sorted(recipe_kinds(), key=lambda kind: kind != DEFAULT_KIND)
    trainable = kinds_in_attention(ZOO_ATTENTION)  # the presets' and the bases' models run the zoo's attention
    train.add_argument("--mechanism", default=None, choices=trainable, metavar="KIND",
                       help=f"the position mechanism, a kind of the registry: {', '.join(trainable)}; --base "
                            f"trains {', '.join(recipe[:-1])} or {recipe[-1]} (default {DEFAULT_KIND})")
    train.add_argument("--decay", default=None, choices=[NO_DECAY, *decay_names()],
                       help="--preset: a decay added to every layer's scores on top of the rotation (the learned-"
                            "increments post's): alibi (fixed slopes) or forget (a learned forget gate from the "
                            "token embeddings); default none")
    train.add_argument("--out", required=True, type=output_dir, help="output directory (a repo_lens checkpoint)")
    train.add_argument("--steps", type=positive_int, default=None)
    train.add_argument("--seed", type=seed_value, default=None)
    train.add_argument("--threads", type=whole_number(1, 256), default=None, help="CPU threads, 1..256")
    train.add_argument("--position-init-std", type=positive_number(10), default=None,
                       help="std of the learned position modules' initial weights (default 0.02, as every weight; "
                            "with --base: RePo's f only)")
    train.add_argument("--position-lr-scale", type=positive_number(1000), default=None,
                       help="factor on the learned position modules' learning rate (default 1)")
    train.add_argument("--context", type=positive_int, default=None,
                       help="--base: tokens per sequence (1024, or the base's context where shorter)")
    train.add_argument("--batch-size", type=positive_int, default=None,
                       help="sequences per step (default: the preset's; --base: 4)")
    train.add_argument("--lr", type=positive_number(10), default=None,
                       help="peak learning rate of the warm-up + cosine schedule (default: the preset's; --base: the "
                            "recipe's, 1e-3); the position modules get it × "
                            "--position-lr-scale")
    train.add_argument("--warmup", type=whole_number(0, 10**7), default=None,
                       help="steps of linear warm-up before the cosine decay (default: the preset's; --base: 20)")
    train.add_argument("--anneal-steps", type=whole_number(0, 10**7), default=None,
                       help="--base with --mechanism repo: steps over which z goes from the integer index to f(h) "
                            "(200)")
    train.add_argument("--adapters-from", type=whole_number(0, 10**4), default=None, metavar="LAYER",
                       help="--base: the first layer whose attention gets the low-rank adapters (default: the "
                            "first re-positioned layer, ceil(L/3); with --mechanism lpi-graft, which re-positions "
                            "every layer, also ceil(L/3), as its control)")
    train.add_argument("--corpus", default=None,
                       help="--base: the text to train on: brown (the default), or a text file, JSON lines, Parquet, "
                            "a folder of them or a saved dataset; every tenth document is held out")
    train.add_argument("--device", default=None, type=training_device,
                       help="cpu, cuda, cuda:N or auto (default cpu); a run resumes on any device")
    train.add_argument("--no-autocast", action="store_true",
                       help="train in fp32 (default: bf16 autocast where the device computes bf16 natively: a "
                            "--preset on a GPU only, --base on a GPU or a CPU with AMX or AVX512-BF16)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=run)
