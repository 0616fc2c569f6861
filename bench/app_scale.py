"""The app at the published model's scale (16 layers x 16 heads, a 4,096-token trace): server
re-render, browser paint, PNG export and figure JSON size, beside the numbers of the code before
issue 15 (the BEFORE table below, measured with this script on the same 2-core CPU machine).

    python bench/app_scale.py [--repeats 5] [--no-browser]
    python bench/app_scale.py --model zoo:smollm2-135m --tokens 3179   # the model and length issue 15 names

- server re-render: one streamlit AppTest script run after a head change (spaced tokens), a window
  change to all 4,096 tokens (spaced tokens) and a layer change (scatter, all heads); the trace is
  cached, so no forward pass runs (the bench checks that with a counter on Lens.trace).
- browser paint: a real `streamlit run` server and headless Chromium (selenium): the time from the
  key press that picks the new head / layer / window until the new plot is in the page and two
  animation frames have passed (so it has been painted), measured in the page with performance.now().
- export: repo_lens.plots.figure_bytes(fig, "png") of each figure the app showed (the warm export
  server; the first export also starts Chromium and is printed separately).
- JSON: the largest plotly figure spec the app sent to the browser; SVG: the largest SVG export.

--model traces another model the app can open (e.g. zoo:smollm2-135m, 30 layers x 9 heads) instead of the
random published-shape checkpoint, on a text cut to --tokens of its tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "app"))  # browser_helpers: the browser tests' way of driving the app
APP = ROOT / "repo_lens" / "app" / "streamlit_app.py"  # what `repo-lens app` serves; --app points elsewhere
# (e.g. the app/streamlit_app.py of an older checkout)
N_TOKENS = 4096
TEXT = ("Marie Curie was born in Warsaw and later moved to Paris, where she studied physics and chemistry. "
        "The needle is hidden in the haystack; nobody knows where. ")
# Before issue 15: this script on the app and package of commit d3837a7 (a `git archive` of it first on
# PYTHONPATH, --app pointing at its app/), on the same 2 heavily shared CPU cores (load ~7), medians of
# 3 (server, export, JSON) and of 2 (browser); seconds unless marked MB.
BEFORE = {
    "server: head change (spaced tokens)": 0.376,
    "server: window -> all tokens (spaced tokens)": 0.457,
    "server: layer change (scatter, all heads)": 0.365,
    "export: slowest PNG (warm)": 24.891,
    "json: largest figure (MB)": 3.612,
    "browser: head change painted": 8.108,
    "browser: window -> all tokens painted": 26.101,
    "browser: layer change painted": 5.970,
}
BUDGET = {"server": 0.5, "browser": 1.0, "export": 3.0, "json": 3.0, "svg": float("inf")}


def build(root: Path, model: str | None = None) -> tuple[Path | str, Path, str]:
    """A random checkpoint of the published shape (or ``model``), its N_TOKENS-token trace saved, and the text."""
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    import repo_lens

    if model is not None:
        lens = repo_lens.load(model, device="cpu")
        ids, cut = lens.encode(TEXT * (8 * N_TOKENS // len(TEXT) + 4)), N_TOKENS  # >= 1 token per 8 characters
        for _ in range(8):  # decoding and encoding again need not give back as many tokens: adjust the cut
            text = lens.tokenizer.decode(ids[:cut], skip_special_tokens=True)
            cut += N_TOKENS - len(lens.encode(text))
        trace = lens.trace(text, progress=False)
        return model, trace.save(root / "model.trace.safetensors"), text
    checkpoint = root / "olmo2-1b-shape"
    try:
        model = tiny_model("repo", shape="olmo2-1b")
    except TypeError:  # the code before issue 15 (for the BEFORE column): RePo from layer 6
        model = tiny_model("repo", n_layers=16, n_heads=16, d_model=128, context=8192)
    save_checkpoint(model, checkpoint, info={"name": "olmo2-1b-shape"})
    text = (TEXT * (N_TOKENS // len(TEXT) + 1))[:N_TOKENS]  # ASCII: one byte token per character
    trace = repo_lens.load(checkpoint).trace(text, progress=False)
    assert len(trace) == N_TOKENS and trace.positions.shape == (16, 16, N_TOKENS)
    return checkpoint, trace.save(root / "olmo2-1b-shape.trace.safetensors"), text


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def server_numbers(text: str, repeats: int, n_tokens: int = N_TOKENS) -> tuple[dict[str, float], list[str]]:
    """Medians of AppTest script runs after each change, and the figure specs the app sent."""
    from streamlit.testing.v1 import AppTest

    import repo_lens

    calls = []
    original = repo_lens.lens.Lens.trace

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    repo_lens.lens.Lens.trace = counting

    def opened(view: str) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=600)
        at.session_state["view"] = view
        at.run()
        at.text_area(key="text_Free text").input(text).run()
        assert not at.exception, [e.value for e in at.exception]
        assert f"{n_tokens:,} tokens" in at.markdown[0].value, at.markdown[0].value
        return at

    spaced, scatter = opened("Spaced tokens"), opened("Scatter")
    traced = len(calls)
    specs = [element.proto.spec for at in (spaced, scatter) for element in at.get("plotly_chart")]
    heads, windows, layers = [], [], []
    for step in range(repeats):
        heads.append(timed(lambda: spaced.selectbox(key="spaced_head").set_value(str(1 + step % 8)).run()))
        slider = next(s for s in spaced.slider if s.key.startswith("spaced_window"))
        full, short = (0, n_tokens), (0, 200 + step)
        windows.append(timed(lambda: slider.set_value(full).run()))
        specs += [element.proto.spec for element in spaced.get("plotly_chart")]
        slider.set_value(short).run()
        layers.append(timed(lambda: scatter.selectbox(key="scatter_layer").set_value(5 + step % 8).run()))
        specs += [element.proto.spec for element in scatter.get("plotly_chart")]
    assert not spaced.exception and not scatter.exception
    assert len(calls) == traced, "a layer / head / window change ran a forward pass"
    repo_lens.lens.Lens.trace = original
    return {
        "server: head change (spaced tokens)": statistics.median(heads),
        "server: window -> all tokens (spaced tokens)": statistics.median(windows),
        "server: layer change (scatter, all heads)": statistics.median(layers),
    }, specs


def export_numbers(specs: list[str]) -> tuple[dict[str, float], float]:
    """Seconds of the slowest warm PNG export, the largest JSON spec and the largest SVG file."""
    import plotly.io as pio

    from repo_lens.plots import figure_bytes

    unique = list(dict.fromkeys(specs))
    first = timed(lambda: figure_bytes(pio.from_json(unique[0]), "png"))
    slowest = max(timed(lambda spec=spec: figure_bytes(pio.from_json(spec), "png")) for spec in unique)
    largest = max(len(spec.encode("utf-8")) for spec in unique) / 1e6
    svg = max(len(figure_bytes(pio.from_json(spec), "svg")) for spec in unique) / 1e6
    return {"export: slowest PNG (warm)": slowest, "json: largest figure (MB)": largest,
            "svg: largest export (MB)": svg}, first


def browser_numbers(root: Path, checkpoint: Path | str, trace_path: Path, repeats: int,
                    n_tokens: int = N_TOKENS) -> dict[str, float]:
    from selenium.webdriver.common.keys import Keys

    from browser_helpers import WINDOW_END, app_server, chromium, open_trace, painted_after, pick, press, settled

    heads, windows, layers = [], [], []
    env = {"REPO_LENS_APP_ROOTS": str(root), "REPO_LENS_APP_DEFAULT_MODEL": str(checkpoint)}
    with app_server(env, root / "server.log", APP) as url, chromium() as driver:
        open_trace(driver, url, trace_path, "view=Spaced+tokens")
        for step in range(repeats):
            head = 1 + step % 8
            pick(driver, "Head", f"head {head}")
            heads.append(painted_after(driver, f"return gd._fullLayout.meta.head === {head};"))
            settled(driver)
            press(driver, WINDOW_END, Keys.END)
            windows.append(painted_after(driver, f"return gd._fullLayout.meta.window[1] === {n_tokens};"))
            settled(driver)
            press(driver, WINDOW_END, *[Keys.PAGE_DOWN] * 9)  # back to a short window
            settled(driver)
        open_trace(driver, url, trace_path, "view=Scatter")
        for step in range(repeats):
            layer = 6 + step % 8
            pick(driver, "Layer", f"L{layer} ")
            layers.append(painted_after(driver, f"return gd._fullLayout.meta.layer === {layer};"))
            settled(driver)
    return {
        "browser: head change painted": statistics.median(heads),
        "browser: window -> all tokens painted": statistics.median(windows),
        "browser: layer change painted": statistics.median(layers),
    }


def main() -> None:
    global APP, N_TOKENS
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium measurements")
    parser.add_argument("--browser-only", action="store_true", help="only the Chromium measurements")
    parser.add_argument("--app", type=Path, default=APP, help="the streamlit_app.py to measure")
    parser.add_argument("--model", default=None, help="a model the app opens (zoo:NAME), instead of the random one")
    parser.add_argument("--tokens", type=int, default=N_TOKENS, help="tokens of the traced text")
    args = parser.parse_args()
    N_TOKENS = args.tokens
    APP = args.app.resolve()
    warnings.simplefilter("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    root = Path(tempfile.mkdtemp(prefix="app-scale-"))
    try:
        checkpoint, trace_path, text = build(root, args.model)
        import repo_lens

        shape = repo_lens.Trace.load(trace_path).positions.shape
        os.environ["REPO_LENS_APP_ROOTS"] = str(root)
        os.environ["REPO_LENS_APP_DEFAULT_MODEL"] = str(checkpoint)
        now, first_export = {}, float("nan")
        if not args.browser_only:
            now, specs = server_numbers(text, args.repeats, shape[-1])
            exported, first_export = export_numbers(specs)
            now.update(exported)
            print(json.dumps({name: round(value, 3) for name, value in now.items()}), flush=True)
        if not args.no_browser:
            now.update(browser_numbers(root, checkpoint, trace_path, args.repeats, shape[-1]))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    before_of = BEFORE if args.model is None else {}  # BEFORE was measured on the published shape only
    print(f"App on {args.model or 'the published shape (RePo from layer 5)'}: {shape[0]} layers x {shape[1]} heads x "
          f"{shape[2]:,} tokens, median of {args.repeats}, "
          f"{os.cpu_count()} CPUs")
    print(f"  {'measure':46s} {'before':>8s} {'now':>8s} {'ratio':>7s} {'budget':>7s}")
    for name, value in now.items():
        before = before_of.get(name)
        budget = BUDGET[name.split(":")[0]]
        ratio = f"{before / value:6.1f}x" if before else ""
        mark = "ok" if value <= budget else "OVER"
        print(f"  {name:46s} {before if before is not None else float('nan'):8.2f} {value:8.2f} {ratio:>7s} "
              f"{budget:6.1f} {mark}")
    print(f"  (first PNG export, Chromium start included: {first_export:.2f} s; seconds unless marked MB)")
    print(json.dumps({name: round(value, 3) for name, value in now.items()}))


if __name__ == "__main__":
    sys.exit(main())
