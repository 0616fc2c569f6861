"""End to end: the real server in a real headless Chromium; every view renders its plot.

Screenshots land in build/screenshots/<view>.png. Skipped only when no Chromium is installed and
CI is not set (`make browser` installs it); in CI a missing browser fails the test.
"""

from __future__ import annotations

import io
import os
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from app_helpers import checkpoint_root  # noqa: F401  (fixture)
from browser_helpers import (
    CHROMIUM,
    PLOT,
    ROOT,
    app_server,
    chromium,
    click_token,
    require_browser,
    settled,
)

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "build" / "screenshots"
TABLE = '[data-testid="stDataFrame"] canvas'
RENDERED = f"{PLOT}, {TABLE}"  # the element that shows a view has rendered: its first plot, or its table

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)


@pytest.fixture(scope="module")
def server(checkpoint_root, tmp_path_factory):
    env = {"REPO_LENS_APP_ROOTS": str(checkpoint_root), "REPO_LENS_APP_DEFAULT_MODEL": str(checkpoint_root / "tiny-repo")}
    with app_server(env, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    require_browser()
    with chromium(downloads=downloads) as driver:
        yield driver


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)


def _views() -> list[tuple[str, str]]:
    """(screenshot name, query string) of every view in the app's registry, with the input it is made for."""
    from repo_lens.app.views import VIEWS

    pages = []
    for view in VIEWS:
        query = {"view": view.name, **({"input": view.preset} if view.preset else {})}
        name = "-".join("".join(c if c.isalnum() else " " for c in view.name.lower()).split())
        pages.append((name, urllib.parse.urlencode(query)))
    return pages


def test_every_view_renders_in_a_real_browser(server, browser):
    from selenium.webdriver.common.by import By

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    views = _views()
    for name, query in views:
        browser.get(f"{server}/?{query}")
        element = settled(browser, RENDERED)
        shot = SCREENSHOTS / f"{name}.png"
        browser.save_screenshot(str(shot))
        assert element is not None, f"{name}: {RENDERED} never appeared (see {shot})"
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), f"{name}: traceback shown"
        errors = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')]
        assert not errors, f"{name}: {errors}"
        page = _pixels(shot.read_bytes())
        assert page.std() > 8, f"{name}: the screenshot is (nearly) blank"
        drawn = _pixels(element.screenshot_as_png)
        assert drawn.std() > 10 and (drawn < 200).mean() > 0.01, f"{name}: the plot area is blank"
    assert {name for name, _ in views} <= {p.stem for p in SCREENSHOTS.glob("*.png")}


def test_png_download_renders_the_figure_on_the_server(server, browser, downloads):
    """The export buttons render on click (kaleido + the local Chromium) and the browser saves the file."""
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/?view=Heatmaps")
    assert settled(browser, PLOT) is not None
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stDownloadButton"] button')
                  if b.text.strip().endswith("Download PNG"))
    button.click()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [p for p in downloads.glob("*.png")]
        if done and not list(downloads.glob("*.crdownload")):
            break
        time.sleep(0.5)
    (path,) = done
    assert path.name.startswith("tiny-repo_range_") and path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert _pixels(path.read_bytes()).std() > 10


def test_clicking_a_token_opens_why_this_position_with_its_bars_and_token_strip(server, browser):
    """A click on a token of the spaced-token plot opens the panel: the bars of the components that write
    the clicked token's position in the first learned layer, and the strip of the tokens before it."""
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/?view=Spaced+tokens")
    assert settled(browser) is not None
    settled(browser)
    click_token(browser, row=1, index=20)
    deadline = time.monotonic() + 120
    kinds: list = []
    expected = ["spaced_tokens", "position_attribution_bars", "token_attribution_strip",  # then Why this attention
                "attention_split_bars", "attention_band_strip", "attention_patterns"]
    while time.monotonic() < deadline and kinds != expected:  # a rerun may briefly keep the old chart beside
        kinds = browser.execute_script("return [...document.querySelectorAll('.js-plotly-plot')]"
                                       ".map(gd => gd._fullLayout && gd._fullLayout.meta && gd._fullLayout.meta.kind);")
        time.sleep(0.3)
    assert kinds == expected, kinds
    settled(browser)
    token = int(browser.find_element(By.CSS_SELECTOR, ".st-key-spaced_token input").get_attribute("value"))
    panel = next(e for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stExpander"]')
                 if "Why this position" in e.text)
    assert f"token {token} " in panel.text
    bars = browser.execute_script("const gd = document.querySelectorAll('.js-plotly-plot')[1];"
                                  "return [gd.data[0].y.length, gd._fullLayout.title.text];")
    assert bars[0] == 5 and bars[1].startswith(f"L1H0, token {token} ")  # embed, 0_attn_out, 0_mlp_out, L0H0, L0H1
    strip = browser.execute_script("const gd = document.querySelectorAll('.js-plotly-plot')[2];"
                                   "return gd._fullData[0].text[0].length;")
    assert strip == min(token + 1, 48)
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    shot = SCREENSHOTS / "why-this-position.png"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    panel.screenshot(str(shot))
    drawn = _pixels(shot.read_bytes())
    assert drawn.std() > 10, "the panel is blank"
