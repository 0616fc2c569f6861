"""A byte-level training mixture where retrieval and structure matter.

Every batch row is exactly ``length + 1`` bytes: text from the bilingual corpus, or a prompt
(RULER-style NIAH, multi-key NIAH, a few-shot prompt, a table question, or "recall": dense
associative recall with an answer every ~20-90 bytes, not in the ``bytes-1k`` preset, or "repeat":
a random segment of words and numbers written again and again, the classic data on which
induction heads form, where every byte after the first copy can be predicted only by copying) placed at
the end of a row whose beginning is corpus text, with the document separator between them. The loss is
next-byte cross-entropy on every byte, and the answer bytes of a prompt weigh ``answer_weight``
times more: they are a few bytes in a thousand, and without the weight the rare retrieval
signal is drowned by ordinary text. Each step draws one row length from ``lengths`` (short
rows are cheaper; the longest is the model's context), so the batch is one rectangle.

Batches depend only on (seed, step): runs resume exactly. NIAH prompts in training draw
their haystack text from the training documents; evaluation uses RULER's noise haystack and
held-out documents, with a seed stream disjoint from training's.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from repo_lens.data.fewshot import fewshot_prompt
from repo_lens.data.niah import NiahSpec, niah_prompt
from repo_lens.data.spans import PromptEncoding
from repo_lens.data.tables import table_prompt
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer

ROW_KINDS = ("text", "niah", "fewshot", "table", "recall", "repeat")
DEFAULT_ROW_WEIGHTS = {"text": 0.35, "niah": 0.45, "fewshot": 0.1, "table": 0.1}
EVAL_SEED_OFFSET = 10**9  # evaluation prompts use seeds from here on; training's are below
_NO_SPECIAL_TOKENS = PromptEncoding(add_special_tokens=False)  # the rows carry no BOS: a prompt ends a row

_FIRST_NAMES = ("Ada Ben Cleo Dan Eva Finn Gus Hana Ivo Jin Kai Lea Milo Nora Omar Pia Quin Rosa Sven Tara "
                "Uma Vic Wen Xia Yuri Zoe").split()
_CITIES = ("Oslo Rome Lima Cairo Delhi Paris Quito Seoul Tokyo Dakar Hanoi Kyiv Bern Baku Doha Riga "
           "Accra Sofia Minsk Perth").split()


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


FEWSHOT_RULES = (  # upper-case, reverse, first letter, double, length of a word
    str.upper, lambda word: word[::-1], lambda word: word[0], lambda word: word + word, lambda word: str(len(word)))


class RetrievalMixTask:
    """Text, NIAH, few-shot and table rows for a byte model of context ``context``.

    Example:
        >>> splits = {"en": (["The cat sat on the mat. " * 200], ["A dog ran far away. " * 200])}
        >>> task = RetrievalMixTask(splits, context=512, batch_size=4)
        >>> inputs, targets, weights = task.train_batch(0)
        >>> inputs.shape, targets.shape, bool((weights >= 1).all())
        (torch.Size([4, 512]), torch.Size([4, 512]), True)
    """

    tokenizer_kind = "bytes"
    vocab_size = ByteTokenizer.vocab_size

    def __init__(self, splits: dict[str, tuple[list[str], list[str]]], context: int, batch_size: int,
                 seed: int = 0, eval_batches: int = 4, lengths: tuple[int, ...] | None = None,
                 length_weights: tuple[float, ...] | None = None, row_weights: dict[str, float] | None = None,
                 answer_weight: float = 50.0, eval_prompts: int = 32, copy_warmup_steps: int = 0) -> None:
        self.tokenizer = ByteTokenizer()
        self.context, self.batch_size, self.seed = context, batch_size, seed
        self.eval_batches, self.eval_prompts = eval_batches, eval_prompts
        self.lengths = tuple(lengths or (context,))
        if any(isinstance(length, bool) or not isinstance(length, int) or not 512 <= length <= context
               for length in self.lengths):
            raise InputError(f"row lengths {self.lengths} must be whole numbers in 512..{context}: a NIAH prompt "
                             "needs ~450 bytes and a row cannot exceed the context")
        weights = length_weights or (1.0,) * len(self.lengths)
        if len(weights) != len(self.lengths) or not all(_positive(w) for w in weights):
            raise InputError(f"length_weights {weights} must be one positive number per row length {self.lengths}")
        self.length_weights = np.asarray(weights, dtype=np.float64) / sum(weights)
        row_weights = row_weights or DEFAULT_ROW_WEIGHTS
        unknown = sorted(set(row_weights) - set(ROW_KINDS))
        if unknown or not all(_positive(w) or w == 0 for w in row_weights.values()) or not any(row_weights.values()):
            raise InputError(f"row_weights {row_weights} must map row kinds {ROW_KINDS} to weights ≥ 0, not all 0"
                             + (f"; unknown kinds {unknown}" if unknown else ""))
        if not _positive(answer_weight):
            raise InputError(f"answer_weight must be a positive number, got {answer_weight!r}")
        if isinstance(copy_warmup_steps, bool) or not isinstance(copy_warmup_steps, int) or copy_warmup_steps < 0:
            raise InputError(f"copy_warmup_steps must be a whole number >= 0, got {copy_warmup_steps!r}")
        self.copy_warmup_steps = copy_warmup_steps
        self.row_kinds = [kind for kind in ROW_KINDS if row_weights.get(kind, 0) > 0]
        self.row_weights = np.asarray([row_weights[kind] for kind in self.row_kinds], dtype=np.float64)
        self.row_weights /= self.row_weights.sum()
        self.answer_weight = float(answer_weight)
        self.languages = sorted(splits)
        self.train_text = {lang: "\n".join(splits[lang][0]) for lang in self.languages}
        self.val_text = {lang: "\n".join(splits[lang][1]) for lang in self.languages}
        self.train_bytes = {lang: self._bytes(text) for lang, text in self.train_text.items()}
        self.val_bytes = {lang: self._bytes(text) for lang, text in self.val_text.items()}
        self.words = sorted({word for word in self.train_text[self.languages[0]].split()
                             if word.isalpha() and word.isascii() and 3 <= len(word) <= 9})[:5000]
        short = [lang for lang in self.languages if min(len(self.train_bytes[lang]), len(self.val_bytes[lang]))
                 <= 2 * context + 2]
        if short:
            raise InputError(f"not enough text for {context}-byte rows in {short}: give each language more than "
                             f"{2 * context + 2} bytes of training and of held-out text")

    @staticmethod
    def _bytes(text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    # ------------------------------------------------------------------ rows
    def _text_window(self, rng: random.Random, lang: str, size: int, source: dict) -> np.ndarray:
        data = source[lang]
        start = rng.randrange(0, len(data) - size - 1)
        return data[start:start + size]

    def _haystack(self, rng: random.Random, lang: str, size: int, source: dict) -> str:
        text = source[lang]
        start = rng.randrange(0, max(1, len(text) - size))
        return text[start:start + size]

    def _niah(self, rng: random.Random, length: int, lang: str):
        num_keys = rng.choice((1, 1, 2, 4))
        key_type = rng.choices(("words", "numbers", "uuids"), weights=(0.7, 0.15, 0.15))[0]
        haystack = None if rng.random() < 0.5 else self._haystack(rng, lang, 2 * length, self.train_text)
        size, depth, seed = length - rng.randrange(0, length // 8), rng.random(), rng.randrange(EVAL_SEED_OFFSET)
        if num_keys * (110 if key_type == "uuids" else 75) + 380 > size:  # the needles and template do not fit
            num_keys, key_type = 1, "words"
        return niah_prompt(self.tokenizer, size, depth=depth, spec=NiahSpec(num_keys=num_keys, key_type=key_type),
                           haystack=haystack, seed=seed, encoding=_NO_SPECIAL_TOKENS)

    def _fewshot(self, rng: random.Random, length: int):
        rule = FEWSHOT_RULES[rng.randrange(len(FEWSHOT_RULES))]
        count = rng.randint(2, min(40, length // 50))  # an example is at most ~45 bytes
        words = [rng.choice(self.words) for _ in range(count + 1)]
        return fewshot_prompt(self.tokenizer, [(word, rule(word)) for word in words[:-1]], words[-1],
                              rule(words[-1]), encoding=_NO_SPECIAL_TOKENS)

    def _table(self, rng: random.Random, length: int):
        count = rng.randint(2, min(len(_FIRST_NAMES), (length - 100) // 60))  # a row is at most ~55 bytes
        names = rng.sample(_FIRST_NAMES, min(count, len(_FIRST_NAMES)))
        rows = [[name, rng.choice(_CITIES), str(rng.randint(18, 90)), str(rng.randint(1000, 9999))] for name in names]
        header = ["name", "city", "age", "code"]
        asked_row, asked_col = rng.randrange(len(rows)), rng.randint(1, 3)
        question = f"What is the {header[asked_col]} of {rows[asked_row][0]}?"
        return table_prompt(self.tokenizer, header, rows, question, rows[asked_row][asked_col],
                            style=rng.choice(("markdown", "pairs")), encoding=_NO_SPECIAL_TOKENS)

    def _recall(self, rng: random.Random, length: int):
        """Associative recall, dense: key-value pairs, then several questions whose answers are values,
        every answer weighed (a NIAH row has one 7-digit answer per ~1,000 bytes; this one has one per
        ~20-90). Half the rows write pairs and questions as "key=value" / "key? value", half in the
        words of RULER's needle and answer prefix, so the copy learned here is the one NIAH asks for."""
        from repo_lens.data.niah import _random_key
        from repo_lens.data.spans import Prompt

        needle_words = rng.random() < 0.5
        pair_format = "One of the special magic numbers for {} is: {}.\n" if needle_words else "{}={}; "
        question_format = "The special magic number for {} is " if needle_words else "{}? "
        pairs: dict[str, str] = {}
        while len(pairs) < max(2, (length - 40) // (120 if needle_words else 60)):
            pairs.setdefault(_random_key(rng, "words"), str(rng.randint(10**6, 10**7 - 1)))
        keys = list(pairs)
        text = "Remember:\n" + "".join(pair_format.format(key, value) for key, value in pairs.items()) + "\n"
        answers = []
        while True:
            key = rng.choice(keys)
            line = question_format.format(key)
            if len((text + line + pairs[key] + "\n").encode()) > length:
                break
            text += line
            answers.append((len(text.encode()), len(text.encode()) + 7))
            text += pairs[key] + "\n"
        ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
        return Prompt(text=text, ids=ids, spans={}, char_spans={}, query=answers[-1], answer="",
                      meta={"answer_spans": answers})

    def _repeat(self, rng: random.Random, length: int):
        """A random segment of 20-200 bytes (words of the corpus and 7-digit numbers) written over and
        over until the row is full: after the first copy every byte follows from an earlier copy."""
        from repo_lens.data.spans import Prompt

        target = rng.randint(20, 200)
        parts: list[str] = []
        while sum(len(part) + 1 for part in parts) < target:
            parts.append(str(rng.randint(10**6, 10**7 - 1)) if rng.random() < 0.3 else rng.choice(self.words))
        segment = " ".join(parts) + "\n"
        text = (segment * (length // len(segment) + 1))[:length]
        ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
        return Prompt(text=text, ids=ids, spans={}, char_spans={}, query=(len(ids), len(ids)), answer="",
                      meta={"answer_spans": []})  # dense copying: no byte weighs more than text

    def _row(self, rng: random.Random, length: int, kind: str, source: dict) -> tuple[np.ndarray, np.ndarray]:
        """``length + 1`` byte ids and the weight of predicting each of them (the first is never predicted)."""
        lang = self.languages[rng.randrange(len(self.languages))]
        if kind == "text":
            ids = self._text_window(rng, lang, length + 1, source)
            return ids, np.ones(length + 1)
        prompt = {"niah": lambda: self._niah(rng, length, lang), "fewshot": lambda: self._fewshot(rng, length),
                  "table": lambda: self._table(rng, length), "recall": lambda: self._recall(rng, length),
                  "repeat": lambda: self._repeat(rng, length)}[kind]()
        prompt_ids = np.asarray(prompt.ids, dtype=np.int64)
        if len(prompt_ids) > length:  # cutting its front could cut away what the answer needs
            raise ValueError(f"a {kind} prompt of {len(prompt_ids)} bytes does not fit a {length}-byte row")
        answer_start, answer_end = prompt.query
        filler = length + 1 - len(prompt_ids) - 1
        prefix = self._text_window(rng, lang, filler, source) if filler > 0 else np.zeros(0, dtype=np.int64)
        separator = np.array([ByteTokenizer.separator_id] * (filler >= 0), dtype=np.int64)
        ids = np.concatenate([prefix, separator, prompt_ids])[-(length + 1):]
        offset = len(ids) - len(prompt_ids)
        weights = np.ones(length + 1)
        for start, end in prompt.meta.get("answer_spans", [(answer_start, answer_end)]):
            weights[offset + start:offset + end] = self.answer_weight
        return ids, weights

    def train_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs, targets, loss weight of each target), all [batch, length]. The first
        ``copy_warmup_steps`` steps are repeat rows only, at the shortest row length: on them RoPE's copy
        (induction) circuit formed within ~1,000 steps, which it did not in 4,000 steps of the mix."""
        rng = random.Random(f"mix-{self.seed}-{step}")
        if step < self.copy_warmup_steps:
            length, kinds = min(self.lengths), ["repeat"] * self.batch_size
        else:
            length = int(np.random.default_rng([self.seed, step]).choice(self.lengths, p=self.length_weights))
            kinds = rng.choices(self.row_kinds, weights=[float(w) for w in self.row_weights], k=self.batch_size)
        rows = [self._row(rng, length, kind, self.train_bytes) for kind in kinds]
        ids = torch.from_numpy(np.stack([row for row, _ in rows]))
        weights = torch.from_numpy(np.stack([weight for _, weight in rows])).float()
        return ids[:, :-1], ids[:, 1:], weights[:, 1:]

    # ------------------------------------------------------------ evaluation
    def niah_prompts(self, length: int, count: int, haystack: str = "noise", num_keys: int = 1) -> list:
        """Held-out NIAH prompts (answer appended) at ``length`` tokens, depths evenly spread over 0..1."""
        prompts = []
        for index in range(count):
            rng = random.Random(f"eval-{haystack}-{length}-{num_keys}-{index}")
            text = None if haystack == "noise" else self._haystack(rng, haystack, 2 * length, self.val_text)
            prompts.append(niah_prompt(self.tokenizer, length, depth=index / max(1, count - 1),
                                       spec=NiahSpec(num_keys=num_keys), haystack=text, seed=EVAL_SEED_OFFSET + index,
                                       encoding=_NO_SPECIAL_TOKENS))
        return prompts

    @torch.no_grad()
    def niah_accuracy(self, model, length: int, count: int | None = None, haystack: str = "noise",
                      num_keys: int = 1) -> float:
        """Exact-match accuracy of greedy decoding, computed as all answer bytes being the argmax under
        teacher forcing (the same thing: greedy decoding reproduces the answer iff every step's argmax
        given the correct prefix is the next answer byte)."""
        return niah_accuracy(model, self.niah_prompts(length, count or self.eval_prompts, haystack, num_keys))

    @torch.no_grad()
    def val_bpb(self, model, length: int | None = None) -> dict[str, float]:
        length = length or self.context
        metrics = {}
        device = next(model.parameters()).device
        for lang in self.languages:
            data = self.val_bytes[lang]
            starts = np.linspace(0, len(data) - length - 2, self.eval_batches * self.batch_size).astype(np.int64)
            total, count = 0.0, 0
            for chunk in np.array_split(starts, self.eval_batches):
                windows = torch.from_numpy(data[chunk[:, None] + np.arange(length + 1)[None, :]]).to(device)
                logits = model(windows[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten(),
                                                         reduction="sum")
                total, count = total + loss.item(), count + windows[:, 1:].numel()
            metrics[f"val_bpb_{lang}"] = total / count / math.log(2)
        metrics["val_bpb"] = float(np.mean([metrics[f"val_bpb_{lang}"] for lang in self.languages]))
        return metrics

    def progress_metrics(self, model) -> dict[str, float]:
        return {**self.val_bpb(model), f"niah_{self.context}": self.niah_accuracy(model, self.context, 16)}

    def final_metrics(self, model) -> dict[str, float]:
        metrics = self.val_bpb(model)
        for length in sorted({512, self.context, 2 * self.context}):
            metrics[f"niah_{length}"] = self.niah_accuracy(model, length)
        metrics[f"niah_essay_{self.context}"] = self.niah_accuracy(model, self.context, haystack=self.languages[0])
        if self.context >= 1024:  # four needles and the template need ~550 bytes
            metrics[f"niah_multikey4_{self.context}"] = self.niah_accuracy(model, self.context, num_keys=4)
        return metrics


@torch.no_grad()
def niah_accuracy(model, prompts: list, batch_size: int = 8) -> float:
    """Fraction of ``prompts`` (answer appended) whose every answer byte is the model's argmax."""
    device = next(model.parameters()).device
    correct = 0
    for first in range(0, len(prompts), batch_size):
        chunk = prompts[first:first + batch_size]
        width = max(len(p.ids) for p in chunk)
        ids = torch.full((len(chunk), width), ByteTokenizer.separator_id, dtype=torch.long)
        for row, prompt in enumerate(chunk):
            ids[row, :len(prompt.ids)] = torch.as_tensor(np.asarray(prompt.ids, dtype=np.int64))
        predictions = model(ids.to(device)).argmax(-1).cpu()
        for row, prompt in enumerate(chunk):
            start, end = prompt.query
            correct += bool((predictions[row, start - 1:end - 1] == ids[row, start:end]).all())
    return correct / len(prompts)
