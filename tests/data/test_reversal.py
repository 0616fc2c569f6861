"""The text-reversal task's format (RePo App. C): one home shared by training and the prompt builder."""

from __future__ import annotations

import random

import pytest

from repo_lens.data import REVERSAL_PROMPT, reversal_prompt, reversal_sequence, reversal_words
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer


def test_reversal_sequence_hand_case():
    tokens, answer_start = reversal_sequence(["ba", "ko", "mi"])
    assert tokens == ["<bos>", "Reverse", "the", "following", "words", ":", "ba", "ko", "mi", "<sep>",
                      "mi", "ko", "ba", "<eos>"]
    assert tokens[answer_start:] == ["mi", "ko", "ba", "<eos>"]


def test_reversal_words_are_fixed_made_up_items():
    words = reversal_words()
    assert words == reversal_words() and len(set(words)) == 120 and words == sorted(words)
    assert all(word.isalpha() and word.islower() and 2 <= len(word) <= 4 for word in words)
    assert not {word.lower() for word in REVERSAL_PROMPT} & set(words)


def test_reversal_prompt_uses_the_reversal_vocabulary():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<bos>", "<sep>", "<eos>", "Reverse", "the", "following", "words",
                                         ":", "ba", "ko", "mi"])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                        eos_token="<eos>", sep_token="<sep>")
    prompt = reversal_prompt(tokenizer, 5)
    assert prompt.text.startswith("<bos> Reverse the following words : ")
    assert 0 not in prompt.ids.tolist()  # no unknown word
    items = prompt.span_text("input").split()
    assert prompt.text.endswith(" ".join(reversed(items)))
    with pytest.raises(InputError, match="2..64"):
        reversal_prompt(tokenizer, 1)


def test_reversal_prompt_is_a_training_example_for_the_task_tokenizer(tmp_path):
    """The reversal models' own tokenizer adds <bos> itself: the prompt must still hold exactly one, so
    its ids are a training example's without the final <eos>."""
    from transformers import PreTrainedTokenizerFast

    from repo_lens.train import ReversalTask

    task = ReversalTask(batch_size=1)
    task.save_tokenizer(tmp_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    prompt = reversal_prompt(tokenizer, 7, seed=3)
    items = prompt.span_text("input").split()
    assert len(items) == 7 and set(items) <= set(task.words)
    tokens, answer_start = reversal_sequence(items)
    assert prompt.ids.tolist() == [task.index[token] for token in tokens[:-1]]
    assert prompt.spans["input"] == (1 + len(REVERSAL_PROMPT), 1 + len(REVERSAL_PROMPT) + 7)
    assert prompt.spans["output"] == (answer_start, len(tokens) - 2)  # the last item is the query row
    assert prompt.query == (len(tokens) - 2, len(tokens) - 1)
    example = task.example(random.Random(0), 7)  # the task builds its sequences from the same format
    words = [task.vocab[i] for i in example.ids]
    assert words == reversal_sequence(words[1 + len(REVERSAL_PROMPT):example.answer_start - 1])[0]


def test_reversal_prompt_as_plain_text_for_other_tokenizers():
    prompt = reversal_prompt(ByteTokenizer(), 4, seed=1)
    items = prompt.span_text("input").split()
    assert prompt.text == "Reverse the following words: " + " ".join(items) + "\n" + " ".join(reversed(items))
    assert len(items) == 4 and set(items) <= set(reversal_words())
    assert prompt.span_text("output") == " ".join(reversed(items))[:-1]  # its last byte is the query row
    assert prompt.meta["task"] == "reversal"
    assert reversal_prompt(ByteTokenizer(), 4, seed=1).text == prompt.text
    assert len({reversal_prompt(ByteTokenizer(), 12, seed=seed).text for seed in range(4)}) == 4


@pytest.mark.parametrize("n_words", [1, 65, 0, -3, 2.5, True, "5"])
def test_reversal_prompt_bad_word_counts(n_words):
    with pytest.raises(InputError, match="2..64 words"):
        reversal_prompt(ByteTokenizer(), n_words)

