"""The CoPE authors' ``SimpleTokenizer`` (``projects/cope/src/data/tokenizer.py``) rebuilt from the word
list their checkpoint stores: lower-cased, ". , ?" split off, words separated by whitespace."""

from __future__ import annotations

from typing import Any

from repo_lens.errors import CheckpointError, InputError


class WordTokenizer:
    """Their word-level tokenizer with the call shape repo_lens uses for HF tokenizers.

    Example:
        >>> tokenizer = WordTokenizer(["<pad>", "<sta>", "x", "=", "1", "."])
        >>> tokenizer("X = 1.")["input_ids"], tokenizer.batch_decode([[2], [5]])
        ([2, 3, 4, 5], ['x', '.'])
    """

    def __init__(self, words: list[str]) -> None:
        if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
            raise CheckpointError("the CoPE checkpoint's tokenizer state holds no word list (ind2word)")
        self.words = list(words)
        self.index = {word: index for index, word in enumerate(self.words)}

    def encode(self, text: str) -> list[int]:
        text = text.strip().lower().replace(".", " .").replace(",", " ,").replace("?", " ?")
        unknown = [word for word in text.split() if word not in self.index]
        if unknown:
            raise InputError(f"{unknown[0]!r} is not in the CoPE checkpoint's vocabulary of {len(self.words)} words; "
                             "use words of its training data (or pass token ids)")
        return [self.index[word] for word in text.split()]

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, Any]:
        return {"input_ids": self.encode(text)}

    def batch_decode(self, sequences: list[list[int]]) -> list[str]:
        return [" ".join(self.words[int(index)] for index in sequence) for sequence in sequences]
