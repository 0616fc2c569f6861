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
from browser_helpers import CHROMIUM, PLOT, ROOT, app_server, chromium, require_browser, settled

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
