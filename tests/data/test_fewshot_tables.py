"""Few-shot and table prompts: per-example and per-cell spans that decode to their text."""

from __future__ import annotations

import pytest

from repo_lens.data.fewshot import fewshot_prompt
from repo_lens.data.tables import table_prompt
from repo_lens.errors import InputError
from prompt_tokenizers import bpe_tokenizer, byte_tokenizer, tokenizer, word_tokenizer  # noqa: F401  (fixtures)


def squash(text: str) -> str:
    return "".join(text.split())


def assert_spans_decode(tokenizer, prompt):
    for name, (start, end) in prompt.spans.items():
        decoded = tokenizer.decode([int(i) for i in prompt.ids[start:end]])
        assert squash(decoded) == squash(prompt.span_text(name)), name


def test_fewshot_spans(tokenizer):
    examples = [("cat", "chat"), ("dog", "chien"), ("the sky", "le ciel")]
    prompt = fewshot_prompt(tokenizer, examples, "bird", "oiseau", instruction="Translate to French.")
    assert prompt.text.startswith("Translate to French.\n\nInput: cat\nOutput: chat\n\n")
    assert prompt.text.endswith("Input: bird\nOutput: oiseau")
    for index, (source, target) in enumerate(examples):
        assert prompt.span_text(f"example_{index}") == f"Input: {source}\nOutput: {target}"
        assert prompt.span_text(f"example_{index}_input") == source
        assert prompt.span_text(f"example_{index}_output") == target
    assert prompt.span_text("query") == "Input: bird\nOutput:" and prompt.span_text("query_input") == "bird"
    assert prompt.query == prompt.spans["answer"] and prompt.answer == "oiseau"
    starts = [prompt.spans[f"example_{i}"][0] for i in range(3)]
    assert starts == sorted(starts) and prompt.spans["example_2"][1] <= prompt.spans["query"][0]
    assert prompt.meta == {"task": "fewshot", "n_examples": 3}
    assert_spans_decode(tokenizer, prompt)


def test_fewshot_without_answer_uses_last_token(byte_tokenizer):
    prompt = fewshot_prompt(byte_tokenizer, [("1", "2")], "3")
    assert prompt.query == (len(prompt.ids) - 1, len(prompt.ids))
    assert prompt.spans["query"][1] == prompt.query[0]


@pytest.mark.parametrize("examples,query,message", [
    ([("a", "")], "q", "example 0 must be an"),
    (["abc"], "q", "example 0 must be an"),
    ([("a", "b")], " ", "query must be non-empty"),
])
def test_fewshot_bad_input(byte_tokenizer, examples, query, message):
    with pytest.raises(InputError, match=message):
        fewshot_prompt(byte_tokenizer, examples, query)


@pytest.mark.parametrize("style", ["markdown", "pairs"])
def test_table_cells(tokenizer, style):
    header = ["city", "country", "population"]
    rows = [["Rome", "Italy", 2.8], ["Oslo", "Norway", 0.7]]
    prompt = table_prompt(tokenizer, header, rows, "Which city is in Norway?", "Oslo", style=style)
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            assert prompt.span_text(f"cell_{r}_{c}") == str(cell)
    for c, name in enumerate(header):
        assert prompt.span_text(f"header_{c}") == name
    assert prompt.span_text("question") == "Which city is in Norway?" and prompt.span_text("answer") == "Oslo"
    if style == "markdown":
        assert prompt.text.splitlines()[:3] == ["| city | country | population |", "|---|---|---|",
                                                "| Rome | Italy | 2.8 |"]
        assert prompt.span_text("row_1") == "| Oslo | Norway | 0.7 |"
    else:
        assert prompt.text.splitlines()[1] == "city: Oslo | country: Norway | population: 0.7"
        assert prompt.span_text("row_0") == "city: Rome | country: Italy | population: 2.8"
    assert_spans_decode(tokenizer, prompt)
    cells = sorted(span for name, span in prompt.spans.items() if name.startswith(("cell_", "header_")))
    assert all(a[1] <= b[0] for a, b in zip(cells, cells[1:]))  # cells and headers are disjoint


@pytest.mark.parametrize("header,rows,style,message", [
    (["a", "b"], [["x"]], "markdown", "row 0 has 1 cells for 2 columns"),
    ([], [], "markdown", "the header must be a non-empty list"),
    (["a"], [[""]], "markdown", r"cell \(0, 0\) is empty"),
    (["a"], [["x"]], "html", "unknown table style 'html'"),
    (["a"], [], "pairs", 'style="pairs" needs at least one row'),
])
def test_table_bad_input(byte_tokenizer, header, rows, style, message):
    with pytest.raises(InputError, match=message):
        table_prompt(byte_tokenizer, header, rows, style=style)
