"""A griffe extension for the API pages: docstrings render as their authors meant them.

* ``Example:`` opens an examples section (griffe's Google parser knows only ``Examples:``);
* ``>>>`` examples outside such a section become ``pycon`` code blocks;
* Sphinx roles (``:func:`~repo_lens.x.y```) become inline code (``y``, or the full path);
* the project's own names for its sources (a numbered source file) become the sources' names, as a
  reader of the site knows them.
"""

from __future__ import annotations

import re

import griffe

_SECTION = re.compile(r"^(?P<indent>\s*)Examples?:\s*$")
# the papers and the post, by the numbers of the files they are kept in
_SOURCES = {"1": "the RePo paper", "2": "the learned-increments post", "3": "the GRAPE paper", "4": "the CoPE paper"}
_SOURCE = re.compile(r"seeds/00(?P<number>[1-4])(?:_\w+\.txt)?")
_ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|obj|exc):`(?P<tilde>~?)(?P<target>[^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match["target"]
    return f"`{target.rsplit('.', 1)[-1] if match['tilde'] else target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rewrite(text: str) -> str:
    """The docstring ``text`` with examples sections named for griffe and stray doctests fenced
    (tests/docs/test_docs_build.py shows a case)."""
    text = _SOURCE.sub(lambda match: _SOURCES[match["number"]], _ROLE.sub(_role, text))
    lines, out, section_indent, index = text.split("\n"), [], None, 0
    while index < len(lines):
        line = lines[index]
        if line.strip() and section_indent is not None and _indent(line) <= section_indent:
            section_indent = None
        heading = _SECTION.match(line)
        if heading:
            section_indent = len(heading["indent"])
            out.append(f"{heading['indent']}Examples:")
            index += 1
            continue
        if section_indent is None and line.lstrip().startswith(">>>"):
            pad = " " * _indent(line)
            out.append(f"{pad}```pycon")
            while index < len(lines) and lines[index].strip():
                out.append(lines[index])
                index += 1
            out.append(f"{pad}```")
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrite every docstring griffe loads (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
