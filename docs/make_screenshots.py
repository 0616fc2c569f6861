"""Screenshots of every app view into docs/screenshots/ (1,400 px wide, palette PNGs), made with the
trained model the app opens on, zoo:bytes1k-repo (4 layers x 4 heads, byte-level, RoPE in layers 0-1
and RePo in 2-3, a 1,024-byte context), on real text: the spaced-tokens, scatter, heatmap and data
views show a trace of the first 1,000 bytes of the first held-out Brown corpus document (text the zoo
did not train on); attention mass, word boundaries and interventions show the app's NIAH and Chinese
inputs.

    python docs/make_screenshots.py          # needs Chromium and chromedriver (make browser)
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "app"))  # browser_helpers: the browser tests' way of driving the app
OUT = ROOT / "docs" / "screenshots"
SIZE = (1400, 1500)
MAX_BYTES = 300_000
TABLE = '[data-testid="stDataFrame"] canvas'
MODEL = "zoo:bytes1k-repo"
TEXT_BYTES = 1000  # within the model's 1,024-byte context


def held_out_text() -> str:
    """The first ``TEXT_BYTES`` bytes (cut at a space) of the first held-out English document of the zoo's text."""
    from repo_lens.data import bilingual_splits

    text = " ".join(bilingual_splits()["en"][1][0].split())
    cut = text.encode("utf-8")[:TEXT_BYTES].decode("utf-8", errors="ignore")
    return cut[:cut.rfind(" ")]


def save(driver, name: str) -> Path:
    """The page as a palette PNG (well under MAX_BYTES)."""
    from PIL import Image

    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    path = OUT / f"{name}.png"
    for colours in (128, 64, 32):
        image.quantize(colours, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        if path.stat().st_size < MAX_BYTES:
            break
    print(f"{path.relative_to(ROOT)}  {path.stat().st_size / 1000:.0f} kB")
    return path


def main() -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    import repo_lens

    from browser_helpers import PLOT, app_server, chromium, open_trace, settled, wait_for

    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="screenshots-"))
    text = held_out_text()
    trace_path = repo_lens.load(MODEL, device="cpu").trace(text).save(root / "bytes1k-repo-brown.safetensors")
    print(f"{MODEL} on {len(text.encode())} bytes of held-out Brown text: {text[:60]!r}…")
    env = {"REPO_LENS_APP_DEFAULT_MODEL": MODEL}
    with app_server(env, root / "server.log") as url, chromium(SIZE) as driver:
        for view, name in (("Spaced+tokens", "spaced-tokens"), ("Scatter", "scatter"), ("Heatmaps", "heatmaps"),
                           ("Trace+%26+data", "trace-and-data")):
            table = name == "trace-and-data"
            open_trace(driver, url, trace_path, f"view={view}", TABLE if table else PLOT)
            if name == "spaced-tokens":
                box = wait_for(driver, By.CSS_SELECTOR, ".st-key-spaced_token input")
                box.send_keys("100", Keys.ENTER)  # a highlighted token, followed through the layers
                time.sleep(1.0)
                settled(driver)
            save(driver, name)
        driver.get(f"{url}/?view=Attention+mass&input=NIAH")  # the default prompt: 512 tokens, needle at 0.5
        settled(driver, timeout=600)
        save(driver, "attention-mass")
        driver.get(f"{url}/?view=Word+boundaries&input=Chinese")
        settled(driver)
        save(driver, "word-boundaries")
        driver.get(f"{url}/?view=Interventions&input=NIAH")
        settled(driver, timeout=600)
        save(driver, "interventions")


if __name__ == "__main__":
    sys.exit(main())
