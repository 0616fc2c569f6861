"""Write the hook table of docs/guide/hook-points.md from the one table in code, repo_lens.model.hook_shapes.

The section between the two markers below is generated: edit a hook's shape or text in
repo_lens/model/hook_shapes.py, then run this script. The name of the attention's submodule that holds the
position mechanism is read from a model. tests/docs/test_hook_table.py fails when the page is out of date.

    python docs/hook_table.py           # rewrite the section
    python docs/hook_table.py --check   # exit 1 if the page differs from the table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repo_lens.atomic import atomic_write_text  # noqa: E402
from repo_lens.model.hook_shapes import markdown_section, mechanism_submodule  # noqa: E402

PAGE = ROOT / "docs" / "guide" / "hook-points.md"
BEGIN = "<!-- hook table: written by docs/hook_table.py from repo_lens/model/hook_shapes.py; edit it there -->"
END = "<!-- end of the hook table -->"


def generated_section() -> str:
    """The section as the table in code gives it, for the attention submodule name a model uses."""
    from repo_lens.model.tiny import tiny_model

    return markdown_section(mechanism_submodule(tiny_model("rope", n_layers=1).blocks[0].attn))


def with_section(page: str, section: str) -> str:
    """``page`` with the text between its markers replaced by ``section``."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise SystemExit(f"{PAGE} must hold the markers {BEGIN!r} and {END!r} once each, in that order")
    head, rest = page.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{section}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from the table")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    updated = with_section(page, generated_section())
    if args.check:
        if updated != page:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python docs/hook_table.py", file=sys.stderr)
            return 1
        return 0
    if updated != page:
        atomic_write_text(PAGE, updated)
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
