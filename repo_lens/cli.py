"""The ``repo-lens`` command (also ``python -m repo_lens.cli``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from repo_lens.errors import RepoLensError


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise RepoLensError("give either --text or --file, not both")
    if args.file is not None:
        try:
            return Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise RepoLensError(f"cannot read {args.file} as UTF-8 text: {error}") from None
    if args.text is None:
        raise RepoLensError("nothing to trace: pass --text 'some text' or --file path.txt")
    return args.text


def cmd_trace(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.report import layer_summary

    lens = repo_lens.load(args.model, device=args.device, dtype=args.dtype)
    trace = lens.trace(_read_text(args), truncate=args.truncate)
    print(f"model: {trace.meta.get('name')}  ({trace.meta.get('format')}, {trace.meta.get('dtype')}, "
          f"{trace.meta.get('device')})")
    print(f"tokens: {len(trace)}  layers: {trace.n_layers}  heads: {trace.n_heads}")
    if trace.meta.get("truncation"):
        truncation = trace.meta["truncation"]
        print(f"truncated: kept {truncation['kept_tokens']} of {truncation['original_tokens']} tokens")
    for warning in trace.meta.get("warnings", []):
        print(f"warning: {warning}")
    print(layer_summary(trace, per_head=args.per_head))
    if args.save:
        print(f"trace saved to {trace.save(args.save)}")
    return 0


def cmd_tiny(args: argparse.Namespace) -> int:
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    directory = Path(args.directory)
    if (directory / "config.json").exists() and not args.force:
        raise RepoLensError(f"{directory} already holds a checkpoint; pass --force to overwrite it")
    model = tiny_model(args.mechanism, n_layers=args.layers, seed=args.seed)
    save_checkpoint(model, directory, tokenizer="bytes",
                    info={"name": f"tiny-random-{args.mechanism}", "note": "random weights, for pipeline checks"})
    print(f"wrote a random {args.layers}-layer byte-level {args.mechanism} model to {directory}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from repo_lens.train import build_task, preset, train

    cfg = preset(args.preset, mechanism=args.mechanism, steps=args.steps, seed=args.seed, threads=args.threads)
    result = train(cfg, build_task(cfg), args.out, progress=not args.quiet,
                   info={"name": Path(args.out).name})
    print(f"trained {cfg.task}/{cfg.mechanism} for {result.steps} steps in {result.wall_seconds:.0f} s -> {args.out}")
    for key, value in result.metrics.items():
        print(f"  {key}: {value:.4f}")
    return 0


def cmd_zoo(args: argparse.Namespace) -> int:
    import json

    from repo_lens.zoo import zoo_entries

    entries = zoo_entries()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print("no zoo models are shipped in this version")
    for entry in entries:
        metrics = entry["metrics"]
        headline = {k: v for k, v in metrics.items() if k in ("val_bpb", "acc_in_domain", "acc_out_of_domain")}
        shown = ", ".join(f"{k}={v:.3f}" for k, v in headline.items())
        print(f"zoo:{entry['name']:<18} {entry['task']:<9} {entry['mechanism']:<5} {shown}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="repo-lens", description="Look at the positions language models learn.")
    commands = parser.add_subparsers(dest="command", required=True)

    trace = commands.add_parser("trace", help="trace a text and print per-layer position statistics")
    trace.add_argument("--model", required=True, help="checkpoint directory or zoo:NAME")
    trace.add_argument("--text", help="text to trace")
    trace.add_argument("--file", help="UTF-8 text file to trace")
    trace.add_argument("--device", default="auto", help="auto (CUDA + bf16 when present), cpu, cuda, cuda:N")
    trace.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: by device)")
    trace.add_argument("--truncate", action="store_true", help="keep the first context-length tokens of a long text")
    trace.add_argument("--per-head", action="store_true", help="one row per layer and head")
    trace.add_argument("--save", help="write the trace to this .safetensors file")
    trace.set_defaults(handler=cmd_trace)

    tiny = commands.add_parser("tiny", help="write a small random byte-level checkpoint (for pipeline checks)")
    tiny.add_argument("directory")
    tiny.add_argument("--mechanism", default="repo", choices=["rope", "nope", "repo"])
    tiny.add_argument("--layers", type=int, default=4)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--force", action="store_true")
    tiny.set_defaults(handler=cmd_tiny)

    train = commands.add_parser("train", help="train a small model (resumes if OUT has a train_state)")
    train.add_argument("--preset", required=True, help="bytes-small, reversal or tiny")
    train.add_argument("--mechanism", default="repo", choices=["rope", "nope", "repo"])
    train.add_argument("--out", required=True, help="output directory (a repo_lens checkpoint)")
    train.add_argument("--steps", type=int, default=None)
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=cmd_train)

    zoo = commands.add_parser("zoo", help="list the shipped models")
    zoo.add_argument("--json", action="store_true", help="print [{name, mechanism, task, metrics}] as JSON")
    zoo.set_defaults(handler=cmd_zoo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except RepoLensError as error:
        print(f"repo-lens: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
