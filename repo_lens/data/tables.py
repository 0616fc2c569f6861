"""Linearised tables (markdown-like rows or "col: value | col: value" rows) with cell spans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from repo_lens.data.spans import Prompt, PromptBuilder, PromptEncoding
from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default

STYLES = ("markdown", "pairs")


@grouped_keywords("encoding", PromptEncoding)
def table_prompt(
    tokenizer: Any,
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    question: str | None = None,
    answer: str = "",
    *,
    style: str = "markdown",
    instruction: str | None = None,
    encoding: PromptEncoding | None = None,
) -> Prompt:
    """A table as text, then an optional question.

    ``style="markdown"``: ``| a | b |`` header, ``|---|---|`` rule, one ``| x | y |`` line per row.
    ``style="pairs"``: one ``a: x | b: y`` line per row (the header repeats in every row).
    Spans: ``header_{col}`` (header cells; in "pairs" style the first row's labels),
    ``cell_{row}_{col}`` (the cell text only), ``row_{row}`` (the whole line), ``table``,
    ``instruction``, ``question``/``query`` (the question) and ``answer`` when appended
    (then the query rows are its tokens, else the last ``encoding.last_k`` tokens; ``encoding``:
    :class:`repo_lens.data.spans.PromptEncoding`).

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = table_prompt(ByteTokenizer(), ["city", "pop"], [["Oslo", 0.7], ["Rome", 2.8]],
        ...                  "Which city has 2.8 million people?", "Rome")
        >>> print(p.text)
        | city | pop |
        |---|---|
        | Oslo | 0.7 |
        | Rome | 2.8 |
        Which city has 2.8 million people? Rome
        >>> p.span_text("cell_1_0"), p.span_text("header_1")
        ('Rome', 'pop')
    """
    header = _checked_table(header, rows, style)
    encoding = options_or_default(encoding, PromptEncoding, "encoding")
    b = PromptBuilder()
    if instruction:
        b.add(instruction, "instruction")
        b.add("\n")
    (_add_markdown if style == "markdown" else _add_pairs)(b, header, rows)
    if question:
        b.add("\n")
        b.add(question, "question", "query")
    return b.build(
        tokenizer, answer, append_answer=encoding.append_answer, last_k=encoding.last_k, trim_from="query",
        meta={"task": "table", "style": style, "n_rows": len(rows), "n_cols": len(header)},
        add_special_tokens=encoding.add_special_tokens,
    )


def _checked_table(header: Sequence[str], rows: Sequence[Sequence[Any]], style: str) -> list[str]:
    """The header as strings, once the style, the header and every row's width are valid."""
    if style not in STYLES:
        raise InputError(f"unknown table style {style!r}; use one of {STYLES}")
    header = [str(cell) for cell in header]
    if not header or any(not cell.strip() for cell in header):
        raise InputError("the header must be a non-empty list of non-empty column names")
    for index, row in enumerate(rows):
        if isinstance(row, str) or len(row) != len(header):
            raise InputError(f"row {index} has {len(row)} cells for {len(header)} columns; give one cell per column")
    if style == "pairs" and not rows:
        raise InputError('style="pairs" needs at least one row (the header is written in each row)')
    return header


def _add_markdown(b: PromptBuilder, header: list[str], rows: Sequence[Sequence[Any]]) -> None:
    """``| a | b |`` header, ``|---|---|`` rule, one ``| x | y |`` line per row."""
    b.add("| ", "table")
    for col, name in enumerate(header):
        b.add(name, "table", f"header_{col}")
        b.add(" | " if col < len(header) - 1 else " |", "table")
    b.add("\n" + "|---" * len(header) + "|", "table")
    for row_index, row in enumerate(rows):
        b.add("\n", "table")
        b.add("| ", "table", f"row_{row_index}")
        for col, cell in enumerate(row):
            b.add(_cell_text(cell, row_index, col), "table", f"row_{row_index}", f"cell_{row_index}_{col}")
            b.add(" | " if col < len(header) - 1 else " |", "table", f"row_{row_index}")


def _add_pairs(b: PromptBuilder, header: list[str], rows: Sequence[Sequence[Any]]) -> None:
    """One ``a: x | b: y`` line per row; the first row's labels are the header spans."""
    for row_index, row in enumerate(rows):
        if row_index:
            b.add("\n", "table")
        for col, cell in enumerate(row):
            label = [f"header_{col}"] if row_index == 0 else []
            b.add(header[col], "table", f"row_{row_index}", *label)
            b.add(": ", "table", f"row_{row_index}")
            b.add(_cell_text(cell, row_index, col), "table", f"row_{row_index}", f"cell_{row_index}_{col}")
            if col < len(header) - 1:
                b.add(" | ", "table", f"row_{row_index}")


def _cell_text(cell: Any, row: int, col: int) -> str:
    text = str(cell).replace("\n", " ")
    if not text.strip():
        raise InputError(f"cell ({row}, {col}) is empty; write a placeholder such as '-' for missing values")
    return text
