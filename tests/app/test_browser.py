"""End to end: the real server in a real headless Chromium; every view renders its plot.

Screenshots land in build/screenshots/<view>.png. Skipped only when no Chromium is installed and
CI is not set (`make browser` installs it); in CI a missing browser fails the test.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from app_helpers import checkpoint_root  # noqa: F401  (fixture; also puts app/ on sys.path)

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app" / "streamlit_app.py"
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1500,1050", "--force-device-scale-factor=1")
PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot .main-svg'
TABLE = '[data-testid="stDataFrame"] canvas'
RENDERED = f"{PLOT}, {TABLE}"  # the element that shows a view has rendered: its first plot, or its table

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(checkpoint_root, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = dict(os.environ, REPO_LENS_APP_ROOTS=str(checkpoint_root),
               REPO_LENS_APP_DEFAULT_MODEL=str(checkpoint_root / "tiny-repo"), HF_HUB_OFFLINE="1")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", "127.0.0.1",
             "--server.port", str(port), "--server.headless", "true"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Streamlit server did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    if not CHROMIUM:
        pytest.fail("CI is set but no Chromium is installed: run `make browser`")
    if not CHROMEDRIVER:
        pytest.fail("Chromium is installed but chromedriver is not: apt-get install chromium-driver (make browser)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="repo-lens-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)


def _settled(driver, selector: str, timeout: float = 150.0):
    """The view's element, once it is drawn and the script run has finished."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        running = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        if found and not running and found[0].size["height"] > 50:
            time.sleep(1.0)  # let plotly finish drawing
            return found[0]
        time.sleep(0.5)
    return None


def _views() -> list[tuple[str, str]]:
    """(screenshot name, query string) of every view in the app's registry, with the input it is made for."""
    from lens_app.views import VIEWS

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
        element = _settled(browser, RENDERED)
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
    assert _settled(browser, PLOT) is not None
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stDownloadButton"] button')
                  if b.text.strip().endswith("PNG"))
    button.click()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [p for p in downloads.glob("*.png")]
        if done and not list(downloads.glob("*.crdownload")):
            break
        time.sleep(0.5)
    (path,) = done
    assert path.name.startswith("range-") and path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert _pixels(path.read_bytes()).std() > 10
