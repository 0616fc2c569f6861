"""The documentation site builds with ``mkdocs build --strict``: no warning (broken links, pages
missing from the nav, docstrings griffe cannot parse) and every page in the nav."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))

from griffe_doctest import rewrite  # noqa: E402

pytestmark = pytest.mark.slow

needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None and not os.environ.get("CI"),
                                  reason="mkdocs is not installed (pip install '.[docs]'; make setup installs it)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log[-8000:]}"
    return out, log


@needs_mkdocs
def test_strict_build_has_no_warnings(site):
    _, log = site
    warnings = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)


@needs_mkdocs
def test_the_build_is_quiet(site):
    """No third-party start-up chatter: jieba (which the search plugin uses on Chinese text) stays silent."""
    _, log = site
    assert not re.search(r"prefix dict|Loading model|Dumping model", log), log[-3000:]


@needs_mkdocs
def test_long_signatures_are_formatted_one_parameter_a_line(site):
    """mkdocstrings formats a signature with ruff (the docs extra): a long one breaks between its parameters
    instead of running on one line with a horizontal scroll."""
    out, _ = site
    page = (out / "api" / "studies" / "index.html").read_text(encoding="utf-8")
    block = re.search(r'id="repo_lens\.studies\.runner\.analyze".*?<code>(.*?)</code>', page, re.DOTALL)
    assert block, "the signature of analyze is not on the page"
    lines = re.sub(r"<[^>]+>", "", block.group(1)).splitlines()
    assert len(lines) > 5 and max(map(len, lines)) < 100, lines
    assert any(line.strip().startswith("windows") for line in lines), lines


@needs_mkdocs
def test_every_page_is_in_the_nav(site):
    _, log = site
    assert "not included in the \"nav\"" not in log, log


@needs_mkdocs
def test_the_api_reference_is_generated_from_docstrings(site):
    out, _ = site
    analysis = (out / "api" / "analysis" / "index.html").read_text(encoding="utf-8")
    assert "range_stats" in analysis and "max_t z" in analysis  # a signature and its docstring
    front = (out / "api" / "repo_lens" / "index.html").read_text(encoding="utf-8")
    assert all(name in front for name in ("repo_lens.loading.load", "Lens", "Trace"))
    assert "&gt;&gt;&gt;" in analysis and "<code" in analysis  # doctest examples render as code
    changelog = (out / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "0.1.0" in changelog  # CHANGELOG.md is included, not copied


def test_docstrings_render_their_examples_as_code():
    text = "Intro, see :func:`~repo_lens.analysis.range_stats`.\n\n>>> 1 + 1\n2\n\nExample:\n    >>> 3\n    3"
    assert rewrite(text).splitlines() == [
        "Intro, see `range_stats`.", "", "```pycon", ">>> 1 + 1", "2", "```", "",
        "Examples:", "    >>> 3", "    3"]
    assert rewrite("See :mod:`repo_lens.plots`.") == "See `repo_lens.plots`."
    assert rewrite("seeds/002's categories (seeds/004_e70.txt)") == "the learned-increments post's categories (the CoPE paper)"


@needs_mkdocs
def test_the_site_names_no_file_a_reader_lacks(site):
    out, _ = site
    for page in sorted(out.rglob("*.html")):
        text = re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))
        assert not re.search(r"seeds/\d|DESIGN\.md|\bissue \d+", text), page.relative_to(out)
