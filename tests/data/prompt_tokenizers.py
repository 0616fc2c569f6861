"""Tokenizers built in-test (no hub): a byte-level BPE and a word-level HF fast tokenizer, and bytes.

Fixtures live here, not in a conftest.py, because other test modules import names from the
top-level ``conftest``; a second conftest module would shadow it. Import the fixtures:
``from prompt_tokenizers import bpe_tokenizer, byte_tokenizer, tokenizer, word_tokenizer``.
"""

from __future__ import annotations

import pytest

from repo_lens.data.niah import NOISE

TRAINING_TEXT = [NOISE] * 3 + [
    "One of the special magic numbers for damp-needle is: 2058756.",
    "Some special magic numbers are hidden within the following text. Make sure to memorize it.",
    "I will quiz you about the numbers afterwards. What are all the special magic numbers for",
    "mentioned in the provided text? The special magic number is",
    "Input: cat Output: chat. The city of Rome has 2.8 million people.",
    "人民日报 新年 讲话 中国 人民",
]


def _bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(TRAINING_TEXT, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", backend.token_to_id("<bos>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>")


def _word_level():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece()  # joins words with spaces
    backend.train_from_iterator(TRAINING_TEXT, trainers.WordLevelTrainer(special_tokens=["<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


@pytest.fixture(scope="session")
def bpe_tokenizer():
    return _bpe()


@pytest.fixture(scope="session")
def word_tokenizer():
    return _word_level()


@pytest.fixture(scope="session")
def byte_tokenizer():
    from repo_lens.model.byte_tokenizer import ByteTokenizer

    return ByteTokenizer()


@pytest.fixture(scope="session", params=["bytes", "bpe"])
def tokenizer(request, byte_tokenizer, bpe_tokenizer):
    return {"bytes": byte_tokenizer, "bpe": bpe_tokenizer}[request.param]

