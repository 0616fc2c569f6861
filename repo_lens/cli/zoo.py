"""``repo-lens zoo``: the shipped models, as a table or JSON."""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    import json

    from repo_lens.errors import InputError
    from repo_lens.zoo import zoo_entries

    if args.ship and args.ship_delta:
        raise InputError("--ship and --ship-delta ship one run each; give one of them")
    if args.evaluation is not None and not args.ship_delta:
        raise InputError("--evaluation goes with --ship-delta (its numbers go into that model's card); "
                         "give --ship-delta RUN_DIR NAME too, or leave --evaluation out")
    if args.force and not args.ship_delta:
        raise InputError("--force goes with --ship-delta (it replaces an existing zoo model); give --ship-delta "
                         "RUN_DIR NAME too, or leave --force out")
    if args.storage is not None and not args.ship:
        raise InputError("--storage goes with --ship (it sets the precision of the shipped weights); give --ship "
                         "RUN_DIR NAME PRESET too, or leave --storage out")
    if args.json and (args.ship or args.ship_delta):
        raise InputError("--json lists the zoo; it does not go with --ship or --ship-delta")
    if args.ship:
        from repo_lens.zoo.ship import ship

        run_dir, name, preset_name = args.ship
        print(f"shipped {run_dir} as zoo:{name} -> {ship(run_dir, name, preset_name, storage=args.storage)}")
        return 0
    if args.ship_delta:
        from repo_lens.zoo.ship_delta import ship_delta

        run_dir, name = args.ship_delta
        target = ship_delta(run_dir, name, args.evaluation, force=args.force)
        print(f"shipped {run_dir} as zoo:{name} -> {target}")
        return 0

    entries = zoo_entries()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(zoo_table(entries) if entries else "no zoo models are shipped in this version")
    return 0


HEADLINE_METRICS = ("val_bpb", "acc_in_domain", "acc_out_of_domain", "error_in_distribution", "error_ood_sparse",
                    "held_out_bits_per_token", "niah", "fact")


def zoo_table(entries: list[dict[str, Any]]) -> str:
    """The zoo as a plain-text table: a header, a rule, one row per model, columns as wide as their text.

    >>> print(zoo_table([{"name": "bytes-post-lpi-resid", "task": "bytes", "mechanism": "lpi-resid",
    ...                   "metrics": {"val_bpb": 2.1234, "steps": 900}},
    ...                  {"name": "reversal-repo", "task": "reversal", "mechanism": "repo",
    ...                   "metrics": {"acc_in_domain": 1.0, "acc_out_of_domain": 0.862}}]))
    model                     task      mechanism  metrics
    ------------------------  --------  ---------  --------------------------------------------
    zoo:bytes-post-lpi-resid  bytes     lpi-resid  val_bpb 2.123
    zoo:reversal-repo         reversal  repo       acc_in_domain 1.000, acc_out_of_domain 0.862
    """
    header = ["model", "task", "mechanism", "metrics"]
    rows = [[f"zoo:{entry['name']}", str(entry.get("task") or "-"), str(entry.get("mechanism") or "-"),
             _metrics_cell(entry)] for entry in entries]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    lines = [header, ["-" * width for width in widths], *rows]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip() for cells in lines)

def _metrics_cell(entry: dict[str, Any]) -> str:
    """The headline metrics of a row, or what is wrong with a broken entry."""
    if entry.get("error"):
        return f"cannot be read: {entry['error']}"
    metrics = entry.get("metrics") or {}
    return ", ".join(f"{key} {metrics[key]:.3f}" for key in HEADLINE_METRICS
                     if isinstance(metrics.get(key), (int, float)) and not isinstance(metrics.get(key), bool))


def add(commands: argparse._SubParsersAction) -> None:
    """``zoo``: the shipped models."""
    zoo = commands.add_parser("zoo", help="list the shipped models")
    zoo.add_argument("--json", action="store_true", help="print [{name, mechanism, task, metrics}] as JSON")
    zoo.add_argument("--ship", nargs=3, metavar=("RUN_DIR", "NAME", "PRESET"),
                     help="(maintainers) copy a finished training run, or one of its snapshots/step_N folders, "
                          "into the package's zoo")
    zoo.add_argument("--storage", default=None, choices=("int8", "int7", "int6"),
                     help="with --ship: store each 2-D weight as int8 codes in ±127 (int8), ±63 (int7) or ±31 (int6) "
                          "with a bfloat16 scale per row; the card gives the held-out metrics before and after")
    zoo.add_argument("--ship-delta", nargs=2, metavar=("RUN_DIR", "NAME"),
                     help="(maintainers) copy a finished `repo-lens train --base` run into the zoo")
    zoo.add_argument("--evaluation", default=None, metavar="SUMMARY_JSON",
                     help="with --ship-delta: the evaluation summary whose numbers go into the card")
    zoo.add_argument("--force", action="store_true",
                     help="with --ship-delta: replace a zoo model of the same name (refused otherwise)")
    zoo.set_defaults(handler=run)
