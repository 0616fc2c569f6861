"""The ``repo-lens`` command (also ``python -m repo_lens.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from repo_lens.cli_args import (
    command_line_text,
    model_name,
    number_list,
    output_dir,
    output_file,
    positive_int,
    positive_number,
    read_text_file,
    seed_value,
    whole_number,
)
from repo_lens.errors import ContextLengthError, InputError, RepoLensError

if TYPE_CHECKING:
    from repo_lens.data.corpus_sources import Corpus
    from repo_lens.studies.study import Option, Study

DEBUG_VARIABLE = "REPO_LENS_DEBUG"


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise InputError("give either --text or --file, not both")
    if args.file is not None:
        return read_text_file(args.file)
    if args.text is None:
        raise InputError("nothing to trace: pass --text 'some text' or --file path.txt")
    return args.text


def cmd_trace(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.studies.report import layer_summary

    text = _read_text(args)
    lens = repo_lens.load(args.model, device=args.device, dtype=args.dtype, revision=args.revision)
    trace = lens.trace(text, truncate=args.truncate, allow_beyond_context=args.beyond_context)
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


def cmd_train(args: argparse.Namespace) -> int:
    from repo_lens.train import build_task, preset, train

    cfg = preset(args.preset, mechanism=args.mechanism, steps=args.steps, seed=args.seed, threads=args.threads,
                 position_init_std=args.position_init_std, position_lr_scale=args.position_lr_scale)
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


CORPUS_FLAGS = ("corpus", "file", "text_field", "id_field", "text_unit", "split", "limit", "sample", "samples",
                "window", "stride", "overlap")


def _analyze_corpus(args: argparse.Namespace, study: Study) -> Corpus | None:
    """The corpus of an ``analyze`` run, opened and counted before the model loads (None for a study that
    makes its own inputs, which refuses the corpus flags)."""
    from repo_lens.data.corpus_sources import Selection
    from repo_lens.studies.runner import prepare_corpus

    given = [name for name in CORPUS_FLAGS if getattr(args, name) is not None]
    if not study.reads_corpus:
        if given:
            raise InputError(f"--{given[0].replace('_', '-')} applies to studies that read a corpus, not "
                             f"{study.name}, which makes its own inputs; leave it out")
        return None
    if args.corpus is not None and args.file is not None:
        raise InputError("give either --corpus or --file (the same for one text file), not both")
    if args.sample is not None and args.samples is not None:
        raise InputError("give either --sample or --samples (its old spelling), not both")
    fields = {"text_field": args.text_field, "id_field": args.id_field, "text_unit": args.text_unit,
              "split": args.split}
    if args.file is None:
        corpus = prepare_corpus(args.corpus, study, **fields)
    elif Path(args.file).is_dir():
        raise InputError(f"--file {args.file} is a directory; give the path of a UTF-8 text file, or pass the folder "
                         "as --corpus")
    else:
        try:
            corpus = prepare_corpus(args.file, study, **fields)
        except InputError as error:
            raise InputError(f"--file {error}") from None
    Selection(corpus.count(), args.limit, args.sample if args.sample is not None else args.samples, args.seed)
    return corpus


def _study_options(args: argparse.Namespace, study: Study) -> dict:
    """The study's options given as flags (a built-in study's ``--NAME``) or as ``--study-option NAME=VALUE``."""
    from repo_lens.studies.registry import registered

    own = {option.name: option for option in study.options}
    values = {}
    for other in registered().values():
        for option in other.options:
            value = getattr(args, f"option_{option.name}", None)
            if value is not None and option.name not in own:
                raise InputError(f"{option.flag} applies to the {other.name} study, not {study.name}; leave it out")
            if value is not None:
                values[option.name] = value
    for text in args.study_option or ():
        name, equals, raw = text.partition("=")
        if not equals:
            raise InputError(f"--study-option {text!r}: write NAME=VALUE, e.g. --study-option chunk=32")
        if name.strip() not in own:
            raise InputError(f"study {study.name} has no option {name.strip()!r}; its options are: "
                             f"{', '.join(own) or 'none'}")
        values[name.strip()] = own[name.strip()].parse(raw)
    return values


def cmd_analyze(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.studies.distributed import load_placement, ranks_from_env
    from repo_lens.studies.registry import get_study
    from repo_lens.studies.runner import analyze

    args.context_flags = {"allow_beyond_context": "--beyond-context"}
    study = get_study(args.study, args.study_module or ())
    options = _study_options(args, study)
    corpus = _analyze_corpus(args, study)  # a bad corpus fails before the model loads
    ranks = ranks_from_env()  # torchrun / accelerate launch: this rank's share, on its own device(s)
    lens = repo_lens.load(args.model, revision=args.revision,
                          **load_placement(args.device, args.device_map, ranks, args.gpus_per_rank))
    settings = {"model": args.model, **({"revision": args.revision} if args.revision else {}),
                **({"study_modules": args.study_module} if args.study_module else {})}
    result = analyze(lens, study, corpus, out=args.out, options=options, window=args.window, stride=args.stride,
                     overlap=args.overlap, beyond_context=args.beyond_context, limit=args.limit,
                     sample=args.sample if args.sample is not None else args.samples, seed=args.seed,
                     shard_size=args.shard_size, batch_size=args.batch_size, progress=not args.quiet,
                     settings=settings)
    if not ranks.is_main:  # rank 0 writes the summary and reports
        return 0
    print(result.status(), file=sys.stderr)
    print(summary_json(result.summary))
    return 0


def summary_json(summary: dict) -> str:
    """What ``analyze`` prints on stdout: the run's summary as one whole JSON document, one key a line,
    leaving out the per-layer-and-head arrays (``*_by_layer_head``; summary.json has everything).

    >>> import json
    >>> text = summary_json({"auc_gold_by_layer_head": [[0.5, 0.6]], "auc_gold_by_layer": [0.55], "n_gaps_gold": 9})
    >>> print(text)
    {
     "auc_gold_by_layer": [0.55],
     "n_gaps_gold": 9
    }
    >>> json.loads(text)["n_gaps_gold"]
    9
    """
    import json

    rows = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in summary.items()
            if not key.endswith("by_layer_head")]
    return "{\n" + ",\n".join(rows) + "\n}" if rows else "{}"


def cmd_reproduce(args: argparse.Namespace) -> int:
    from repo_lens.studies.distributed import ranks_from_env
    from repo_lens.studies.reproductions import STUDIES, reproduce
    from repo_lens.studies.reproductions.common import figure_options_of

    if args.list:
        for name, study in STUDIES.items():
            print(f"{name:<20} {study.source}  [{', '.join(study.default_models)}]")
        return 0
    documents = reproduce(args.names or ["all"], args.out, models=args.model, quick=args.quick,
                          figures=not args.no_figures, progress=not args.quiet, batch_size=args.batch_size,
                          figure_options=figure_options_of(args))
    if not ranks_from_env().is_main:  # under torchrun rank 0 reports
        return 0
    for name, document in documents.items():
        print(f"\n## {name} ({STUDIES[name].source}) — {document['seconds']} s -> {args.out}/{name}/\n")
        print(document.get("markdown", ""))
    return 0


APP_SCRIPT = Path(__file__).resolve().with_name("app") / "streamlit_app.py"  # the script `repo-lens app` serves
APP_FLAGS = ("--server.address", "127.0.0.1", "--server.headless", "true")  # local only; no browser started


def app_command(extra: list[str]) -> list[str]:
    """The ``streamlit run`` command ``repo-lens app`` runs: the app on 127.0.0.1, then ``extra``
    (further ``streamlit run`` options, e.g. ``--server.port 8502``; a leading ``--`` is dropped).

    >>> command = app_command(["--", "--server.port", "8502"])
    >>> command[1:4], " ".join(command[5:])
    (['-m', 'streamlit', 'run'], '--server.address 127.0.0.1 --server.headless true --server.port 8502')
    """
    extra = extra[1:] if extra[:1] == ["--"] else extra
    return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *APP_FLAGS, *extra]


def cmd_app(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        raise RepoLensError('the app needs Streamlit, which is not installed; install it with: '
                            'pip install "repo_lens[app]"')
    command = app_command(args.extra)
    if os.name == "posix":
        os.execv(command[0], command)  # the server takes this process' place, so Ctrl-C and signals reach it
    import subprocess

    return subprocess.call(command)


def _add_model_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", required=True, type=model_name,
                         help="checkpoint directory, zoo:NAME or Hugging Face Hub id org/name")
    command.add_argument("--revision", default=None,
                         help="with a Hub id: branch, tag or commit hash (default: main); a gated or private "
                              "repository reads the token in HF_TOKEN or the saved Hugging Face login")


def _add_device_map_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--device-map", choices=["auto", "balanced", "sequential"], default=None,
                         help="spread a model too big for one GPU over this rank's GPUs (docs/big_checkpoints.md)")
    command.add_argument("--gpus-per-rank", type=positive_int, default=None,
                         help="with --device-map: GPUs per rank, rank r on GPUs r*K..r*K+K-1 of its node "
                              "(default: the node's GPUs divided among its ranks)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="repo-lens", description="Look at the positions language models learn.")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in (_add_trace_command, _add_tiny_command, _add_train_command, _add_analyze_command,
                        _add_reproduce_command, _add_app_command, _add_zoo_command):  # the order of --help
        add_command(commands)
    return parser


def _add_trace_command(commands: argparse._SubParsersAction) -> None:
    """``trace``: a text's per-layer position statistics, or the trace saved."""
    trace = commands.add_parser("trace", help="trace a text and print per-layer position statistics")
    _add_model_arguments(trace)
    trace.add_argument("--text", type=command_line_text, help="text to trace")
    trace.add_argument("--file", help="UTF-8 text file to trace")
    trace.add_argument("--device", default="auto", help="auto (CUDA + bf16 when present), cpu, cuda, cuda:N")
    trace.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: by device)")
    too_long = trace.add_mutually_exclusive_group()
    too_long.add_argument("--truncate", action="store_true", help="keep the first context-length tokens of a long text")
    too_long.add_argument("--beyond-context", action="store_true",
                          help="trace every token of a text longer than the model's context (extrapolation)")
    trace.add_argument("--per-head", action="store_true", help="one row per layer and head")
    trace.add_argument("--save", type=output_file, help="write the trace to this .safetensors file")
    trace.set_defaults(handler=cmd_trace,
                       context_flags={"truncate": "--truncate", "allow_beyond_context": "--beyond-context"})


def _add_tiny_command(commands: argparse._SubParsersAction) -> None:
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
    tiny.set_defaults(handler=cmd_tiny)


def _add_train_command(commands: argparse._SubParsersAction) -> None:
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
    train.set_defaults(handler=cmd_train)


def _add_analyze_command(commands: argparse._SubParsersAction) -> None:
    """``analyze``: a registered study over a whole corpus (or its own inputs), resumable."""
    from repo_lens.studies.registry import registered

    studies = "; ".join(f"{name}: {study.description}" for name, study in registered().items())
    analyze = commands.add_parser(
        "analyze", help="run a study over a whole corpus (windowed; resumable; Parquet records, JSON summary)",
        description="Run a study over every document of a corpus, cut into windows of the model's context "
                    "(docs/guide/corpus-studies.md). Records go to OUT/records/*.parquet, the summary with the "
                    "counts of documents analysed, skipped and cut to OUT/summary.json and stdout.")
    _add_model_arguments(analyze)
    analyze.add_argument("--study", required=True, help=f"the study: {studies}; or one registered by --study-module")
    analyze.add_argument("--study-module", action="append", metavar="MODULE",
                         help="import this module first (repeat): it registers studies of your own")
    analyze.add_argument("--study-option", action="append", metavar="NAME=VALUE",
                         help="an option of the study (repeat), e.g. chunk=32")
    analyze.add_argument("--out", required=True, type=output_dir, help="output directory; rerun to resume")
    _add_corpus_arguments(analyze)
    _add_study_option_flags(analyze)
    analyze.add_argument("--beyond-context", action="store_true",
                         help="allow inputs (windows, NIAH prompts) longer than the model's context (extrapolation)")
    analyze.add_argument("--shard-size", type=positive_int, default=None,
                         help="documents (or items) per Parquet shard, the unit of resume and of sharing among ranks "
                              "(default: the study's, 256 documents)")
    analyze.add_argument("--device", default="auto",
                         help="auto (CUDA + bf16 when present; under torchrun cuda:LOCAL_RANK), cpu, cuda, cuda:N")
    _add_device_map_arguments(analyze)
    analyze.add_argument("--batch-size", type=positive_int, default=1,
                         help="windows or prompts per forward pass (right-padded; the same results; not part of the "
                              "run's settings, so a run may resume with another)")
    analyze.add_argument("--quiet", action="store_true")
    analyze.set_defaults(handler=cmd_analyze)


def _add_corpus_arguments(analyze: argparse.ArgumentParser) -> None:
    """``analyze``'s corpus, windows and explicit selection."""
    corpus = analyze.add_argument_group("corpus (studies that read one)")
    corpus.add_argument("--corpus", help="a .txt/.md (a document per blank-line paragraph), .jsonl, .parquet file, a "
                                         "folder or glob of them, a dataset saved with datasets' save_to_disk, or "
                                         "brown / peoples-daily (default: the study's)")
    corpus.add_argument("--file", help="one UTF-8 text file (the same as --corpus FILE)")
    corpus.add_argument("--text-field", help="the text field of JSON lines, Parquet or a saved dataset (default: text)")
    corpus.add_argument("--id-field", help="a field that names each document (default: FILE#ROW, FILE:LINE)")
    corpus.add_argument("--text-unit", choices=["paragraph", "file"],
                        help="plain text: a document per blank-line paragraph (default) or per file")
    corpus.add_argument("--split", help="the split of a saved DatasetDict (needed when it has several)")
    corpus.add_argument("--window", type=positive_int, help="tokens per window (default: the model's context)")
    corpus.add_argument("--stride", type=positive_int, help="tokens between window starts (default: the window)")
    corpus.add_argument("--overlap", type=whole_number(0), help="tokens consecutive windows share (instead of --stride)")
    corpus.add_argument("--limit", type=positive_int, help="analyse only the first N documents")
    corpus.add_argument("--sample", type=positive_int, help="analyse N documents drawn at random (see --seed)")
    corpus.add_argument("--samples", type=positive_int, help="old spelling of --sample")
    corpus.add_argument("--seed", type=seed_value, default=0, help="the seed of --sample (default 0)")


def _add_study_option_flags(analyze: argparse.ArgumentParser) -> None:
    """A flag per option of the built-in studies (``--lengths``, ``--chunk``, ...), from the registry."""
    from repo_lens.studies.registry import registered

    for study in registered().values():
        group = analyze.add_argument_group(f"{study.name} options") if study.options else None
        for option in study.options:
            if option.kind is bool:
                group.add_argument(option.flag, dest=f"option_{option.name}", action="store_true", default=None,
                                   help=option.help)
                continue
            try:
                group.add_argument(option.flag, dest=f"option_{option.name}", type=_option_type(option), default=None,
                                   help=f"{option.help} (default: {option.default})")
            except argparse.ArgumentError:  # a flag another study or analyze has: --study-option NAME=VALUE sets it
                continue


def _option_type(option: Option) -> Callable[[str], Any]:
    """The argparse type of a study option's flag: the command line's own checks where they fit."""
    if option.many and option.kind in (int, float):
        return number_list(option.kind, option.low, option.high, option.example or "1,2")
    if option.kind is int and option.low is not None:
        return whole_number(int(option.low), None if option.high is None else int(option.high))

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except InputError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _add_reproduce_command(commands: argparse._SubParsersAction) -> None:
    """``reproduce``: the sources' tables and figures."""
    reproduce = commands.add_parser("reproduce", help="regenerate the sources' tables and figures (JSON + PDF/SVG)")
    reproduce.add_argument("names", nargs="*", help="results to regenerate (default: all); see --list")
    reproduce.add_argument("--out", default="build/reproduce", type=output_dir,
                           help="output directory (one folder per result)")
    reproduce.add_argument("--model", action="append", type=model_name,
                           help="run on these models instead of the defaults (repeat)")
    reproduce.add_argument("--quick", action="store_true", help="fewer texts and prompts")
    reproduce.add_argument("--no-figures", action="store_true", help="skip the PDF/SVG export (needs Chromium)")
    reproduce.add_argument("--list", action="store_true", help="list the results and their default models")
    reproduce.add_argument("--batch-size", type=positive_int, default=1,
                           help="texts or prompts per forward pass in the studies that trace many (the same numbers)")
    reproduce.add_argument("--quiet", action="store_true")
    from repo_lens.studies.reproductions.common import add_figure_arguments

    add_figure_arguments(reproduce)  # --layout, --aspect, --font-pt, --font
    reproduce.set_defaults(handler=cmd_reproduce)


def _add_app_command(commands: argparse._SubParsersAction) -> None:
    """``app``: the Streamlit app."""
    app = commands.add_parser("app", help="serve the Streamlit app on 127.0.0.1:8501 (needs repo_lens[app])",
                              description="Serve the Streamlit app on 127.0.0.1. Further arguments go to "
                                          "`streamlit run`, e.g. repo-lens app --server.port 8502.")
    app.set_defaults(handler=cmd_app, passthrough=True)


def _add_zoo_command(commands: argparse._SubParsersAction) -> None:
    """``zoo``: the shipped models."""
    zoo = commands.add_parser("zoo", help="list the shipped models")
    zoo.add_argument("--json", action="store_true", help="print [{name, mechanism, task, metrics}] as JSON")
    zoo.add_argument("--ship", nargs=3, metavar=("RUN_DIR", "NAME", "PRESET"),
                     help="(maintainers) copy a finished training run into the package's zoo")
    zoo.set_defaults(handler=cmd_zoo)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one InputError line (``main`` prints it) instead of argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{message} (see {self.prog} --help)")


def _error_line(error: BaseException, args: argparse.Namespace | None) -> str:
    if isinstance(error, ContextLengthError):
        return error.explain(getattr(args, "context_flags", {}))
    if isinstance(error, RepoLensError):
        return str(error)
    if isinstance(error, UnicodeError):
        return f"text that is not valid UTF-8 ({error}); pass UTF-8 text and files"
    where = f"{error.filename}: " if getattr(error, "filename", None) else ""
    return f"{where}{error.strerror or error}; check the path, its permissions and the free space"


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the ``repo-lens`` command; bad input is one ``repo-lens: error: ...`` line on stderr and exit code 2,
    an unexpected failure one ``repo-lens: internal error: ...`` line and exit code 3 (the traceback with
    REPO_LENS_DEBUG=1).

    >>> main(["tiny", "/tmp/unused", "--layers", "0"])
    2
    """
    args = None
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "passthrough", False):  # only `app` hands unknown arguments on (to streamlit)
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return args.handler(args)
    except (RepoLensError, OSError, UnicodeError) as error:
        print(f"repo-lens: error: {_one_line(_error_line(error, args))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("repo-lens: interrupted (analyze and train resume where they stopped when rerun)", file=sys.stderr)
        return 130
    except Exception as error:
        if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            raise
        print(f"repo-lens: internal error: {type(error).__name__}: {_one_line(str(error))} (please report; rerun with "
              f"{DEBUG_VARIABLE}=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
