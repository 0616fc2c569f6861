"""Training tasks: a bilingual byte-level language model and RePo's text-reversal toy task."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from repo_lens.data.reversal import REVERSAL_PROMPT, REVERSAL_SPECIALS, reversal_sequence, reversal_words
from repo_lens.model.byte_tokenizer import ByteTokenizer

IGNORE = -100


def _encode_documents(texts: list[str]) -> np.ndarray:
    """Documents as UTF-8 bytes, each followed by the separator 256."""
    pieces = []
    for text in texts:
        pieces.append(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int16))
        pieces.append(np.array([ByteTokenizer.separator_id], dtype=np.int16))
    return np.concatenate(pieces)


class ByteLMTask:
    """Next-byte prediction on several languages' documents; each batch row picks a language
    uniformly, then a random window. Batches depend only on (seed, step), so runs resume exactly."""

    tokenizer_kind = "bytes"
    vocab_size = ByteTokenizer.vocab_size

    def __init__(self, splits: dict[str, tuple[list[str], list[str]]], context: int, batch_size: int,
                 seed: int = 0, eval_batches: int = 8) -> None:
        self.context, self.batch_size, self.seed = context, batch_size, seed
        self.languages = sorted(splits)
        self.train = {lang: _encode_documents(splits[lang][0]) for lang in self.languages}
        self.val = {lang: _encode_documents(splits[lang][1]) for lang in self.languages}
        self.eval_batches = eval_batches
        short = [lang for lang in self.languages if min(len(self.train[lang]), len(self.val[lang])) <= context + 1]
        if short:
            raise ValueError(f"not enough text for a {context}-byte window in {short}")

    def _windows(self, data: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        index = starts[:, None] + np.arange(self.context + 1)[None, :]
        windows = torch.from_numpy(data[index].astype(np.int64))
        return windows[:, :-1], windows[:, 1:]

    def train_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, step])
        languages = rng.integers(0, len(self.languages), self.batch_size)
        inputs, targets = [], []
        for row, choice in enumerate(languages):
            data = self.train[self.languages[choice]]
            start = rng.integers(0, len(data) - self.context - 1, 1)
            x, y = self._windows(data, start)
            inputs.append(x)
            targets.append(y)
        return torch.cat(inputs), torch.cat(targets)

    def val_batches(self) -> dict[str, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Fixed, evenly spaced validation windows per language."""
        batches = {}
        for lang in self.languages:
            data = self.val[lang]
            count = self.eval_batches * self.batch_size
            starts = np.linspace(0, len(data) - self.context - 2, count).astype(np.int64)
            batches[lang] = [self._windows(data, chunk) for chunk in np.array_split(starts, self.eval_batches)]
        return batches

    @torch.no_grad()
    def evaluate(self, model) -> dict[str, float]:
        """Validation bits per byte, per language and averaged."""
        metrics = {}
        for lang, batches in self.val_batches().items():
            total, count = 0.0, 0
            for inputs, targets in batches:
                logits = model(inputs.to(_device(model)))
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1).float(), targets.flatten().to(logits.device), reduction="sum")
                total, count = total + loss.item(), count + targets.numel()
            metrics[f"val_bpb_{lang}"] = total / count / math.log(2)
        metrics["val_bpb"] = float(np.mean([metrics[f"val_bpb_{lang}"] for lang in self.languages]))
        return metrics

    def progress_metrics(self, model) -> dict[str, float]:
        return self.evaluate(model)

    def final_metrics(self, model) -> dict[str, float]:
        return {**self.evaluate(model), **self.unigram_bpb()}

    def unigram_bpb(self) -> dict[str, float]:
        """Cross-entropy (bits/byte) of a unigram byte model fitted on train, on the validation text."""
        result = {}
        for lang in self.languages:
            counts = np.bincount(self.train[lang], minlength=self.vocab_size).astype(np.float64) + 1.0
            log_probs = np.log2(counts / counts.sum())
            result[f"unigram_bpb_{lang}"] = float(-log_probs[self.val[lang]].mean())
        return result


# ---------------------------------------------------------------- text reversal (RePo App. C)
# the format (prompt words, special tokens, items) lives in repo_lens.data.reversal


@dataclass
class ReversalExample:
    ids: list[int]
    answer_start: int  # index of the first output token (after <sep>)


class ReversalTask:
    """"<bos> Reverse the following words : x1 … xL <sep> xL … x1 <eos>"; loss on the output only."""

    tokenizer_kind = "hf"

    def __init__(self, batch_size: int, seed: int = 0, train_lengths=(2, 20), test_lengths=(2, 30),
                 eval_per_length: int = 50) -> None:
        self.words = reversal_words()
        self.vocab = [*REVERSAL_SPECIALS, *REVERSAL_PROMPT, *self.words]
        self.index = {token: i for i, token in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.batch_size, self.seed = batch_size, seed
        self.train_lengths, self.test_lengths, self.eval_per_length = train_lengths, test_lengths, eval_per_length

    def example(self, rng: random.Random, length: int) -> ReversalExample:
        tokens, answer_start = reversal_sequence([rng.choice(self.words) for _ in range(length)])
        return ReversalExample([self.index[token] for token in tokens], answer_start)

    def train_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = random.Random(f"{self.seed}-{step}")
        examples = [self.example(rng, rng.randint(*self.train_lengths)) for _ in range(self.batch_size)]
        width = max(len(e.ids) for e in examples)
        inputs = torch.full((len(examples), width - 1), self.index["<pad>"], dtype=torch.long)
        targets = torch.full((len(examples), width - 1), IGNORE, dtype=torch.long)
        for row, e in enumerate(examples):
            ids = torch.tensor(e.ids)
            inputs[row, : len(ids) - 1] = ids[:-1]
            targets[row, e.answer_start - 1 : len(ids) - 1] = ids[e.answer_start:]
        return inputs, targets

    def test_examples(self, length: int) -> list[ReversalExample]:
        rng = random.Random(f"test-{length}")  # disjoint stream from training's f"{seed}-{step}"
        return [self.example(rng, length) for _ in range(self.eval_per_length)]

    @torch.no_grad()
    def accuracy(self, model, length: int) -> float:
        """Exact-match accuracy of greedy decoding, whole batch at once (all prompts have equal length)."""
        examples = self.test_examples(length)
        prompts = torch.tensor([e.ids[: e.answer_start] for e in examples], device=_device(model))
        expected = torch.tensor([e.ids[e.answer_start:] for e in examples], device=prompts.device)
        cache = model.new_cache()
        logits = model(prompts, cache=cache)
        generated = []
        for _ in range(expected.shape[1]):
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            generated.append(next_token)
            logits = model(next_token, cache=cache)
        output = torch.cat(generated, dim=1)
        return (output == expected).all(dim=1).float().mean().item()

    def evaluate(self, model, lengths=None) -> dict[str, float]:
        lengths = lengths or range(self.test_lengths[0], self.test_lengths[1] + 1)
        metrics = {f"acc_len_{n}": self.accuracy(model, n) for n in lengths}
        in_domain = [metrics[f"acc_len_{n}"] for n in lengths if n <= self.train_lengths[1]]
        out_domain = [metrics[f"acc_len_{n}"] for n in lengths if n > self.train_lengths[1]]
        metrics["acc_in_domain"] = float(np.mean(in_domain)) if in_domain else float("nan")
        metrics["acc_out_of_domain"] = float(np.mean(out_domain)) if out_domain else float("nan")
        return metrics

    def progress_metrics(self, model) -> dict[str, float]:
        """A quick look during training: three lengths only."""
        return self.evaluate(model, lengths=[5, 10, 20])

    def final_metrics(self, model) -> dict[str, float]:
        return self.evaluate(model)

    def save_tokenizer(self, directory: Path) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        backend = Tokenizer(models.WordLevel(vocab=self.index, unk_token="<pad>"))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        # text is encoded as in training: "<bos>" first
        backend.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", self.index["<bos>"])])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                            eos_token="<eos>", sep_token="<sep>")
        tokenizer.save_pretrained(str(directory))


def _device(model) -> torch.device:
    return next(model.parameters()).device
