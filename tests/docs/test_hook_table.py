"""The hook table of docs/guide/hook-points.md is the one in code (repo_lens.model.hook_shapes), as
docs/hook_table.py writes it: every row's name, shape and text, for the attention submodule a model uses."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))

import hook_table  # noqa: E402

from repo_lens.model.hook_shapes import HOOKS, hook_name, mechanism_submodule  # noqa: E402
from repo_lens.model.tiny import tiny_model  # noqa: E402


def page_rows() -> dict[str, str]:
    """Hook name -> its shape cell, read from the page's generated section."""
    page = hook_table.PAGE.read_text(encoding="utf-8")
    section = page.split(hook_table.BEGIN, 1)[1].split(hook_table.END, 1)[0]
    return dict(re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", section, flags=re.MULTILINE))


def test_the_page_holds_the_section_the_table_gives():
    page = hook_table.PAGE.read_text(encoding="utf-8")
    assert hook_table.with_section(page, hook_table.generated_section()) == page, \
        "docs/guide/hook-points.md is out of date: run python docs/hook_table.py"
    assert hook_table.main(["--check"]) == 0


def test_every_hook_has_its_row_with_the_tables_shape_under_the_models_names():
    rows = page_rows()
    mechanism = mechanism_submodule(tiny_model("rope", n_layers=1).blocks[0].attn)
    assert len(rows) == len(HOOKS)
    for hook in HOOKS:
        name = hook_name(hook.name, mechanism)
        assert name in rows, f"{name} has no row on the hook-points page"
        assert rows[name].strip().split(" or ")[0] == "[" + ", ".join(hook.shape) + "]", name


def test_a_changed_page_is_found_out_of_date(tmp_path, monkeypatch):
    page = tmp_path / "hook-points.md"
    original = hook_table.PAGE.read_text(encoding="utf-8")
    page.write_text(original.replace("| [batch, head, pos] |", "| [batch, pos, head] |", 1), encoding="utf-8")
    monkeypatch.setattr(hook_table, "PAGE", page)
    monkeypatch.setattr(hook_table, "ROOT", tmp_path)
    assert hook_table.main(["--check"]) == 1
    assert hook_table.main([]) == 0 and page.read_text(encoding="utf-8") == original
