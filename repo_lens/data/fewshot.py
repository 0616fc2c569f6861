"""Few-shot prompts ("Input: … Output: …" examples, then the query) with a span per example."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from repo_lens.data.spans import Prompt, PromptBuilder, PromptEncoding
from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default


@dataclass(frozen=True, kw_only=True)
class FewshotLayout:
    """How a few-shot prompt is written around its texts: ``input_prefix`` before each input, ``output_prefix``
    on the line after it (then a space and the output), ``separator`` between examples.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> layout = FewshotLayout(input_prefix="Q: ", output_prefix="A:", separator="\\n")
        >>> fewshot_prompt(ByteTokenizer(), [("1+1", "2")], "2+2", "4", layout=layout).text
        'Q: 1+1\\nA: 2\\nQ: 2+2\\nA: 4'
    """

    input_prefix: str = "Input: "
    output_prefix: str = "Output:"
    separator: str = "\n\n"


@grouped_keywords("layout", FewshotLayout)
@grouped_keywords("encoding", PromptEncoding)
def fewshot_prompt(
    tokenizer: Any,
    examples: Sequence[tuple[str, str]],
    query: str,
    answer: str = "",
    *,
    instruction: str | None = None,
    layout: FewshotLayout | None = None,
    encoding: PromptEncoding | None = None,
) -> Prompt:
    """A few-shot prompt: optional instruction, examples, then the query input and output prefix.

    Spans: ``instruction``; ``example_{i}`` (the whole example), ``example_{i}_input``,
    ``example_{i}_output`` (the texts only); ``query_input``; ``query`` (the final input line
    and the output prefix); ``answer`` when an answer is appended (then the query rows are
    its tokens, else the last ``encoding.last_k`` tokens). ``layout``: the prefixes and the separator
    (:class:`FewshotLayout`); ``encoding``: :class:`repo_lens.data.spans.PromptEncoding`.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = fewshot_prompt(ByteTokenizer(), [("cat", "chat"), ("dog", "chien")], "bird", "oiseau")
        >>> p.text
        'Input: cat\\nOutput: chat\\n\\nInput: dog\\nOutput: chien\\n\\nInput: bird\\nOutput: oiseau'
        >>> p.span_text("example_1_output"), p.span_text("answer")
        ('chien', 'oiseau')
    """
    if not examples and not query:
        raise InputError("a few-shot prompt needs examples or a query")
    if not isinstance(query, str) or not query.strip():
        raise InputError("query must be non-empty text (the input the model should answer)")
    layout = options_or_default(layout, FewshotLayout, "layout")
    encoding = options_or_default(encoding, PromptEncoding, "encoding")
    input_prefix, output_prefix, separator = layout.input_prefix, layout.output_prefix, layout.separator
    b = PromptBuilder()
    if instruction:
        b.add(instruction, "instruction")
        b.add(separator)
    for index, example in enumerate(examples):
        try:
            source, target = example
        except (TypeError, ValueError):
            raise InputError(f"example {index} must be an (input, output) pair of strings; got {example!r}") from None
        if not isinstance(source, str) or not isinstance(target, str) or not source or not target:
            raise InputError(f"example {index} must be an (input, output) pair of non-empty strings; got {example!r}")
        name = f"example_{index}"
        b.add(input_prefix, name)
        b.add(source, name, f"{name}_input")
        b.add("\n" + output_prefix + " ", name)
        b.add(target, name, f"{name}_output")
        b.add(separator)
    b.add(input_prefix, "query")
    b.add(query, "query", "query_input")
    b.add("\n" + output_prefix, "query")
    return b.build(
        tokenizer, answer, append_answer=encoding.append_answer, last_k=encoding.last_k, trim_from="query",
        meta={"task": "fewshot", "n_examples": len(examples)}, add_special_tokens=encoding.add_special_tokens,
    )
