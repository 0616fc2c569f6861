"""Every public figure builder at one column and at full width of a two-column paper (ICML's 3.25 in and
6.75 in), as exported for a paper: a vector PDF and, beside it, a PNG, into docs/gallery/, and one
page showing them all, docs/gallery.md.

The figures are drawn from a 250-byte trace of zoo:bytes1k-repo (4 layers × 4 heads, RePo in layers 2
and 3), as a new user would make it; the spaced-token figure is drawn a second time from a synthetic
trace of the published model's shape (16 layers × 16 heads). The attention-mass, band, attention-split,
character-spacing and drift figures use illustrative inputs (they need a model run, not a trace).

    python docs/gallery.py [--dpi 150]        # needs Chromium (make browser); about 3 minutes
    python docs/gallery.py --only band_usage_figure char_spacing_figure   # export these rows only (the page: all)
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repo_lens.plots import PAPER_PRESETS, export, spaced_tokens_figure, start_export_server  # noqa: E402
from repo_lens.plots.gallery import EXAMPLE_TEXT, example_figures, synthetic_trace  # noqa: E402

OUT = ROOT / "docs" / "gallery"
PAGE = ROOT / "docs" / "gallery.md"
WIDTHS = {"one column": "icml-column", "full width": "icml-text"}
MODEL = "zoo:bytes1k-repo"


def figures() -> dict[str, object]:
    import repo_lens

    text = (EXAMPLE_TEXT * 4).encode("utf-8")[:250].decode("utf-8", errors="ignore")
    trace = repo_lens.load(MODEL, device="cpu").trace(text)
    out = example_figures(trace)
    out["spaced_tokens_figure (16 layers)"] = spaced_tokens_figure(synthetic_trace(16, 16, 250), head=0)
    return out


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def small_png(data: bytes, path: Path) -> None:
    """The PNG as a palette image (a few hundred colours are plenty for these figures)."""
    from PIL import Image

    Image.open(io.BytesIO(data)).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dpi", type=int, default=150, help="PNG resolution (the PDFs are vector)")
    parser.add_argument("--only", nargs="+", metavar="BUILDER", default=None,
                        help="export only these builders' rows (e.g. band_usage_figure); the page lists every row")
    args = parser.parse_args(argv)
    drawn = figures()
    unknown = sorted(set(args.only or ()) - {name.split(" ")[0] for name in drawn})
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: not a builder of the gallery; pick from "
                     f"{', '.join(sorted({name.split(' ')[0] for name in drawn}))}")
    OUT.mkdir(parents=True, exist_ok=True)
    start_export_server()
    started = time.perf_counter()
    rows = []
    for name, figure in drawn.items():
        cells = []
        for label, layout in WIDTHS.items():
            stem = f"{slug(name)}-{layout}"
            if args.only is None or name.split(" ")[0] in args.only:
                export(figure, OUT / f"{stem}.pdf", layout=layout)
                png = export(figure, OUT / f"{stem}.png", layout=layout, dpi=args.dpi)
                small_png(png.read_bytes(), png)
            cells.append(f"[![{name}, {label}](gallery/{stem}.png)](gallery/{stem}.pdf)")
        rows.append(f"| `{name.split(' ')[0]}`{name[len(name.split(' ')[0]):]} | {cells[0]} | {cells[1]} |")
        print(f"{name}: {time.perf_counter() - started:.0f} s")
    PAGE.write_text(page(rows, args.dpi), encoding="utf-8")
    print(f"{len(rows)} figures × {len(WIDTHS)} widths -> {OUT.relative_to(ROOT)}/, {PAGE.relative_to(ROOT)}")
    return 0


def page(rows: list[str], dpi: int) -> str:
    widths = ", ".join(f"{label} `{layout}` ({PAPER_PRESETS[layout].width_in:g} in)" for label, layout in WIDTHS.items())
    return f"""# Figure gallery

Every public figure builder of `repo_lens.plots`, exported for a paper with
`repo_lens.plots.export(fig, "fig.pdf", layout=...)` at {widths}: 8-point axis titles, 7-point tick
labels and legends, 6.5-point labels in the plot, DejaVu Sans. Click a picture for its vector PDF
(fonts embedded); the pictures are {dpi}-dpi PNGs of the same files. Made by `python docs/gallery.py`
from a 250-byte trace of `{MODEL}` (4 layers × 4 heads); the last row is the spaced-token figure of
a trace of the published model's shape (16 layers × 16 heads, synthetic positions). The
attention-mass, band-usage, attention-split, character-spacing and category-drift figures show
illustrative numbers of the shape their analyses return (they need a model run, not a trace).

Other widths: the presets `neurips` and `iclr` (5.5 in), `acl-column` (7.7 cm) and `acl-text` (16 cm),
or any width with a unit (`layout="3.3in"`, `"240pt"`, `"8.5cm"`); `font="serif"` (Times) or `"cm"`
(Computer Modern) to match the body text, `font_pt=9` for larger type, `aspect=0.5` for a fixed height.

| builder | one column | full width |
|---|---|---|
""" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
