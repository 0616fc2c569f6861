"""Few-shot prompts ("Input: … Output: …" examples, then the query) with a span per example."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from repo_lens.data.spans import Prompt, PromptBuilder
from repo_lens.errors import InputError


def fewshot_prompt(
    tokenizer: Any,
    examples: Sequence[tuple[str, str]],
    query: str,
    answer: str = "",
    *,
    instruction: str | None = None,
    input_prefix: str = "Input: ",
    output_prefix: str = "Output:",
    separator: str = "\n\n",
    append_answer: bool = True,
    last_k: int = 1,
    add_special_tokens: bool = True,
) -> Prompt:
    """A few-shot prompt: optional instruction, examples, then the query input and output prefix.

    Spans: ``instruction``; ``example_{i}`` (the whole example), ``example_{i}_input``,
    ``example_{i}_output`` (the texts only); ``query_input``; ``query`` (the final input line
    and the output prefix); ``answer`` when an answer is appended (then the query rows are
    its tokens, else the last ``last_k`` tokens).

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
        tokenizer, answer, append_answer=append_answer, last_k=last_k, trim_from="query",
        meta={"task": "fewshot", "n_examples": len(examples)}, add_special_tokens=add_special_tokens,
    )
