"""``repo-lens analyze``: a registered study over a whole corpus (or its own inputs), resumable."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from repo_lens.cli_args import number_list, output_dir, positive_int, seed_value, whole_number
from repo_lens.cli.model_arguments import add_device_map_arguments, add_model_arguments
from repo_lens.errors import InputError

if TYPE_CHECKING:
    from repo_lens.data.corpus_sources import Corpus
    from repo_lens.studies.study import Option, Study

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


def run(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.studies.distributed import load_placement, ranks_from_env
    from repo_lens.studies.registry import get_study
    from repo_lens.data.windows import WindowSpec
    from repo_lens.studies.runner import RunOptions, analyze

    args.context_flags = {"allow_beyond_context": "--beyond-context"}
    study = get_study(args.study, args.study_module or ())
    options = _study_options(args, study)
    corpus = _analyze_corpus(args, study)  # a bad corpus fails before the model loads
    ranks = ranks_from_env()  # torchrun / accelerate launch: this rank's share, on its own device(s)
    lens = repo_lens.load(args.model, revision=args.revision, graft=args.graft,
                          **load_placement(args.device, args.device_map, ranks, args.gpus_per_rank))
    settings = {"model": args.model, **({"revision": args.revision} if args.revision else {}),
                **({"graft": args.graft} if args.graft else {}),
                **({"study_modules": args.study_module} if args.study_module else {})}
    windows = WindowSpec(size=args.window, stride=args.stride, overlap=args.overlap,
                         beyond_context=args.beyond_context)
    run = RunOptions(limit=args.limit, sample=args.sample if args.sample is not None else args.samples, seed=args.seed,
                     shard_size=args.shard_size, batch_size=args.batch_size, progress=not args.quiet,
                     settings=settings, figures=not args.no_figures)
    result = analyze(lens, study, corpus, out=args.out, options=options, windows=windows, run=run)
    if not ranks.is_main:  # rank 0 writes the summary and reports
        return 0
    print(result.status(), file=sys.stderr)
    print(summary_json(cast(dict, result.summary)))  # rank 0 has the summary
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


def add(commands: argparse._SubParsersAction) -> None:
    """``analyze``: a registered study over a whole corpus (or its own inputs), resumable."""
    from repo_lens.studies.registry import registered

    studies = "; ".join(f"{name}: {study.description}" for name, study in registered().items())
    analyze = commands.add_parser(
        "analyze", help="run a study over a whole corpus (windowed; resumable; Parquet records, JSON summary)",
        description="Run a study over every document of a corpus, cut into windows of the model's context "
                    "(docs/guide/corpus-studies.md). Records go to OUT/records/*.parquet, the summary with the "
                    "counts of documents analysed, skipped and cut to OUT/summary.json and stdout.")
    add_model_arguments(analyze)
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
                              "(default: the study's, 256 documents, or under torchrun fewer, so that every rank gets a share; a "
                              "resumed run keeps the size it started with)")
    analyze.add_argument("--device", default="auto",
                         help="auto (CUDA + bf16 when present; under torchrun cuda:LOCAL_RANK), cpu, cuda, cuda:N")
    add_device_map_arguments(analyze)
    analyze.add_argument("--batch-size", type=positive_int, default=1,
                         help="windows or prompts per forward pass (right-padded; the same results; not part of the "
                              "run's settings, so a run may resume with another)")
    analyze.add_argument("--no-figures", action="store_true",
                         help="skip the study's PDF/SVG figures, for studies that draw some (they need Chromium)")
    analyze.add_argument("--quiet", action="store_true")
    analyze.set_defaults(handler=run)


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
            assert group is not None  # made for a study with options
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
        return number_list(option.kind, cast(float, option.low), option.high, option.example or "1,2")
    if option.kind is int and option.low is not None:
        return whole_number(int(option.low), None if option.high is None else int(option.high))

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except InputError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse
