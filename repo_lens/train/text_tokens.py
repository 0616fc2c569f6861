"""Tokenised English for continued training: the Brown corpus' documents through a model's tokenizer,
every tenth document held out (never trained on), each split joined into one stream (documents
separated by the end-of-text token) and cut into fixed-length sequences. A Hugging Face tokenizer
separates documents with its end-of-text token, repo_lens' byte tokenizer with its separator byte
(256), as the toolkit's byte models were trained.

Example:
    >>> text = TextTokens.from_documents(["a b c d e f g h", "i j"] * 10, lambda t: [ord(c) for c in t], eos=0)
    >>> text.train_batch(0, batch_size=2, context=4, seed=0).shape
    torch.Size([2, 5])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from repo_lens.errors import InputError

HELD_OUT_EVERY = 10  # documents 0, 10, 20, ... are held out


def document_encoder(tokenizer: Any) -> tuple[Callable[[str], list[int]], int]:
    """(encode a document without special tokens, the token that separates documents) of ``tokenizer``: a
    Hugging Face tokenizer (its end-of-text token) or repo_lens' byte tokenizer (its separator, 256).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> encode, separator = document_encoder(ByteTokenizer())
    >>> encode("hé"), separator
    ([104, 195, 169], 256)
    """
    separator = getattr(tokenizer, "separator_id", None)
    if not hasattr(tokenizer, "eos_token_id") and isinstance(separator, int):  # repo_lens' byte tokenizer
        return tokenizer.encode, separator
    eos = getattr(tokenizer, "eos_token_id", None)
    if not isinstance(eos, int) or isinstance(eos, bool):
        raise InputError(f"the base's tokenizer ({type(tokenizer).__name__}) has no end-of-text token to separate "
                         "documents with; give a base whose tokenizer defines one (eos_token_id)")
    return (lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]), eos


@dataclass(frozen=True)
class TextTokens:
    """The training and held-out token streams, and which documents each came from."""

    train: np.ndarray
    held_out: np.ndarray
    held_out_documents: list[int]

    @classmethod
    def from_documents(cls, documents: Sequence[str], encode: Callable[[str], list[int]], eos: int) -> TextTokens:
        if len(documents) < HELD_OUT_EVERY:
            raise InputError(f"need at least {HELD_OUT_EVERY} documents to hold one out, got {len(documents)}")
        streams: dict[bool, list[int]] = {True: [], False: []}
        for number, document in enumerate(documents):
            streams[number % HELD_OUT_EVERY == 0] += [*encode(document), eos]
        return cls(np.asarray(streams[False], dtype=np.int64), np.asarray(streams[True], dtype=np.int64),
                   list(range(0, len(documents), HELD_OUT_EVERY)))

    @classmethod
    def brown(cls, tokenizer) -> TextTokens:
        """The Brown corpus (500 documents) through ``tokenizer`` (a Hugging Face tokenizer or repo_lens'
        byte tokenizer)."""
        from repo_lens.data.brown import brown_documents

        encode, eos = document_encoder(tokenizer)
        return cls.from_documents([doc.text for doc in brown_documents()], encode, eos)

    @classmethod
    def from_corpus(cls, source: str, tokenizer) -> TextTokens:
        """``source`` through ``tokenizer`` (as :meth:`brown`): ``"brown"``, or anything
        :func:`repo_lens.data.corpus_sources.open_corpus` opens (text files, JSON lines, Parquet, a saved
        dataset); every tenth non-empty document is held out. The tokens are held in memory (8 bytes each)."""
        if source == "brown":
            return cls.brown(tokenizer)
        from repo_lens.data.corpus_sources import open_corpus

        encode, eos = document_encoder(tokenizer)
        texts = [document.text for document in open_corpus(source) if document.text and document.text.strip()]
        return cls.from_documents(texts, encode, eos)

    @staticmethod
    def _sequences(stream: np.ndarray, context: int) -> np.ndarray:
        count = (len(stream) - 1) // context
        if count < 1:
            raise InputError(f"{len(stream)} tokens cannot fill one sequence of {context + 1}")
        starts = np.arange(count) * context
        return stream[starts[:, None] + np.arange(context + 1)]

    def train_batch(self, step: int, batch_size: int, context: int, seed: int) -> torch.Tensor:
        """[batch, context + 1] tokens of training step ``step``: the sequences in a fresh seeded order
        each epoch (every sequence once per epoch), so a resumed run sees what an unbroken one would."""
        count = (len(self.train) - 1) // context  # sequence k is tokens k·context .. (k+1)·context
        if count < 1:
            raise InputError(f"{len(self.train)} tokens cannot fill one sequence of {context + 1}")
        rows = []
        for slot in range(step * batch_size, (step + 1) * batch_size):
            epoch, place = divmod(slot, count)
            start = int(np.random.default_rng([seed, epoch]).permutation(count)[place]) * context
            rows.append(self.train[start:start + context + 1])
        return torch.from_numpy(np.stack(rows))

    def held_out_sequences(self, context: int) -> torch.Tensor:
        """Every held-out sequence, in order: [n, context + 1]."""
        return torch.from_numpy(self._sequences(self.held_out, context))

    def epochs(self, tokens: int, context: int) -> float:
        """How many passes over the training sequences ``tokens`` tokens make."""
        return tokens / (len(self._sequences(self.train, context)) * context)
