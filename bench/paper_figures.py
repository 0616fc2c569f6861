"""Paper figures at one column: per figure builder, the smallest and largest font in points and the
number of overlapping text pairs, measured in Chromium on the exported SVG.

Target: every builder at 3.25 in has text of 5–10 pt and no two text elements
overlapping. Two inputs: a 250-byte trace of zoo:bytes1k-repo (4 layers × 4 heads), as a new user
would make it, and a synthetic trace of the published shape (16 layers × 16 heads, 250 tokens).

    .venv/bin/python bench/paper_figures.py [--layout one-column] [--font sans] [--inputs zoo synthetic] [--show 3]

Before and after the paper re-layout (same command; layout one-column): the smallest font went from
7.2–8.0 pt to 6.5–7.0 pt, the largest from up to 12 pt to at most 8.8 pt, the overlapping text pairs
from up to 6,775 (spaced tokens, 16 layers) to 0 in every figure, and the plot's share of the width
from 21–80 % to 51–92 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_lens.plots import PaperStyle, export, start_export_server  # noqa: E402
from repo_lens.plots.gallery import EXAMPLE_TEXT, example_figures, synthetic_trace  # noqa: E402
from repo_lens.plots.measure import measure_svgs, overlapping_pairs  # noqa: E402

MIN_PT, MAX_PT = 5.0, 10.0


def zoo_trace(n_bytes: int = 250):
    import repo_lens

    text = (EXAMPLE_TEXT * 4).encode("utf-8")[:n_bytes].decode("utf-8", errors="ignore")
    return repo_lens.load("zoo:bytes1k-repo", device="cpu").trace(text)


def inputs(names: list[str]) -> dict[str, object]:
    out = {}
    if "zoo" in names:
        out["zoo:bytes1k-repo 4×4×250"] = zoo_trace()
    if "synthetic" in names:
        out["synthetic 16×16×250"] = synthetic_trace(16, 16, 250)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="one-column", help="paper layout passed to export (default one-column, 3.25 in)")
    parser.add_argument("--font", default="sans", choices=["sans", "serif", "cm"], help="font family (default sans)")
    parser.add_argument("--inputs", nargs="+", default=["zoo", "synthetic"], choices=["zoo", "synthetic"])
    parser.add_argument("--show", type=int, default=0, help="print this many overlapping pairs per figure")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)

    start_export_server()
    rows, svgs = [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for input_name, trace in inputs(args.inputs).items():
            for name, figure in example_figures(trace).items():
                path = export(figure, Path(folder) / f"{len(svgs)}.svg", layout=args.layout,
                              paper=PaperStyle(font=args.font))
                svgs.append(path.read_bytes())
                rows.append({"input": input_name, "builder": name})
    measured = measure_svgs(svgs)
    print(f"{len(rows)} figures exported at layout={args.layout!r} and measured in {time.perf_counter() - started:.0f} s\n")
    print("| input | builder | size (in) | plot width | smallest pt | largest pt | texts | overlapping pairs |")
    print("|---|---|---|---|---|---|---|---|")
    failing = 0
    for row, svg in zip(rows, measured):
        pairs = overlapping_pairs(svg.boxes)
        row.update(width_in=round(svg.width_px / 96, 2), height_in=round(svg.height_px / 96, 2),
                   plot_share=round(svg.plot_share, 2), smallest_pt=svg.smallest_pt, largest_pt=svg.largest_pt, texts=len(svg.boxes), overlapping=len(pairs))
        ok = MIN_PT <= svg.smallest_pt and svg.largest_pt <= MAX_PT and not pairs
        failing += not ok
        print(f"| {row['input']} | {row['builder']} | {row['width_in']:.2f} × {row['height_in']:.2f} | {svg.plot_share:.0%} | "
              f"{svg.smallest_pt:.1f} | {svg.largest_pt:.1f} | {len(svg.boxes)} | {len(pairs)} |")
        for a, b in pairs[:args.show]:
            print(f"    {a.kind}:{a.text[:30]!r} ({a.font_pt} pt) over {b.kind}:{b.text[:30]!r} ({b.font_pt} pt)")
    print(f"\n{len(rows) - failing} of {len(rows)} figures meet the target (text {MIN_PT:g}–{MAX_PT:g} pt, no overlaps)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
