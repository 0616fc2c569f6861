"""README.md is a user's page; CITATION.cff, CHANGELOG.md and the version agree.

The README stays short, cites papers by title and arXiv id (never by files a user does not have),
links only to files that exist, and keeps development history out (that goes to CHANGELOG.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import repo_lens

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MAX_README_LINES = 250

# what a user's page never says: files and trackers a user does not have, and development history
INTERNAL = {
    "a source file of the project's design notes": re.compile(r"seeds/\d|DESIGN\.md"),
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a before/after comparison": re.compile(r"\bbefore\s*/\s*after\b|\|\s*before\b", re.IGNORECASE),
    "a session of the project": re.compile(r"\bsession of (?:this|the) project|\bno session\b", re.IGNORECASE),
}


def test_readme_is_short():
    assert len(README.splitlines()) <= MAX_README_LINES


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_user_pages_hold_no_internal_references(page: Path):
    text = page.read_text(encoding="utf-8")
    found = {what: pattern.findall(text) for what, pattern in INTERNAL.items() if pattern.search(text)}
    assert not found, f"{page.name}: {found}"


def test_readme_has_the_sections_a_user_looks_for():
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    for expected in ("Install", "Quickstart", "The app", "Notebooks", "Figures for papers", "Citing", "Tests"):
        assert expected in headings, headings
    assert 'repo_lens.load("SakanaAI/RePo-OLMo2-1B-stage2-L5")' in README
    assert 'repo_lens.load("zoo:bytes1k-repo")' in README
    assert 'pip install ".[app,notebooks]"' in README and "make test" in README and "repo-lens app" in README
    assert re.search(r"RePo: Language Models with Context Re-Positioning\",\s+arXiv\s+2512\.14391", README)


def test_readme_links_point_at_files_that_exist():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if not re.match(r"[a-z]+://", target):
            assert (ROOT / target).exists(), target


def test_the_published_context_is_stated_one_way():
    """The published model's training context is 4,096 tokens wherever a page states it."""
    for page in USER_PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\b8K context|context (?:of )?8,?192\b", text), page.name


def test_citation_file_names_the_toolkit_and_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["message"] and cff["title"] and cff["authors"]
    assert str(cff["version"]) == repo_lens.__version__
    assert cff["license"] == "Apache-2.0"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert (declared if isinstance(declared, str) else declared["text"]) == "Apache-2.0"
    [paper] = [ref for ref in cff["references"] if "RePo" in ref["title"]]
    assert paper["title"] == "RePo: Language Models with Context Re-Positioning"
    assert paper["type"] == "article" and paper["year"] == 2025
    assert [author["family-names"] for author in paper["authors"]] == ["Li", "Zhao", "Cai", "Sproat"]
    assert any(identifier["value"] == "arXiv:2512.14391" for identifier in paper["identifiers"])


def test_changelog_has_the_current_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(repo_lens.__version__)} — \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE)
    assert re.search(r"^## Unreleased$", changelog, re.MULTILINE)
