"""The app at the published model's shape (16 layers × 16 heads, a 4,096-token trace) in a real
headless Chromium: layer/head changes repaint, click-to-highlight and clear, compare mode stacked
with labelled buttons, a preset that cannot fit says so. Skipped only when no Chromium is installed
and CI is not set (`make browser` installs it)."""

from __future__ import annotations

import os
import time

import pytest
from app_helpers import checkpoint_root  # noqa: F401  (fixture)
from browser_helpers import (
    ARM,
    CHROMEDRIVER,
    CHROMIUM,
    app_server,
    chromium,
    click_token,
    open_trace,
    painted_after,
    pick,
    settled,
)

pytestmark = pytest.mark.browser

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)

META = "return gd._fullLayout.meta"


@pytest.fixture(scope="module")
def server(published_shape_dir, checkpoint_root, tmp_path_factory):
    env = {"REPO_LENS_APP_ROOTS": os.pathsep.join(map(str, (published_shape_dir, checkpoint_root))),
           "REPO_LENS_APP_DEFAULT_MODEL": str(published_shape_dir)}
    with app_server(env, tmp_path_factory.mktemp("streamlit-scale") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("CI is set but Chromium or chromedriver is missing: run `make browser`")
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def trace_file(published_shape_trace, tmp_path_factory):
    return published_shape_trace.save(tmp_path_factory.mktemp("scale-trace") / "olmo2-1b-shape.safetensors")


def test_head_and_layer_changes_repaint_at_16x16x4096(server, browser, trace_file):
    open_trace(browser, server, trace_file, "view=Spaced+tokens")
    assert browser.execute_script(f"const gd = document.querySelector('.js-plotly-plot'); {META}.head;") == 0
    pick(browser, "Head", "head 7")
    assert painted_after(browser, f"{META}.head === 7;") > 0
    rows = browser.execute_script("return document.querySelector('.js-plotly-plot').data"
                                  ".filter(t => /^L\\d+ /.test(t.name)).map(t => t.name);")
    assert len(rows) == 16 and rows[5].startswith("L5 ")
    settled(browser)
    show_view(browser, "Scatter", "scatter")
    pick(browser, "Layer", "L9 ")
    assert painted_after(browser, f"{META}.layer === 9;") > 0


def show_view(driver, name: str, kind: str) -> None:
    """Open the tab ``name`` (the uploaded trace stays in the session) and wait for its plot of ``kind``."""
    from selenium.webdriver.common.by import By

    tab = next(t for t in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stTab"]') if t.text.strip() == name)
    driver.execute_script(ARM)
    tab.click()
    painted_after(driver, f"{META}.kind === '{kind}';")
    settled(driver)


def test_click_highlights_a_token_in_every_layer_and_clear_removes_it(server, browser, trace_file):
    from selenium.webdriver.common.by import By

    if not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stFileChip"]'):  # run alone: upload the trace
        open_trace(browser, server, trace_file, "view=Spaced+tokens")
    show_view(browser, "Spaced tokens", "spaced_tokens")
    click_token(browser, row=8, index=100)
    assert painted_after(browser, f"{META}.highlight.length > 0;") > 0
    settled(browser)
    highlight = browser.execute_script(f"const gd = document.querySelector('.js-plotly-plot'); {META}.highlight;")
    token = int(browser.find_element(By.CSS_SELECTOR, ".st-key-spaced_token input").get_attribute("value"))
    assert highlight == list(range(token - 3, token + 4))  # the clicked token (plotly picks the nearest mark), ±3
    rings = browser.execute_script("return document.querySelector('.js-plotly-plot')._fullData"
                                   ".find(t => t.name === 'highlighted tokens').y.length;")
    assert rings == 7 * 16  # every layer
    clear = next(b for b in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stButton"] button')
                 if "Clear highlight" in b.text)
    browser.execute_script(ARM)
    clear.click()
    assert painted_after(browser, f"{META}.highlight.length === 0;") > 0


def _chart_boxes(driver) -> tuple[dict, dict, dict]:
    """The boxes of the first two charts and of the main area, once the page has settled (read again
    when a late rerun replaces the elements while they are read)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(5):
        settled(driver)
        try:
            charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"]')
            main = driver.find_element(By.CSS_SELECTOR, '[data-testid="stMainBlockContainer"]').rect
            return charts[0].rect, charts[1].rect, main
        except StaleElementReferenceException:
            continue
    raise AssertionError("the charts kept being replaced: the page never settled")


def test_compare_mode_stacks_full_width_plots_with_labelled_buttons(server, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/?view=Spaced+tokens")
    assert settled(browser) is not None
    toggle = browser.find_element(By.XPATH, "//label[.//p[text()='Compare with a second model']]")
    toggle.click()
    pick(browser, "Second model", "tiny-rope")
    assert painted_after(browser, "return true;", chart=1) > 0
    first, second, main = _chart_boxes(browser)
    assert second["y"] >= first["y"] + first["height"]  # stacked, not side by side
    assert min(first["width"], second["width"]) > 0.85 * main["width"]
    labels: list[str] = []
    deadline = time.monotonic() + 60  # the second chart's buttons are drawn after its figure
    while time.monotonic() < deadline and sum(label.endswith("Download PNG") for label in labels) < 2:
        time.sleep(0.5)
        try:
            labels = [b.text.strip() for b in browser.find_elements(By.CSS_SELECTOR,
                                                                     '[data-testid="stDownloadButton"] button')]
        except StaleElementReferenceException:  # redrawn while read
            labels = []
    assert sum(label.endswith("Download PNG") for label in labels) == 2, labels
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h3')]
    assert any("tiny-rope" in h for h in headers) and len(headers) >= 2


def test_a_niah_prompt_that_cannot_fit_is_refused_with_a_message(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/?input=NIAH")
    pick(browser, "Model", "tiny-short")
    message = "tiny-short cannot hold a NIAH prompt of this length"
    alerts: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(message in text for text in alerts):
        time.sleep(0.2)
        alerts = [a.text for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')]
    assert any(message in text for text in alerts), alerts
    slider = browser.find_element(By.XPATH, "//div[@data-testid='stSlider'][.//p[text()='Length (tokens, at most)']]")
    assert "512" not in slider.text  # only the lengths that fit its 256-token context are offered
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
