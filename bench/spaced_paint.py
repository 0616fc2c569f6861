"""Where the browser's time goes when it draws the spaced-token view at 16 layers x 16 heads x 4,096
tokens: plotly.js (the copy the installed plotly package ships, loaded from disk) draws variants of the
app's figure (chunk strip on) in headless Chromium, side by side in one run. Each is timed twice: from
Plotly.newPlot until two animation frames later (painted), then a Plotly.react with a fresh copy of the
same figure (what Streamlit does right after mounting a chart: a second full draw).

    python bench/spaced_paint.py [--repeats 3]

Variants, for the default window (300 tokens) and all tokens (sampled to 2,000): the full figure; the
marks and the chunk strip drawn as one marker element per token mark / strip square (the drawing before
they became one SVG path per row and class); without the text labels; without the tick marks; without
the chunk strip. Ratios are to the full figure of the same window.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import plotly
import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "app"))

DRAW = """const spec = JSON.parse(arguments[0]); const done = arguments[arguments.length - 1];
const gd = document.getElementById('plot'); Plotly.purge(gd); const t0 = performance.now();
const painted = (then) => requestAnimationFrame(() => requestAnimationFrame(then));
Plotly.newPlot(gd, spec.data, spec.layout).then(() => painted(() => {
  const t1 = performance.now(); const copy = JSON.parse(arguments[0]);
  Plotly.react(gd, copy.data, copy.layout).then(() => painted(() => done([t1 - t0, performance.now() - t1])));
}));"""


def _as_markers(fig: go.Figure) -> go.Figure:
    """The figure with its tick and strip shapes drawn as one marker per tick / strip square instead."""
    traces, shapes = list(fig.data), []
    for shape in fig.layout.shapes:
        commands = re.findall(r"M([-\d.e+]+),([-\d.e+]+)([VH])([-\d.e+]+)", shape.path or "")
        if not commands:
            shapes.append(shape)
            continue
        x = np.array([float(a) for a, _, _, _ in commands])
        if commands[0][2] == "V":  # ticks: the marker they replaced
            y = np.array([(float(b) + float(c)) / 2 for _, b, _, c in commands])
            marker = dict(color=shape.line.color, size=7, symbol="line-ns-open", line=dict(color=shape.line.color, width=1))
        else:  # strip bands: a 6-px square every 2 pixels along each band
            ends = np.array([float(c) for _, _, _, c in commands])
            step = (ends - x).min() / 3 if len(x) else 1.0
            pieces = [np.arange(a, b, step) for a, b in zip(x, ends)]
            y = np.concatenate([np.full(len(p), float(b)) for p, (_, b, _, _) in zip(pieces, commands)])
            x = np.concatenate(pieces)
            marker = dict(color=shape.line.color, size=6, symbol="square")
        traces.append(go.Scatter(x=x, y=y, mode="markers", marker=marker, hoverinfo="skip", showlegend=False))
    out = go.Figure(traces, fig.layout)
    out.layout.shapes = shapes
    return out


def _without(fig: go.Figure, *, labels: bool = False, ticks: bool = False, strip: bool = False) -> go.Figure:
    out = go.Figure([t for t in fig.data if not (labels and t.mode == "text")], fig.layout)
    out.layout.shapes = [s for s in fig.layout.shapes
                         if not (ticks and s.name.startswith("marks")) and not (strip and s.name.endswith("chunk"))]
    return out


def variants(trace) -> dict[str, go.Figure]:
    from repo_lens.app.views import _head_patterns
    from repo_lens.plots import SpacedTokensStyle, spaced_tokens_figure

    out = {}
    patterns = _head_patterns(trace, 1, 16, 0.2)
    for window in ((0, 300), (0, trace.positions.shape[-1])):
        fig = spaced_tokens_figure(trace, head=1, scale="row", window=window, patterns=patterns,
                                   style=SpacedTokensStyle(max_tokens=2000, width=1000))
        name = f"{window[1]:>5} tokens"
        out[f"{name}: full figure"] = fig
        out[f"{name}: marks + strip as markers (before)"] = _as_markers(fig)
        out[f"{name}: no text labels"] = _without(fig, labels=True)
        out[f"{name}: no tick marks"] = _without(fig, ticks=True)
        out[f"{name}: no chunk strip"] = _without(fig, strip=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import app_scale  # the published-shape checkpoint and its 4,096-token trace
    from browser_helpers import chromium

    import repo_lens

    root = Path(tempfile.mkdtemp(prefix="spaced-paint-"))
    _, trace_path, _ = app_scale.build(root)
    trace = repo_lens.Trace.load(trace_path)
    page = root / "page.html"
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    page.write_text(f'<html><head><script src="{plotly_js.as_uri()}"></script></head>'
                    '<body><div id="plot"></div></body></html>')
    figures = variants(trace)
    times: dict[str, tuple[float, float]] = {}
    with chromium() as driver:
        driver.get(page.as_uri())
        driver.execute_async_script(DRAW, next(iter(figures.values())).to_json())  # warm-up: fonts, plotly's first draw
        for name, fig in figures.items():
            spec = fig.to_json()
            runs = [driver.execute_async_script(DRAW, spec) for _ in range(args.repeats)]
            times[name] = (statistics.median(a for a, _ in runs) / 1000, statistics.median(b for _, b in runs) / 1000)
    print(f"headless Chromium, median of {args.repeats}, {os.cpu_count()} CPUs (seconds; ratio of draw + redraw "
          "to the full figure's of the same window)")
    print(f"  {'variant':48s} {'draw':>6s} {'redraw':>7s} {'ratio':>6s}")
    for name, (draw, redraw) in times.items():
        full = sum(times[name.split(":")[0] + ": full figure"])
        print(f"  {name:48s} {draw:6.2f} {redraw:7.2f} {full / (draw + redraw):5.2f}x")


if __name__ == "__main__":
    main()
