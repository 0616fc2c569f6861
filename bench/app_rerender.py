"""App responsiveness: re-render after a layer (or head) change on a cached 2,000-token trace, vs a
fresh trace of the same text. Measured with streamlit's AppTest (the whole script run, figure
building and serialisation included; no browser).

    python bench/app_rerender.py [--tokens 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "repo_lens" / "app" / "streamlit_app.py"  # the script `repo-lens app` serves
TEXT = ("Marie Curie was born in Warsaw and later moved to Paris, where she studied physics and chemistry. "
        "The needle is hidden in the haystack; nobody knows where. ")


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def timed_in_thread(action) -> float:
    """Like Streamlit, which runs the app script in a worker thread (on a CPU shared with other
    processes, torch's OpenMP forward can be several times slower on the main thread)."""
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.append(timed(action)))
    worker.start()
    worker.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch

    import repo_lens
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model
    from streamlit.testing.v1 import AppTest

    torch.manual_seed(0)
    root = Path(tempfile.mkdtemp(prefix="app-bench-"))
    checkpoint = root / "bench-repo"
    # the size of the zoo's byte models (6 layers, d_model 160, 4 heads), with room for 2,000 tokens
    save_checkpoint(tiny_model("repo", n_layers=6, d_model=160, n_heads=4, context=4096), checkpoint)
    os.environ["REPO_LENS_APP_ROOTS"] = str(root)
    os.environ["REPO_LENS_APP_DEFAULT_MODEL"] = str(checkpoint)
    text = (TEXT * (args.tokens // len(TEXT) + 1))[: args.tokens]  # ASCII: one byte token per character

    lens = repo_lens.load(checkpoint)
    assert len(lens.trace(text, progress=False)) == args.tokens

    scatter = AppTest.from_file(str(APP), default_timeout=600)
    scatter.session_state["view"] = "Scatter"
    scatter.run()
    scatter.text_area(key="text_Free text").input(text).run()
    assert not scatter.exception and f"{args.tokens:,} tokens" in scatter.markdown[0].value
    spaced = AppTest.from_file(str(APP), default_timeout=600)
    spaced.run()
    spaced.text_area(key="text_Free text").input(text).run()  # cached: same model, same text

    # interleaved, so that load from other processes hits every measurement alike
    fresh, fresh_main, cold, layer_change, head_change = [], [], [], [], []
    for step in range(args.repeats):
        fresh.append(timed_in_thread(lambda: lens.trace(text, progress=False)))
        fresh_main.append(timed(lambda: lens.trace(text, progress=False)))
        variant = text[:-1] + "!?.,;:"[step % 6]  # a text not traced yet: forward pass + render
        cold.append(timed(lambda: scatter.text_area(key="text_Free text").input(variant).run()))
        layer_change.append(timed(lambda: scatter.selectbox(key="scatter_layer").set_value(step % 6).run()))
        head_change.append(timed(lambda: spaced.selectbox(key="spaced_head").set_value(str(step % 4)).run()))
    assert not scatter.exception and not spaced.exception
    fresh, fresh_main, cold, layer_change, head_change = map(
        statistics.median, (fresh, fresh_main, cold, layer_change, head_change))

    print(f"{args.tokens}-token trace, 6-layer x 4-head RePo model (d_model 160), CPU, {torch.get_num_threads()} threads")
    print(f"  fresh trace (lens.trace, worker thread)  {fresh * 1000:8.1f} ms   (main thread: {fresh_main * 1000:.1f} ms)")
    print(f"  app run with a new text (trace + render) {cold * 1000:8.1f} ms")
    print(f"  app re-render, layer change (scatter)    {layer_change * 1000:8.1f} ms   "
          f"ratio to a fresh trace {layer_change / fresh:.2f}x")
    print(f"  app re-render, head change (spaced view) {head_change * 1000:8.1f} ms   "
          f"ratio to a fresh trace {head_change / fresh:.2f}x")
    print(f"  app re-render / app run with a new text  {layer_change / cold:.2f}x   (medians of {args.repeats}, interleaved)")


if __name__ == "__main__":
    sys.exit(main())
