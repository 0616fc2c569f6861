"""In a real browser at the default width, on the default model: no box or control cuts its text,
every chosen layer and head shows as a chip clear of the clear button, the word-boundary view names
one count per concept, and the spaced-token view labels its rows with words of the input.

Skipped only when no Chromium is installed and CI is not set (`make browser` installs it).
"""

from __future__ import annotations

import os
import re

import pytest
from browser_helpers import CHROMIUM, PLOT, ROOT, default_app_page, settled

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "build" / "screenshots"

if not CHROMIUM and not os.environ.get("CI"):
    pytest.skip("no Chromium installed (make browser installs it); the browser test runs in CI",
                allow_module_level=True)

# For every select box: its shown value and whether the box is narrower than that text. For every
# multi-select: its chips, whether the chips' strip scrolls (some hidden), and the chips the
# clear-all button covers.
MEASURE = """
const root = arguments[0] ? document.querySelector(arguments[0]) : document;
const label = box => (box.querySelector('label') || {innerText: ''}).innerText.trim();
const boxes = [...root.querySelectorAll('[data-testid="stSelectbox"] input[role="combobox"]')].map(input => ({
  label: label(input.closest('[data-testid="stSelectbox"]')), value: input.value,
  cut: input.scrollWidth > input.clientWidth + 1}));
const chips = [...root.querySelectorAll('[data-testid="stMultiSelect"]')].map(box => {
  const strip = box.querySelector('[data-testid="stMultiSelectTagsContainer"]');
  const clear = box.querySelector('button[aria-label="Clear all"]');
  const tags = [...box.querySelectorAll('[data-testid="stMultiSelectTagsContainer"] [data-tag]')];
  const r = clear ? clear.getBoundingClientRect() : null;
  const covered = !r ? [] : tags.filter(tag => { const q = tag.getBoundingClientRect();
    return q.left < r.right && r.left < q.right && q.top < r.bottom && r.top < q.bottom; });
  return {label: label(box), tags: tags.map(tag => tag.innerText.trim()),
          scrolls: strip.scrollWidth > strip.clientWidth + 1, covered: covered.map(tag => tag.innerText.trim())};
});
return {boxes, chips};
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The app as `repo-lens app` serves it, on zoo:bytes1k-repo, in a 1,400 × 1,000 window."""
    with default_app_page(tmp_path_factory.mktemp("streamlit") / "server.log") as (url, driver):
        yield url, driver


def _shot(driver, name: str) -> str:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return str(path)


def test_the_interventions_controls_and_the_model_box_show_their_whole_text(page):
    url, driver = page
    driver.get(f"{url}/?view=Interventions&input=NIAH")
    assert settled(driver, PLOT, timeout=400) is not None, "the Interventions view never drew its figure"
    shot = _shot(driver, "interventions-controls")
    found = driver.execute_script(MEASURE, None)
    boxes = {box["label"]: box for box in found["boxes"]}
    assert boxes["Model"]["value"] == "zoo:bytes1k-repo" and boxes["Spaced tokens of"]["value"] == "mean of heads"
    assert not [box for box in found["boxes"] if box["cut"]], f"boxes cutting their text: {found['boxes']} ({shot})"
    captions = [one.text for one in driver.find_elements(
        "css selector", '[data-testid="stSidebar"] [data-testid="stCaptionContainer"]')]
    assert any(text.startswith("4×4 · ctx 1,024 · ") for text in captions), captions  # the size, under the box
    chips = {one["label"]: one for one in found["chips"]}
    assert chips["Heads"]["tags"] == ["h0", "h1", "h2", "h3"] and chips["Layers"]["tags"] == ["L2 repo", "L3 repo"]
    for one in found["chips"]:
        assert not one["scrolls"] and not one["covered"], f"{one['label']}: chips hidden {one} ({shot})"


def test_word_boundaries_name_one_count_per_concept(page):
    url, driver = page
    driver.get(f"{url}/?view=Word+boundaries&input=Chinese")
    assert settled(driver, PLOT, timeout=400) is not None
    shot = _shot(driver, "word-boundaries-counts")
    title = driver.find_element("css selector", f"{PLOT} .gtitle").text
    expander = driver.find_element("css selector", '[data-testid="stExpander"] summary').text
    gaps = re.search(r"(\d+) scored gaps", title)
    words = re.search(r"jieba segmentation: (\d+) words; (\d+) of the (\d+) scored gaps end a word$", expander)
    assert gaps and words, (title, expander, shot)
    assert words[3] == gaps[1] and 0 < int(words[2]) < int(words[3])  # the same gaps, counted once
    assert "scored boundaries" not in driver.find_element("css selector", "body").text


# The label texts drawn in the SVG over each spaced-token row (the text traces; the tick marks are path
# shapes), by the row's name on the y axis, and the names of the rows drawn as tick marks.
SPACED_LABELS = """
const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
const names = gd._fullLayout.yaxis.ticktext;
const rows = {};
for (const g of gd.querySelectorAll('.scatterlayer .trace')) {
  const trace = g.__data__ && g.__data__[0] && g.__data__[0].trace;
  const texts = [...g.querySelectorAll('.textpoint text')].map(t => t.textContent);
  if (!trace || !texts.length) continue;
  const name = names[trace.y[0]];
  rows[name] = (rows[name] || []).concat(texts);
}
const ticks = (gd.layout.shapes || []).map(s => s.name || '').filter(n => n.startsWith('marks of layer'));
return {rows, ticks};
"""
SPACE_GLYPHS = {"\u2423": " ", "\u21b5": "\n"}  # ␣ and ↵, as the figure shows a space and a newline


def _whole_word(piece: str, text: str) -> bool:
    """Whether ``piece`` occurs in ``text`` with whitespace (or the text's ends) on both sides."""
    return re.search(rf"(?<!\S){re.escape(piece)}(?!\S)", text) is not None


def test_spaced_token_labels_read_as_words_of_the_input(page):
    """The default Spaced tokens view (default model, default text, rows drawn as tick marks) labels
    its rows with text of the input shown in the Text box: every drawn label (spaces shown as "␣"
    mapped back) is a contiguous piece of it, a whole word or, where a learned position pulls a word's
    tokens apart, a piece of two characters or more; in the rope rows, where tokens keep their order,
    at least 80 % of the labels are whole words; and no label is a lone "␣" over its tick.

    Guards against the old labels, every k-th byte token: single bytes (not whole words, one character
    each) and space tokens drawn as "␣" over their tick mark (where it reads as "ψ")."""
    url, driver = page
    driver.get(f"{url}/?view=Spaced+tokens")
    assert settled(driver, PLOT, timeout=400) is not None, "the Spaced tokens view never drew its figure"
    shot = _shot(driver, "spaced-token-labels")
    text = driver.find_element("css selector", '[data-testid="stSidebar"] textarea').get_attribute("value")
    found = driver.execute_script(SPACED_LABELS)
    rows = found["rows"]
    labels = [label for row in rows.values() for label in row]
    assert found["ticks"] and text and len(labels) >= 10, (found, len(text), shot)  # marks, with words over them
    assert not [label for label in labels if label.strip() in ("", "\u2423")], f"a lone space label: {rows} ({shot})"
    spelled = {label: "".join(SPACE_GLYPHS.get(char, char) for char in label) for label in labels}
    outside = [label for label, plain in spelled.items() if plain not in text]
    assert not outside, f"labels that are no contiguous piece of the input: {outside} ({shot})"
    whole = {label for label, plain in spelled.items() if _whole_word(plain, text)}
    scraps = [label for label in labels if label not in whole and len(spelled[label]) < 2]
    assert not scraps, f"single characters that are no word: {scraps} ({shot})"
    rope = [label for name, row in rows.items() if name.endswith("rope") for label in row]
    assert len(rope) >= 10, (rows, shot)
    share = sum(label in whole for label in rope) / len(rope)
    assert share >= 0.8, f"{share:.0%} of the rope rows' labels are whole words: {rows} ({shot})"
