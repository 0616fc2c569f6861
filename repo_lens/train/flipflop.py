"""The Flip-Flop language (Liu et al. 2024, used by CoPE, the CoPE paper §5.1).

A sequence is T/2 (instruction, bit) pairs. Instructions are w(rite), r(ead) and i(gnore); the
first is always w and the last always r; the bit after r must equal the bit of the latest w.
In-distribution sequences ignore with probability 0.8 (w and r 0.1 each); the out-of-distribution
("sparse") test ignores with probability 0.98, so the latest w is much further away. The error is
the fraction of read bits predicted wrongly (greedy, over the whole vocabulary).

Our decision: the training loss covers the read bits only — the other tokens are coin flips —
and sequences are 128 tokens instead of 512 so the models train on 2 CPU cores.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from repo_lens.train.tasks import IGNORE, _device

FLIPFLOP_VOCAB = ["w", "r", "i", "0", "1"]


class FlipFlopTask:
    """Flip-Flop sequences of ``length`` tokens; test sets at ignore probabilities 0.8 and 0.98."""

    tokenizer_kind = "hf"

    def __init__(self, batch_size: int, length: int = 128, seed: int = 0, train_ignore: float = 0.8,
                 ood_ignore: float = 0.98, eval_sequences: int = 1000) -> None:
        if length % 2:
            raise ValueError(f"length must be even (instruction, bit pairs), got {length}")
        self.vocab = list(FLIPFLOP_VOCAB)
        self.index = {token: i for i, token in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.batch_size, self.length, self.seed = batch_size, length, seed
        self.train_ignore, self.ood_ignore, self.eval_sequences = train_ignore, ood_ignore, eval_sequences

    def sequence(self, rng: random.Random, ignore: float) -> list[int]:
        """One sequence of token ids; starts with w, ends with r, reads return the latest write."""
        w, r, i = self.index["w"], self.index["r"], self.index["i"]
        pairs = self.length // 2
        ids: list[int] = []
        memory = 0
        for pair in range(pairs):
            if pair == 0:
                instruction = w
            elif pair == pairs - 1:
                instruction = r
            else:
                draw = rng.random()
                instruction = i if draw < ignore else (w if draw < ignore + (1 - ignore) / 2 else r)
            if instruction == r:
                bit = memory
            else:
                bit = rng.randint(0, 1)
                if instruction == w:
                    memory = bit
            ids += [instruction, self.index[str(bit)]]
        return ids

    def _batch(self, sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.tensor(sequences, dtype=torch.long)
        inputs, following = ids[:, :-1], ids[:, 1:]
        targets = torch.full_like(following, IGNORE)
        read_bits = inputs == self.index["r"]  # the input is r, so the next token is the read bit
        targets[read_bits] = following[read_bits]
        return inputs, targets

    def train_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = random.Random(f"{self.seed}-{step}")
        return self._batch([self.sequence(rng, self.train_ignore) for _ in range(self.batch_size)])

    def test_batch(self, ignore: float, count: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        rng = random.Random(f"test-{ignore}")  # disjoint stream from training's f"{seed}-{step}"
        return self._batch([self.sequence(rng, ignore) for _ in range(count or self.eval_sequences)])

    @torch.no_grad()
    def error(self, model, ignore: float, count: int | None = None, chunk: int | None = None) -> float:
        """Fraction of read bits the model gets wrong (argmax over the whole vocabulary). Sequences go
        through the model ``chunk`` at a time; the default keeps CoPE's per-layer [chunk, head, T, T]
        tensors near 25 MB, under glibc's mmap threshold, where allocations are reused instead of
        page-faulted afresh (several times faster on CPU)."""
        inputs, targets = self.test_batch(ignore, count)
        chunk = chunk or max(1, 800_000 // self.length**2)
        wrong = total = 0
        for start in range(0, len(inputs), chunk):
            rows = inputs[start:start + chunk].to(_device(model))
            expected = targets[start:start + chunk].to(rows.device)
            predicted = model(rows).argmax(-1)
            scored = expected != IGNORE
            wrong += int((predicted[scored] != expected[scored]).sum())
            total += int(scored.sum())
        return wrong / total

    def evaluate(self, model, count: int | None = None) -> dict[str, float]:
        return {"error_in_distribution": self.error(model, self.train_ignore, count),
                "error_ood_sparse": self.error(model, self.ood_ignore, count)}

    def progress_metrics(self, model) -> dict[str, float]:
        return self.evaluate(model, count=200)

    def final_metrics(self, model) -> dict[str, float]:
        return self.evaluate(model)

    def save_tokenizer(self, directory: Path) -> None:
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        backend = Tokenizer(models.WordLevel(vocab=self.index, unk_token="i"))
        backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
        tokenizer.save_pretrained(str(directory))
