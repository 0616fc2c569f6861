"""Paper PDFs as a reviewer reads them: per figure builder, the exported PDF's page, the characters of the
figure it cuts (lost, outside the page or clipped), its smallest and largest text in points, its fonts,
and how far apart in lightness (ΔL*, CIE L*) the figure's classes print, read from the PDF with PyMuPDF.

Input: a 250-byte trace of zoo:bytes1k-repo (4 layers × 4 heads), as the gallery draws it. The stated
sizes are the preset's: axis titles ``font_pt`` (8), ticks and legends 7, text in the plot 6.5 pt.

    .venv/bin/python bench/paper_pdf.py [--layout icml-column] [--font sans|serif|cm] [--json out.json]

Classes are the legend's entries and the steps of a stepped colour scale; "ΔL*" is the smallest
difference between two of them (≥ 20 tells them apart in greyscale), "scale" whether each continuous
colour scale's lightness is monotone in the value, "empty band" the tallest band across the page outside
the plotting area that holds nothing, as a share of the height.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from plotly.colors import get_colorscale, sample_colorscale  # noqa: E402

from repo_lens.plots import (PaperStyle, export, paper_figure, position_scatter_figure,  # noqa: E402
                             start_export_server)
from repo_lens.plots.gallery import EXAMPLE_TEXT, example_figures, synthetic_trace  # noqa: E402
from repo_lens.plots.pdf_measure import largest_empty_band, plot_rows, read_pdf, svg_text  # noqa: E402
from repo_lens.plots.style import lightness  # noqa: E402


def zoo_trace(n_bytes: int = 250):
    import repo_lens

    text = (EXAMPLE_TEXT * 4).encode("utf-8")[:n_bytes].decode("utf-8", errors="ignore")
    return repo_lens.load("zoo:bytes1k-repo", device="cpu").trace(text)


def class_colors(fig) -> dict[str, str]:
    """The figure's classes (legend entries, steps of a stepped colour scale) and their colours."""
    out: dict[str, str] = {}
    for trace in fig.data:
        if trace.type == "heatmap" and isinstance(trace.colorscale, tuple) and _stepped(trace.colorscale):
            for index, (_, color) in enumerate(trace.colorscale[::2]):
                names = trace.colorbar.ticktext or ()
                out[str(names[index]) if index < len(names) else f"step {index}"] = color
            continue
        if trace.showlegend is False or not trace.name or trace.type == "heatmap":
            continue
        marker = getattr(trace, "marker", None)
        line = getattr(trace, "line", None)
        color = marker.color if marker is not None and isinstance(marker.color, str) else None
        color = color or (line.color if line is not None and isinstance(line.color, str) else None)
        if color and color not in out.values():  # one class per colour (panels repeat their legend)
            out[trace.name.split(": ")[-1]] = color
    return out


def _stepped(scale) -> bool:
    return len(scale) % 2 == 0 and all(scale[i][1] == scale[i + 1][1] for i in range(0, len(scale), 2))


def continuous_scales(fig) -> list:
    scales = [trace.colorscale for trace in fig.data if trace.type == "heatmap" and not _stepped(trace.colorscale or ())]
    if fig.layout.coloraxis.colorscale:
        scales.append(fig.layout.coloraxis.colorscale)
    return [scale for scale in scales if scale]


def monotone(scale) -> bool:
    scale = get_colorscale(scale) if isinstance(scale, str) else [list(step) for step in scale]
    values = [lightness(color) for color in sample_colorscale(scale, list(np.linspace(0, 1, 65)))]
    steps = np.diff(values)
    return bool((steps >= -0.5).all() or (steps <= 0.5).all())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="icml-column", help="paper layout passed to export (default icml-column)")
    parser.add_argument("--font", default="sans", choices=["sans", "serif", "cm"])
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument("--scatter-heads", type=int, nargs="*", default=[], metavar="N",
                        help="also print the empty band of the all-heads scatter of a synthetic trace with N heads")
    args = parser.parse_args(argv)
    start_export_server()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for name, figure in example_figures(zoo_trace()).items():
            laid_out = paper_figure(figure, args.layout, font=args.font)
            expected = svg_text(export(laid_out, Path(folder) / "f.svg").read_bytes())
            data = export(figure, Path(folder) / "f.pdf", layout=args.layout,
                          paper=PaperStyle(font=args.font)).read_bytes()
            pdf = read_pdf(data, expected)
            colors = class_colors(laid_out)
            gaps = [abs(lightness(a) - lightness(b)) for a, b in itertools.combinations(colors.values(), 2)]
            scales = continuous_scales(laid_out)
            rows.append({"builder": name, "page_pt": [round(pdf.width_pt, 1), round(pdf.height_pt, 1)],
                         "cut": pdf.cut, "cut_chars": pdf.missing + pdf.outside + pdf.clipped,
                         "chars": len(expected), "smallest_pt": pdf.smallest_pt, "largest_pt": pdf.largest_pt,
                         "fonts": sorted({f"{font.name.split('+')[-1]} ({font.type}, {font.embedded})" for font in pdf.fonts}),
                         "classes": {key: round(lightness(value)) for key, value in colors.items()},
                         "min_delta_l": round(min(gaps), 1) if gaps else None,
                         "scales_monotone": [monotone(scale) for scale in scales],
                         "empty_band": round(largest_empty_band(data, plot_rows(laid_out)), 3)})
    print(f"{len(rows)} PDFs at layout={args.layout!r}, font={args.font!r}, in {time.perf_counter() - started:.0f} s\n")
    print("| builder | page (pt) | text cut (of chars) | smallest pt | largest pt | fonts | classes L* | min ΔL* | "
          "scale L* monotone | empty band |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        classes = ", ".join(f"{key} {value}" for key, value in row["classes"].items()) or "–"
        print(f"| {row['builder']} | {row['page_pt'][0]:g} × {row['page_pt'][1]:g} | {row['cut']} of {row['chars']} | "
              f"{row['smallest_pt']:.2f} | {row['largest_pt']:.2f} | {'; '.join(row['fonts'])} | {classes} | "
              f"{row['min_delta_l'] if row['min_delta_l'] is not None else '–'} | "
              f"{'/'.join('yes' if ok else 'NO' for ok in row['scales_monotone']) or '–'} | {row['empty_band']:.0%} |")
    for heads in args.scatter_heads:
        figure = position_scatter_figure(synthetic_trace(4, heads, 120), layer=3, head="all",
                                         highlight={"needle": (12, 20), "query": (80, 95)})
        with tempfile.TemporaryDirectory() as folder:
            data = export(figure, Path(folder) / "f.pdf", layout=args.layout,
                          paper=PaperStyle(font=args.font)).read_bytes()
        band = largest_empty_band(data, plot_rows(paper_figure(figure, args.layout, font=args.font)))
        print(f"position_scatter_figure of a synthetic trace, {heads} heads: empty band {band:.1%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
