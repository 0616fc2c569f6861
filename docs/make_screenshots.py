"""Screenshots of every app view at the published model's shape (16 layers x 16 heads, RePo from
layer 5, a 4,096-token trace of random weights) into docs/screenshots/, 1,400 px wide, palette PNGs.

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
TEXT = ("Marie Curie was born in Warsaw and later moved to Paris, where she studied physics and chemistry. "
        "The needle is hidden in the haystack; nobody knows where. ")


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
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import published_shape_model

    from browser_helpers import PLOT, app_server, chromium, open_trace, press, settled, wait_for

    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="screenshots-"))
    checkpoint = root / "olmo2-1b-shape"
    save_checkpoint(published_shape_model(), checkpoint, info={"name": "olmo2-1b-shape (random weights)"})
    text = (TEXT * 40)[:4096]
    trace_path = repo_lens.load(checkpoint).trace(text, progress=False).save(root / "olmo2-1b-shape.safetensors")
    env = {"REPO_LENS_APP_ROOTS": str(root), "REPO_LENS_APP_DEFAULT_MODEL": str(checkpoint)}
    with app_server(env, root / "server.log") as url, chromium(SIZE) as driver:
        for view, name in (("Spaced+tokens", "spaced-tokens"), ("Scatter", "scatter"), ("Heatmaps", "heatmaps"),
                           ("Trace+%26+data", "trace-and-data")):
            table = name == "trace-and-data"
            open_trace(driver, url, trace_path, f"view={view}", TABLE if table else PLOT)
            if name == "spaced-tokens":
                box = wait_for(driver, By.CSS_SELECTOR, ".st-key-spaced_token input")
                box.send_keys("120", Keys.ENTER)  # a highlighted token, followed through the layers
                time.sleep(1.0)
                settled(driver)
            save(driver, name)
        driver.get(f"{url}/?view=Attention+mass&input=NIAH")
        settled(driver)
        press(driver, '[data-testid="stSidebar"] [data-testid="stSlider"] input[type="range"]', *[Keys.ARROW_RIGHT] * 3)
        time.sleep(1.0)
        settled(driver, timeout=600)
        save(driver, "attention-mass")
        driver.get(f"{url}/?view=Word+boundaries&input=Chinese")
        settled(driver)
        save(driver, "word-boundaries")


if __name__ == "__main__":
    sys.exit(main())
