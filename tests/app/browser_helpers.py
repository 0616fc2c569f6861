"""Driving the real app in headless Chromium (selenium): start a `streamlit run` server, open a page,
pick options with the keyboard and time until the new plot is painted. Used by the browser tests and
by bench/app_scale.py, so the bench measures exactly what the tests exercise."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--force-device-scale-factor=1")
PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot .main-svg'
WINDOW_END = '[data-testid="stSlider"] input[type="range"][aria-label$="end"]'
# Records the time of the next key press or click (the one that commits a change).
ARM = """window.__t0 = null;
if (!window.__armed) { window.__armed = true;
  for (const kind of ['keydown', 'mousedown'])
    document.addEventListener(kind, e => { if (window.__t0 === null) window.__t0 = performance.now(); }, true); }"""
# Waits until the first plot satisfies the predicate, then two animation frames (painted); returns ms.
PAINTED = """const predicate = new Function('gd', arguments[0]); const index = arguments[1];
const done = arguments[arguments.length - 1];
function check() {
  const gd = document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')[index];
  let ok = false; try { ok = gd && gd._fullLayout && predicate(gd); } catch (e) {}
  if (ok && window.__t0 !== null) requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - window.__t0)));
  else setTimeout(check, 5);
}
check();"""


def require_browser() -> None:
    """Fail (not skip) where a browser test must run and cannot: CI without Chromium or chromedriver."""
    import pytest

    if not CHROMIUM:
        pytest.fail("CI is set but no Chromium is installed: run `make browser`")
    if not CHROMEDRIVER:
        pytest.fail("Chromium is installed but chromedriver is not: apt-get install chromium-driver (make browser)")


@contextlib.contextmanager
def default_app_page(log: Path, size: tuple[int, int] = (1400, 1000),
                     model: str = "zoo:bytes1k-repo") -> Iterator[tuple[str, object]]:
    """The app as `repo-lens app` serves it with no roots, opening on ``model`` (zoo:bytes1k-repo: its default
    where SmolLM2's GGUF is not installed, and quick enough on a CPU for every view; "" for the app's own
    default), and a Chromium window of ``size``: yields (url, driver)."""
    require_browser()
    env = {"REPO_LENS_APP_ROOTS": "", "REPO_LENS_APP_DEFAULT_MODEL": model}
    with app_server(env, log) as url, chromium(size) as driver:
        yield url, driver


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_server(command: list[str], *, cwd: Path, env: dict[str, str], log: Path, health: str, name: str,
                 timeout: float = 90.0) -> Iterator[None]:
    """Run ``command`` (a server on 127.0.0.1, output to ``log``) until ``health`` answers 200, then
    yield; stopped on exit. A server that exits or stays silent for ``timeout`` s raises, with its log."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(health, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def app_server(env: dict[str, str], log: Path, app: Path | None = None) -> Iterator[str]:
    """The app served on a free local port with ``env`` added; yields its URL. ``app`` None: started as
    users start it, ``repo-lens app``; else a `streamlit run` of that script (e.g. an older copy)."""
    port = free_port()
    if app is None:
        command = [sys.executable, "-m", "repo_lens.cli", "app", "--server.port", str(port)]
    else:
        command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", "127.0.0.1",
                   "--server.port", str(port), "--server.headless", "true"]
    url = f"http://127.0.0.1:{port}"
    with local_server(command, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, log=log,
                      health=f"{url}/_stcore/health", name="the Streamlit server"):
        yield url


@contextlib.contextmanager
def chromium(size: tuple[int, int] = (1500, 1050), downloads: Path | None = None) -> Iterator[object]:
    """A headless Chromium driven by selenium, at ``size`` pixels."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--window-size={size[0]},{size[1]}"):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="repo-lens-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    if downloads is not None:
        options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                                  "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def settled(driver, selector: str = PLOT, timeout: float = 150.0):
    """The first element at ``selector``, once it is drawn and the script run has finished (else None)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    time.sleep(0.3)
    from selenium.common.exceptions import StaleElementReferenceException

    while time.monotonic() < deadline:
        try:
            found = driver.find_elements(By.CSS_SELECTOR, selector)
            running = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
            if found and not running and found[0].size["height"] > 50:
                time.sleep(0.5)  # let plotly finish drawing
                return driver.find_elements(By.CSS_SELECTOR, selector)[0]
        except StaleElementReferenceException:  # replaced by a rerun while we looked
            pass
        time.sleep(0.2)
    return None


def wait_for(driver, by: str, selector: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements(by, selector)
        if found and found[0].is_displayed():
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"{selector} never appeared")


def open_trace(driver, url: str, trace_path: Path, query: str = "", rendered: str = PLOT) -> None:
    """``trace_path`` opened with "Open a saved trace" (no model, no forward pass), once ``rendered`` is drawn."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/?{query}")
    wait_for(driver, By.XPATH, "//label[.//p[text()='Open a saved trace']]").click()
    uploader = '[data-testid="stSidebar"] input[type="file"]'
    deadline = time.monotonic() + 60
    while not driver.find_elements(By.CSS_SELECTOR, uploader) and time.monotonic() < deadline:
        time.sleep(0.2)
    driver.find_element(By.CSS_SELECTOR, uploader).send_keys(str(trace_path))
    assert settled(driver, rendered) is not None, f"the uploaded trace's view never drew {rendered}"


def pick(driver, label: str, option: str) -> None:
    """Choose ``option`` in the selectbox labelled ``label`` by typing it; the Enter that commits is timed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = wait_for(driver, By.XPATH, f"//div[@data-testid='stSelectbox'][.//label//p[text()='{label}']]//input")
    deadline = time.monotonic() + 120
    while not box.is_enabled() and time.monotonic() < deadline:  # disabled while a script run is going on
        time.sleep(0.1)
    dialogs = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDialog"]')
    if dialogs:
        raise AssertionError(f"a dialog covers the page: {dialogs[0].text[:300]!r}")
    box.click()
    box.send_keys(option)
    time.sleep(0.3)
    driver.execute_script(ARM)
    box.send_keys(Keys.ENTER)


def press(driver, selector: str, *keys: str) -> None:
    """Focus the (visually hidden) input at ``selector`` and press ``keys``; the first press is timed."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver.execute_script("arguments[0].focus();", driver.find_element(By.CSS_SELECTOR, selector))
    driver.execute_script(ARM)
    ActionChains(driver).send_keys(*keys).perform()


def painted_after(driver, predicate: str, chart: int = 0) -> float:
    """Seconds from the armed key press / click until chart ``chart`` satisfies ``predicate`` (JS on ``gd``,
    the plotly div) and has been painted."""
    return driver.execute_async_script(PAINTED, predicate, chart) / 1000.0


def click_token(driver, row: int, index: int) -> None:
    """Click the ``index``-th mark of layer row ``row`` in the first plot."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    point = driver.execute_script("""
        const gd = document.querySelector('.js-plotly-plot');
        const trace = gd._fullData.find(t => t.name && t.name.startsWith('L' + arguments[0] + ' '));  // arrays decoded
        const i = arguments[1], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return {dx: xa.l2p(trace.x[i]) - box.width / 2,
                dy: ya.l2p(trace.y[i]) - box.height / 2};""", row, index)
    drag = driver.find_element(By.CSS_SELECTOR, ".js-plotly-plot .nsewdrag")
    driver.execute_script(ARM)
    ActionChains(driver).move_to_element_with_offset(drag, int(point["dx"]), int(point["dy"])).click().perform()
