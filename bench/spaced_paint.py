"""Where the browser's time goes when it draws the spaced-token view at 16 layers x 16 heads x 4,096
tokens: plotly.js (the copy the installed plotly package ships, loaded from disk) draws variants of the
app's figure in headless Chromium, each timed from Plotly.newPlot until two animation frames later
(painted), side by side in one run.

    python bench/spaced_paint.py [--repeats 2]

Variants, for the default window (300 tokens) and all tokens (sampled to 2,000): the full figure;
the figure as it was before one mark per 2-pixel column (every shown token a mark); without the text
labels; without the per-token marks; marks and labels as WebGL (scattergl) traces; only the connector
lines. Ratios are to the full figure of the same window.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import plotly
import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "app"))

DRAW = """const spec = JSON.parse(arguments[0]); const done = arguments[arguments.length - 1];
const gd = document.getElementById('plot'); Plotly.purge(gd); const start = performance.now();
Plotly.newPlot(gd, spec.data, spec.layout).then(() =>
  requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - start))));"""


def _webgl(fig: go.Figure, modes: tuple[str, ...]) -> go.Figure:
    traces = [go.Scattergl({k: v for k, v in trace.to_plotly_json().items() if k != "type"})
              if trace.type == "scatter" and trace.mode in modes else trace for trace in fig.data]
    return go.Figure(traces, fig.layout)


def variants(trace) -> dict[str, go.Figure]:
    from repo_lens.plots import spaced_tokens, spaced_tokens_figure

    out = {}
    for window in ((0, 300), (0, trace.positions.shape[-1])):
        settings = dict(head=1, scale="row", window=window, max_tokens=2000, width=1100)
        fig = spaced_tokens_figure(trace, **settings)
        name = f"{window[1]:>5} tokens"
        out[f"{name}: full figure"] = fig
        # no chunk strip here, so this turns off only the one-mark-per-column drawing of the rows
        dedup, spaced_tokens.COLUMN_DEDUP_MIN_TOKENS = spaced_tokens.COLUMN_DEDUP_MIN_TOKENS, 10**9
        try:
            out[f"{name}: every token a mark (before)"] = spaced_tokens_figure(trace, **settings)
        finally:
            spaced_tokens.COLUMN_DEDUP_MIN_TOKENS = dedup
        out[f"{name}: no text labels"] = go.Figure([t for t in fig.data if t.mode != "text"], fig.layout)
        out[f"{name}: no per-token marks"] = go.Figure([t for t in fig.data if t.mode != "markers"], fig.layout)
        out[f"{name}: marks + labels as WebGL"] = _webgl(fig, ("markers", "text"))
        out[f"{name}: connector lines only"] = go.Figure([t for t in fig.data if t.mode == "lines"], fig.layout)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
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
                    '<body><div id="plot" style="width:1100px"></div></body></html>')
    figures = variants(trace)
    times: dict[str, float] = {}
    with chromium() as driver:
        driver.get(page.as_uri())
        driver.execute_async_script(DRAW, next(iter(figures.values())).to_json())  # warm-up: fonts, plotly's first draw
        for name, fig in figures.items():
            spec = fig.to_json()
            times[name] = statistics.median(driver.execute_async_script(DRAW, spec) / 1000
                                            for _ in range(args.repeats))
    print(f"Plotly.newPlot until painted, headless Chromium, median of {args.repeats}, "
          f"{os.cpu_count()} CPUs (seconds; ratio to the full figure of the same window)")
    for name, seconds in times.items():
        full = times[name.split(":")[0] + ": full figure"]
        print(f"  {name:42s} {seconds:7.2f}  {full / seconds:5.1f}x")


if __name__ == "__main__":
    main()
