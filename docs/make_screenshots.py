"""Screenshots of every app view into docs/screenshots/ (1,400 px wide, palette PNGs), made with the
trained model the app opens on, zoo:bytes1k-repo (4 layers x 4 heads, byte-level, RoPE in layers 0-1
and RePo in 2-3, a 1,024-byte context), on real text: the spaced-tokens, scatter, heatmap and data
views show a trace of the first 1,000 bytes of the first held-out Brown corpus document (text the zoo
did not train on); attention mass, word boundaries and interventions show the app's NIAH and Chinese
inputs; "Why this attention" shows the panel alone, for a token of the app's free text.

    python docs/make_screenshots.py          # needs Chromium and chromedriver (make browser)
    python docs/make_screenshots.py why-this-attention   # only the screenshots named
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


def save(driver, name: str, element=None, max_bytes: int = MAX_BYTES, method: str = "MEDIANCUT") -> Path:
    """The page (or only ``element``) as a palette PNG (under ``max_bytes``), quantized by PIL's ``method``
    (FASTOCTREE keeps a colour that covers few pixels, which MEDIANCUT merges into a neighbour)."""
    from PIL import Image

    png = element.screenshot_as_png if element is not None else driver.get_screenshot_as_png()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    path = OUT / f"{name}.png"
    for colours in (128, 64, 32, 16):
        image.quantize(colours, method=Image.Quantize[method]).save(path, optimize=True)
        if path.stat().st_size < max_bytes:
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
        why_this_attention(driver, url)


# The "Why this attention" screenshot: on the app's free text, the second "needle"'s "n" (token 134) as the query
# of head 3 in layer 3 (RePo), which finds the first "needle"'s "n" (token 88) by content.
ATTENTION_QUERY, ATTENTION_LAYER, ATTENTION_HEAD = 134, "L3 ", "head 3"
PANEL_MAX_BYTES = 150_000


def choose(driver, css: str, option: str) -> None:
    """Type ``option`` into the selectbox whose container matches ``css`` and commit it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from browser_helpers import settled, wait_for

    box = wait_for(driver, By.CSS_SELECTOR, f"{css} input")
    box.click()
    box.send_keys(option)
    time.sleep(0.5)
    box.send_keys(Keys.ENTER)
    time.sleep(1.0)
    settled(driver)
    driver.execute_script("document.activeElement.blur();")  # no focus ring in the picture


def why_this_attention(driver, url: str) -> Path:
    """The "Why this attention" panel alone (window made tall enough to hold it), on the model the app opens on."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from browser_helpers import settled, wait_for

    driver.set_window_size(SIZE[0], 3200)
    driver.get(f"{url}/?view=Spaced+tokens&input=Free+text")
    settled(driver)
    wait_for(driver, By.CSS_SELECTOR, ".st-key-spaced_token input").send_keys(str(ATTENTION_QUERY), Keys.ENTER)
    time.sleep(1.0)
    settled(driver)
    choose(driver, '[class*="st-key-attn_layer_"]', ATTENTION_LAYER)
    choose(driver, '[class*="st-key-attn_head_"]', ATTENTION_HEAD)
    panel = next(e for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stExpander"]')
                 if "Why this attention" in e.text)
    driver.execute_script("arguments[0].scrollIntoView(true);", panel)  # all of it in the window
    time.sleep(1.0)
    path = save(driver, "why-this-attention", element=panel, max_bytes=PANEL_MAX_BYTES, method="FASTOCTREE")
    driver.set_window_size(*SIZE)
    return path


def only(names: list[str]) -> None:
    """Make only the screenshots ``names`` (those with a function of their own: why-this-attention)."""
    from browser_helpers import app_server, chromium

    makers = {"why-this-attention": why_this_attention}
    unknown = sorted(set(names) - set(makers))
    if unknown:
        raise SystemExit(f"no screenshot named {', '.join(unknown)}; these can be made alone: {', '.join(makers)}")
    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="screenshots-"))
    with app_server({"REPO_LENS_APP_DEFAULT_MODEL": MODEL}, root / "server.log") as url, chromium(SIZE) as driver:
        for name in names:
            makers[name](driver, url)


if __name__ == "__main__":
    sys.exit(only(sys.argv[1:]) if sys.argv[1:] else main())
