"""In a real browser, on the default model: labels the charts draw keep apart, as Chromium lays them out.

Word labels over spaced-token rows leave a gap between neighbours at the two window widths the app is
laid out for (1,400 and 1,280 px, the sidebar open); heatmap row names stand off from the cells; the
chunk classes are named apart; the lines between spaced-token rows are in the legend; the attention-mass
"Log scale" toggle says what both of its charts show; the NIAH length slider says the prompt may be a few
tokens shorter, and the header agrees.

Skipped only when no Chromium is installed and CI is not set (`make browser` installs it).
"""

from __future__ import annotations

import os
import re
import time

import pytest
from browser_helpers import CHROMIUM, PLOT, ROOT, default_app_page, settled

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "build" / "screenshots"
MIN_GAP_PX = 1.0

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)

# Every drawn text of chart ``arguments[0]`` matching ``arguments[1]`` (a CSS selector inside the chart),
# with its box on the page.
TEXT_BOXES = """
const gd = document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')[arguments[0]];
return [...gd.querySelectorAll(arguments[1])].filter(t => t.textContent.trim()).map(t => {
  const r = t.getBoundingClientRect();
  return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
}).filter(b => b.right > b.left);
"""
# The plotting area of chart ``arguments[0]`` on the page, and its axes' types.
PLOT_AREA = """
const gd = document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')[arguments[0]];
const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
return {left: r.left, right: r.right, yaxis: gd._fullLayout.yaxis.type,
        legend: [...gd.querySelectorAll('.legend .legendtext')].map(t => t.textContent)};
"""
CHARTS = '[data-testid="stPlotlyChart"] .js-plotly-plot'


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The app as `repo-lens app` serves it, on zoo:bytes1k-repo, in a 1,400 × 1,000 window."""
    with default_app_page(tmp_path_factory.mktemp("streamlit") / "server.log") as (url, driver):
        yield url, driver
        driver.set_window_size(1400, 1000)


def _open(driver, url: str, query: str, name: str) -> str:
    driver.get(f"{url}/?{query}")
    assert settled(driver, PLOT, timeout=400) is not None, f"{query}: the view never drew its figure"
    time.sleep(1.0)  # Streamlit draws a new chart twice (at the figure's width, then the column's)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"legibility-{name}.png"
    driver.save_screenshot(str(path))
    return str(path)


def _touching(boxes: list[dict], gap: float = MIN_GAP_PX) -> list[tuple[str, str, float]]:
    """Pairs of boxes on one line (overlapping by more than 2 px in height) less than ``gap`` px apart."""
    pairs = []
    for i, one in enumerate(boxes):
        for other in boxes[i + 1:]:
            if min(one["bottom"], other["bottom"]) - max(one["top"], other["top"]) <= 2:
                continue
            apart = max(one["left"], other["left"]) - min(one["right"], other["right"])
            if apart < gap:
                pairs.append((one["text"], other["text"], round(apart, 1)))
    return pairs


@pytest.mark.parametrize("window", [(1400, 1000), (1280, 900)], ids=["1400px", "1280px"])
@pytest.mark.parametrize("view", ["Interventions&input=NIAH", "Spaced+tokens"])
def test_spaced_token_word_labels_keep_a_gap_between_neighbours(page, view, window):
    """Labels are placed for a chart 800 px wide and charts stretch to the column, so from a 1,280-px
    window up the drawn labels have room; placed for a wider chart, "you" and "number" met as "younumber"."""
    url, driver = page
    driver.set_window_size(*window)
    shot = _open(driver, url, f"view={view}", f"words-{view.split('&')[0]}-{window[0]}")
    charts = driver.find_elements("css selector", CHARTS)
    labels = []
    for index in range(len(charts)):
        boxes = driver.execute_script(TEXT_BOXES, index, ".textpoint text")
        labels += boxes
        assert not _touching(boxes), f"chart {index}: word labels closer than {MIN_GAP_PX} px: {_touching(boxes)} ({shot})"
    assert len(labels) >= 20, f"too few word labels to judge: {len(labels)} ({shot})"


def test_heatmap_row_names_stand_off_from_the_cells(page):
    url, driver = page
    shot = _open(driver, url, "view=Word+boundaries&input=Chinese", "row-names")
    area = driver.execute_script(PLOT_AREA, 0)
    names = driver.execute_script(TEXT_BOXES, 0, ".ytick text")
    assert len(names) == 4 and all(" · mean " in name["text"] for name in names), (names, shot)
    closest = area["left"] - max(name["right"] for name in names)
    assert closest >= 4, f"row names {closest:.1f} px from the cells ({shot})"


def test_the_chunk_classes_are_named_apart(page):
    url, driver = page
    shot = _open(driver, url, "view=Heatmaps", "chunk-classes")
    charts = driver.find_elements("css selector", CHARTS)
    strip = [index for index in range(len(charts))
             if "Chunk classification" in driver.execute_script(TEXT_BOXES, index, ".gtitle")[0]["text"]]
    assert len(strip) == 1, shot
    names = driver.execute_script(TEXT_BOXES, strip[0], ".legend .legendtext")
    assert sorted(name["text"] for name in names) == ["constant", "hybrid", "mono"], (names, shot)
    ordered = sorted(names, key=lambda name: name["top"])
    gaps = [below["top"] - above["bottom"] for above, below in zip(ordered, ordered[1:])]
    assert min(gaps) >= MIN_GAP_PX, f"class names {gaps} px apart ({shot})"


def test_the_lines_between_spaced_token_rows_are_in_the_legend(page):
    url, driver = page
    shot = _open(driver, url, "view=Spaced+tokens", "connectors-legend")
    legend = driver.execute_script(PLOT_AREA, 0)["legend"]
    assert "a token across layers" in legend, (legend, shot)


def test_the_log_scale_toggle_says_what_both_attention_mass_charts_show(page):
    url, driver = page
    shot = _open(driver, url, "view=Attention+mass&input=NIAH", "mass-log")
    toggle = driver.find_element("xpath", "//label[.//p[text()='Log scale']]//input")
    charts = driver.find_elements("css selector", CHARTS)
    assert len(charts) == 2, shot
    assert toggle.is_selected()
    assert [driver.execute_script(PLOT_AREA, index)["yaxis"] for index in range(2)] == ["log", "log"], shot
    driver.find_element("xpath", "//label[.//p[text()='Log scale']]").click()
    deadline = time.monotonic() + 120
    types: list[str] = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            types = [driver.execute_script(PLOT_AREA, index)["yaxis"] for index in range(2)]
        except Exception:  # a chart being replaced by the rerun
            continue
        if types == ["linear", "linear"]:
            break
    assert types == ["linear", "linear"] and not toggle.is_selected(), (types, shot)


def test_the_niah_length_is_an_upper_bound_and_the_header_gives_the_prompt_s(page):
    url, driver = page
    shot = _open(driver, url, "view=Interventions&input=NIAH", "niah-length")
    slider = driver.find_element("xpath", "//div[@data-testid='stSlider'][.//p[text()='Length (tokens, at most)']]")
    asked = int(slider.find_element("css selector", '[data-testid="stSliderThumbValue"]').text.replace(",", ""))
    header = driver.find_element("xpath", "//*[contains(text(), ' tokens, ') and contains(text(), ' layers ')]").text
    tokens = int(re.search(r"([\d,]+) tokens, ", header)[1].replace(",", ""))
    assert asked - 16 <= tokens <= asked, (asked, header, shot)
    assert slider.find_elements("css selector", '[data-testid="stTooltipIcon"]'), f"no help on the slider ({shot})"
