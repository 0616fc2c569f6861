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
    from repo_lens.studies.report import layer_summary

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

    if args.ship:
        from repo_lens.zoo.ship import ship

        run_dir, name, preset_name = args.ship
        print(f"shipped {run_dir} as zoo:{name} -> {ship(run_dir, name, preset_name)}")
        return 0

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
        print(f"zoo:{entry['name']:<18} {entry['task']:<10} {entry['mechanism']:<5} {shown}")
    return 0


def _numbers(text: str, kind=float) -> list:
    try:
        return [kind(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise RepoLensError(f"{text!r} is not a comma-separated list of numbers (e.g. 512,1024)") from None


def _sample(items: list, count: int) -> list:
    """``count`` items evenly spaced over ``items`` (deterministic)."""
    if count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(index * step)] for index in range(count)]


def _texts_for(args: argparse.Namespace) -> list[str]:
    if args.file:
        text = Path(args.file).read_text(encoding="utf-8")
        paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
        if not paragraphs:
            raise RepoLensError(f"{args.file} holds no text")
        return _sample(paragraphs, args.samples)
    if args.corpus == "brown":
        from repo_lens.data.brown import brown_documents

        return [doc.text for doc in _sample(brown_documents(), args.samples)]
    from repo_lens.data import peoples_daily

    return [s.text for s in _sample(peoples_daily(), args.samples)]


def cmd_analyze(args: argparse.Namespace) -> int:
    import json

    import repo_lens
    from repo_lens.studies import items as studies
    from repo_lens.atomic import run_lock
    from repo_lens.studies.runs import run_items, write_summary

    settings = {"model": args.model, "study": args.study}
    lens = repo_lens.load(args.model, device=args.device)
    if args.study == "niah":
        lengths, depths, seeds = _numbers(args.lengths, int), _numbers(args.depths), _numbers(args.seeds, int)
        settings.update(lengths=lengths, depths=depths, seeds=seeds, beyond_context=args.beyond_context)
        items = studies.niah_items(lens, lengths, depths, seeds, beyond_context=args.beyond_context,
                                   batch_size=args.batch_size)
        summarize = studies.summarize_niah
    elif args.study == "positions":
        settings.update(file=args.file, corpus=None if args.file else args.corpus, samples=args.samples)
        items = studies.position_items(lens, _texts_for(args), batch_size=args.batch_size)
        summarize = studies.summarize_positions
    else:
        from repo_lens.data import peoples_daily

        settings.update(corpus="peoples-daily", samples=args.samples)
        items = studies.boundary_items(lens, _sample(peoples_daily(), args.samples), batch_size=args.batch_size)
        summarize = studies.summarize_boundaries
    with run_lock(args.out):  # one writer per --out, summary included
        records = run_items(args.out, items, settings, progress=not args.quiet, desc=f"analyze {args.study}")
        summary = summarize(records)
        write_summary(args.out, summary)
    print(f"{len(records)} items -> {args.out}/results.json, results.csv, summary.json")
    print(json.dumps({k: v for k, v in summary.items() if not k.endswith("by_layer_head")}, indent=1)[:3000])
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from repo_lens.studies.reproductions import STUDIES, reproduce

    if args.list:
        for name, study in STUDIES.items():
            print(f"{name:<20} {study.source}  [{', '.join(study.default_models)}]")
        return 0
    documents = reproduce(args.names or ["all"], args.out, models=args.model, quick=args.quick,
                          figures=not args.no_figures, progress=not args.quiet, batch_size=args.batch_size)
    for name, document in documents.items():
        print(f"\n## {name} ({STUDIES[name].source}) — {document['seconds']} s -> {args.out}/{name}/\n")
        print(document.get("markdown", ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from repo_lens.model.registry import DEFAULT_KIND, mechanism_kinds

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
    tiny.add_argument("--mechanism", default=DEFAULT_KIND, choices=mechanism_kinds())
    tiny.add_argument("--layers", type=int, default=4)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--force", action="store_true")
    tiny.set_defaults(handler=cmd_tiny)

    train = commands.add_parser("train", help="train a small model (resumes if OUT has a train_state)")
    train.add_argument("--preset", required=True, help="bytes-small, reversal or tiny")
    train.add_argument("--mechanism", default=DEFAULT_KIND, choices=mechanism_kinds())
    train.add_argument("--out", required=True, help="output directory (a repo_lens checkpoint)")
    train.add_argument("--steps", type=int, default=None)
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=cmd_train)

    analyze = commands.add_parser("analyze", help="run an analysis over a prompt set (resumable; JSON + CSV)")
    analyze.add_argument("--model", required=True, help="checkpoint directory or zoo:NAME")
    analyze.add_argument("--study", required=True, choices=["niah", "positions", "boundaries"],
                         help="niah: attention mass sweep; positions: ranges + chunk patterns; "
                              "boundaries: Chinese word-boundary AUC (People's Daily, gold + jieba)")
    analyze.add_argument("--out", required=True, help="output directory; rerun to resume")
    analyze.add_argument("--lengths", default="256,512", help="niah: prompt lengths in tokens")
    analyze.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="niah: needle depths")
    analyze.add_argument("--seeds", default="0", help="niah: seeds")
    analyze.add_argument("--beyond-context", action="store_true",
                         help="niah: allow prompts longer than the model's training context (extrapolation)")
    analyze.add_argument("--file", help="positions: a UTF-8 text file (paragraphs separated by blank lines)")
    analyze.add_argument("--corpus", default="brown", choices=["brown", "peoples-daily"], help="positions: corpus")
    analyze.add_argument("--samples", type=int, default=50, help="positions/boundaries: number of texts")
    analyze.add_argument("--device", default="auto")
    analyze.add_argument("--batch-size", type=int, default=1,
                         help="texts or prompts per forward pass (right-padded; the same results; not part of the "
                              "run's settings, so a run may resume with another)")
    analyze.add_argument("--quiet", action="store_true")
    analyze.set_defaults(handler=cmd_analyze)

    reproduce = commands.add_parser("reproduce", help="regenerate the sources' tables and figures (JSON + PDF/SVG)")
    reproduce.add_argument("names", nargs="*", help="results to regenerate (default: all); see --list")
    reproduce.add_argument("--out", default="build/reproduce", help="output directory (one folder per result)")
    reproduce.add_argument("--model", action="append", help="run on these models instead of the defaults (repeat)")
    reproduce.add_argument("--quick", action="store_true", help="fewer texts and prompts")
    reproduce.add_argument("--no-figures", action="store_true", help="skip the PDF/SVG export (needs Chromium)")
    reproduce.add_argument("--list", action="store_true", help="list the results and their default models")
    reproduce.add_argument("--batch-size", type=int, default=1,
                           help="texts or prompts per forward pass in the studies that trace many (the same numbers)")
    reproduce.add_argument("--quiet", action="store_true")
    reproduce.set_defaults(handler=cmd_reproduce)

    zoo = commands.add_parser("zoo", help="list the shipped models")
    zoo.add_argument("--json", action="store_true", help="print [{name, mechanism, task, metrics}] as JSON")
    zoo.add_argument("--ship", nargs=3, metavar=("RUN_DIR", "NAME", "PRESET"),
                     help="(maintainers) copy a finished training run into the package's zoo")
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
