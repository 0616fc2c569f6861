"""The prompt builders' keyword forms from before NiahSpec, FewshotLayout and PromptEncoding still build
the very same prompt, with a DeprecationWarning that names the options object."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.data import (FewshotLayout, NiahSpec, PromptEncoding, fewshot_prompt, niah_multikey, niah_prompt,
                            niah_single, table_prompt)
from repo_lens.model.byte_tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()


def same_prompt(old, new) -> None:
    assert old.text == new.text and np.array_equal(old.ids, new.ids)
    assert old.spans == new.spans and old.query == new.query and old.meta == new.meta


def test_niah_keywords_become_its_spec_and_encoding():
    new = niah_prompt(TOKENIZER, 900, 0.3, spec=NiahSpec(num_keys=3, key_type="numbers", value_digits=5), seed=2,
                      encoding=PromptEncoding(append_answer=False, last_k=2, add_special_tokens=False))
    with pytest.warns(DeprecationWarning) as caught:
        old = niah_prompt(TOKENIZER, 900, 0.3, num_keys=3, key_type="numbers", value_digits=5, seed=2,
                          append_answer=False, last_k=2, add_special_tokens=False)
    same_prompt(old, new)
    assert len(new.meta["needles"]) == 3 and new.meta["keys"][0].isdigit() and new.query == (len(new.ids) - 2, len(new.ids))
    messages = " | ".join(str(warning.message) for warning in caught)
    assert "pass spec=NiahSpec(num_keys=..., key_type=..., value_digits=...) instead" in messages
    assert "pass encoding=PromptEncoding(append_answer=..., last_k=..., add_special_tokens=...) instead" in messages


def test_the_ruler_variants_take_the_old_keywords_too():
    with pytest.warns(DeprecationWarning, match=r"niah_multikey\(key_type=...\) is deprecated"):
        old = niah_multikey(TOKENIZER, 900, num_keys=2, key_type="numbers", seed=1)
    same_prompt(old, niah_multikey(TOKENIZER, 900, num_keys=2, spec=NiahSpec(key_type="numbers"), seed=1))
    with pytest.warns(DeprecationWarning, match=r"niah_single\(append_answer=...\) is deprecated"):
        old = niah_single(TOKENIZER, 700, append_answer=False)
    same_prompt(old, niah_single(TOKENIZER, 700, encoding=PromptEncoding(append_answer=False)))


def test_fewshot_keywords_become_its_layout_and_encoding():
    examples = [("cat", "chat"), ("dog", "chien")]
    new = fewshot_prompt(TOKENIZER, examples, "bird", "oiseau", instruction="Translate.",
                         layout=FewshotLayout(input_prefix="Q: ", output_prefix="A:", separator="\n"),
                         encoding=PromptEncoding(add_special_tokens=False))
    with pytest.warns(DeprecationWarning) as caught:
        old = fewshot_prompt(TOKENIZER, examples, "bird", "oiseau", instruction="Translate.", input_prefix="Q: ",
                             output_prefix="A:", separator="\n", add_special_tokens=False)
    same_prompt(old, new)
    messages = " | ".join(str(warning.message) for warning in caught)
    assert "pass layout=FewshotLayout(input_prefix=..., output_prefix=..., separator=...) instead" in messages
    assert "pass encoding=PromptEncoding(add_special_tokens=...) instead" in messages
    assert new.text == "Translate.\nQ: cat\nA: chat\nQ: dog\nA: chien\nQ: bird\nA: oiseau"


def test_table_keywords_become_its_encoding():
    header, rows = ["city", "pop"], [["Oslo", 0.7], ["Rome", 2.8]]
    new = table_prompt(TOKENIZER, header, rows, "Which city?", "Rome", style="pairs",
                       encoding=PromptEncoding(append_answer=False, last_k=3))
    with pytest.warns(DeprecationWarning, match=r"table_prompt\(append_answer=..., last_k=...\) is deprecated"):
        old = table_prompt(TOKENIZER, header, rows, "Which city?", "Rome", style="pairs", append_answer=False,
                           last_k=3)
    same_prompt(old, new)
    assert "answer" not in new.spans and new.query == (len(new.ids) - 3, len(new.ids))
