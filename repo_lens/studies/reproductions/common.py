"""Shared plumbing of the reproduction scripts: arguments, held-out text, JSON and figure output."""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repo_lens.atomic import atomic_write_bytes
from repo_lens.errors import InputError

FIGURE_FORMATS = (".pdf", ".svg")
DEFAULT_FIGURE_LAYOUT = "two-column"
_figure_options: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("figure_options", default=None)


@contextlib.contextmanager
def figure_options(options: Mapping[str, Any] | None) -> Iterator[None]:
    """Export the studies' figures run inside with these :func:`repo_lens.plots.export` options (``layout``,
    ``aspect``, ``font_pt``, ``font``; None values are left out), checked first."""
    chosen = {key: value for key, value in (options or {}).items() if value is not None}
    unknown = set(chosen) - {"layout", "aspect", "font_pt", "font"}
    if unknown:
        raise InputError(f"unknown figure options {sorted(unknown)}; use layout, aspect, font_pt and font")
    from repo_lens.plots.paper import paper_target

    paper_target(chosen.get("layout", DEFAULT_FIGURE_LAYOUT), aspect=chosen.get("aspect"),
                 font_pt=chosen.get("font_pt", 8.0), font=chosen.get("font", "sans"))
    token = _figure_options.set(chosen)
    try:
        yield
    finally:
        _figure_options.reset(token)


def parser(description: str, default_models: Sequence[str]) -> argparse.ArgumentParser:
    arguments = argparse.ArgumentParser(description=description)
    arguments.add_argument("--model", action="append",
                           help=f"zoo name or checkpoint directory (repeat); default: {' '.join(default_models)}")
    arguments.add_argument("--out", required=True, help="output directory (results.json + PDF/SVG figures)")
    arguments.add_argument("--quick", action="store_true", help="fewer texts / prompts (what `reproduce all` uses)")
    arguments.add_argument("--no-figures", action="store_true", help="skip the PDF/SVG export (needs Chromium)")
    arguments.add_argument("--quiet", action="store_true", help="no progress bars")
    add_figure_arguments(arguments)
    return arguments


def add_figure_arguments(arguments: argparse.ArgumentParser) -> None:
    """--layout, --aspect, --font-pt and --font: the size and type of the exported figures."""
    arguments.add_argument("--layout", default=None,
                           help=f"figure width: a venue preset (icml-column, icml-text, neurips, iclr, acl-column, "
                                f"acl-text, one-column, two-column) or a width such as 3.3in, 240pt, 8.5cm "
                                f"(default {DEFAULT_FIGURE_LAYOUT})")
    arguments.add_argument("--aspect", type=float, default=None, help="figure height / width (default: what each figure needs)")
    arguments.add_argument("--font-pt", type=float, default=None, help="axis-title size in points (default 8)")
    arguments.add_argument("--font", choices=["sans", "serif", "cm"], default=None,
                           help="sans (default), serif (Times) or cm (Computer Modern)")


def figure_options_of(args: argparse.Namespace) -> dict[str, Any]:
    return {"layout": args.layout, "aspect": args.aspect, "font_pt": args.font_pt, "font": args.font}


def script_main(run: Callable[..., dict], description: str, default_models: Sequence[str],
                argv: Sequence[str] | None = None) -> int:
    """``python analyses/NAME.py --out DIR [--model M ...] [--quick]``: run, write, print the table."""
    args = parser(description, default_models).parse_args(argv)
    with figure_options(figure_options_of(args)):
        result = run(Path(args.out), args.model or list(default_models), quick=args.quick,
                     figures=not args.no_figures, progress=not args.quiet)
    print(result.get("markdown", ""))
    return 0


def held_out_documents(count: int) -> list[str]:
    """The first ``count`` held-out English documents, then as many Chinese ones, of the zoo's
    bilingual split (never trained on)."""
    from repo_lens.data.bilingual import bilingual_splits

    splits = bilingual_splits()
    return splits["en"][1][:count] + splits["zh"][1][:count]


def save_study(out: Path, document: dict[str, Any], figures: dict[str, Any] | None = None,
               table: str = "table.md") -> dict[str, Any]:
    """Write a study's figures (PDF + SVG; their names go into ``document["figures"]``), its
    ``results.json`` and its Markdown table (``document["markdown"]``); returns ``document``.
    Figures that cannot be rendered (no Chromium) are listed with the reason under
    ``document["figures_not_rendered"]``; the JSON and the table are written all the same."""
    if figures is not None:
        document["figures"], not_rendered = write_figures(out, figures)
        if not_rendered:
            document["figures_not_rendered"] = not_rendered
            warnings.warn(f"{len(not_rendered)} figure file(s) in {out} not rendered: "
                          f"{next(iter(not_rendered.values()))}", stacklevel=2)
    write_json(out, "results.json", document)
    write_text(out, table, document["markdown"] + "\n")
    return document


NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][0-9.eE+-]*(?:,\s*-?[0-9][0-9.eE+-]*)*)\s*\]")


def write_json(out: Path, name: str, document: dict[str, Any]) -> Path:
    """``document`` as indented JSON, each list of plain numbers on one line (per-prompt scores stay short).

    >>> import tempfile
    >>> path = write_json(Path(tempfile.mkdtemp()), "r.json", {"hits": [1, 0, 1], "n": {"value": 0.5}})
    >>> print(path.read_text())
    {
      "hits": [1, 0, 1],
      "n": {
        "value": 0.5
      }
    }
    """
    text = json.dumps(_plain(document), indent=2, ensure_ascii=False)
    text = NUMBER_LIST.sub(lambda match: "[" + ", ".join(re.split(r",\s*", match.group(1).strip())) + "]", text)
    atomic_write_bytes(out / name, text.encode())
    return out / name


def write_text(out: Path, name: str, text: str) -> Path:
    atomic_write_bytes(out / name, text.encode())
    return out / name


def write_figures(out: Path, figures: dict[str, Any], layout: str | None = None) -> tuple[list[str], dict[str, str]]:
    """Each figure as vector PDF and SVG sized for a paper (``layout``, else the :func:`figure_options`
    in force, else two-column); returns the file names written and, for each file that could not be
    rendered, the reason (the :class:`ExportError` message)."""
    from repo_lens.plots import ExportError, PaperStyle, export

    options = {"layout": DEFAULT_FIGURE_LAYOUT, **(_figure_options.get() or {}), **({"layout": layout} if layout else {})}
    paper = PaperStyle(**{key: value for key, value in options.items() if key != "layout"})
    names, not_rendered = [], {}
    for stem, figure in figures.items():
        for suffix in FIGURE_FORMATS:
            try:
                names.append(export(figure, out / f"{stem}{suffix}", layout=options["layout"], paper=paper).name)
            except ExportError as error:
                not_rendered[f"{stem}{suffix}"] = str(error)
    return names, not_rendered


def stem(model: str) -> str:
    return model.replace("zoo:", "").replace("/", "_").strip("_")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
