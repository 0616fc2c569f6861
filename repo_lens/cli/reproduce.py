"""``repo-lens reproduce``: the papers' tables and figures, regenerated."""

from __future__ import annotations

import argparse

from repo_lens.cli_args import model_name, output_dir, positive_int


def run(args: argparse.Namespace) -> int:
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


def add(commands: argparse._SubParsersAction) -> None:
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
    reproduce.set_defaults(handler=run)
