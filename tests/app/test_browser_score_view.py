"""End to end: clicking a token of the spaced-token plot in a real headless Chromium opens "Why this attention"
with its four patterns drawn over the keys the token sees. Skipped only when no Chromium is installed and CI
is not set (`make browser` installs it); in CI a missing browser fails the test."""

from __future__ import annotations

import os
import time

import pytest
from app_helpers import checkpoint_root  # noqa: F401  (fixture)
from browser_helpers import CHROMIUM, ROOT, app_server, chromium, click_token, require_browser, settled

pytestmark = pytest.mark.browser

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)

PANEL_KINDS = ["attention_split_bars", "attention_band_strip", "attention_patterns"]
KINDS = "return [...document.querySelectorAll('.js-plotly-plot')].map(gd => gd._fullLayout && gd._fullLayout.meta" \
        " && gd._fullLayout.meta.kind);"


@pytest.fixture(scope="module")
def server(checkpoint_root, tmp_path_factory):
    env = {"REPO_LENS_APP_ROOTS": str(checkpoint_root), "REPO_LENS_APP_DEFAULT_MODEL": str(checkpoint_root / "tiny-repo")}
    with app_server(env, tmp_path_factory.mktemp("streamlit-attention") / "server.log") as url:
        yield url


def test_clicking_a_token_draws_why_this_attention_and_its_four_patterns(server):
    from selenium.webdriver.common.by import By

    require_browser()
    with chromium() as browser:
        browser.get(f"{server}/?view=Spaced+tokens")
        assert settled(browser) is not None
        settled(browser)
        click_token(browser, row=1, index=20)
        deadline, kinds = time.monotonic() + 120, []
        while time.monotonic() < deadline and kinds[-3:] != PANEL_KINDS:
            kinds = browser.execute_script(KINDS)
            time.sleep(0.3)
        assert kinds[-3:] == PANEL_KINDS, kinds
        settled(browser)
        token = int(browser.find_element(By.CSS_SELECTOR, ".st-key-spaced_token input").get_attribute("value"))
        panel = next(e for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stExpander"]')
                     if "Why this attention" in e.text)
        assert f"query token {token} " in panel.text and "content part" in panel.text
        drawn = browser.execute_script("""
            const gd = [...document.querySelectorAll('.js-plotly-plot')]
                .find(g => g._fullLayout.meta && g._fullLayout.meta.kind === 'attention_patterns');
            return {names: gd._fullData.map(t => t.name), keys: gd._fullData.map(t => t.x.length),
                    bars: gd.querySelectorAll('.barlayer .point').length,
                    sums: gd._fullData.map(t => Array.from(t.y).reduce((a, b) => a + b, 0)),
                    titles: gd._fullLayout.annotations.map(a => a.text)};""")
        assert drawn["names"] == ["actual", "content", "position", "reference"]
        assert drawn["keys"] == [token + 1] * 4  # every key the query sees: 0..token
        assert drawn["bars"] == 4 * (token + 1)  # painted: one bar per key in each of the four rows
        assert all(abs(total - 1.0) < 1e-4 for total in drawn["sums"])  # each pattern is a softmax over the keys
        assert drawn["titles"][3].startswith("reference: the same q and k at positions 0, 1, 2")
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        errors = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')]
        assert not errors, errors
        shot = ROOT / "build" / "screenshots" / "why-this-attention.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        panel.screenshot(str(shot))
        assert shot.stat().st_size > 10_000, "the panel's screenshot is (nearly) empty"
