"""The edits of ``position_interventions`` on the zoo's task models (Flip-Flop, text reversal): the same
conditions as the retrieval protocol, scored by the task's own exact match per sequence.

- Flip-Flop (CoPE Table 2): a sequence counts as right when every read bit in it is predicted right.
  Families: the in-distribution test (ignore 0.8) and the sparse one (ignore 0.98) at the training
  length, and the sparse one at 2× the training length, where CoPE generalises and RoPE does not
  (the flip-flop study's 4× costs 4 times as much again under every edit).
- Text reversal (RePo App. C): a sequence counts as right when every output word and the closing
  ``<eos>`` are predicted right given the correct words before them; all of them right is exactly when
  greedy decoding reproduces the reversal, so this is the task's own accuracy. Families: word counts
  5, 10 and 20 (inside the training range 2–20) and 25 and 30 (outside it).

The edits are applied to the whole sequence at once (the "affine" line is fitted over every token,
output included), as in the retrieval protocol.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.protocol import LensProtocol

TASKS = ("flipflop", "reversal")
REVERSAL_LENGTHS = (5, 10, 20, 25, 30)
REFERENCE_SEQUENCES = 32  # the reference set of "mean", per family
BATCH_CELLS = 800_000  # batch × T² of one forward pass (see TaskScorer)


def trained_task(lens: LensProtocol) -> str | None:
    """The task a zoo model was trained on ("bytes", "mix", "flipflop", "reversal"), None if unknown.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> trained_task(Lens(tiny_model("repo"), ByteTokenizer())) is None
    True
    """
    info = (getattr(lens, "meta", None) or {}).get("info") or {}
    return (info.get("train_config") or {}).get("task")


class TaskSet:
    """Sequences and the (position, expected token) pairs scored in each, grouped by family."""

    def __init__(self) -> None:
        self.families: dict[str, list[tuple[list[int], np.ndarray, np.ndarray]]] = {}

    def add(self, family: str, ids: list[int], positions: np.ndarray, expected: np.ndarray) -> None:
        self.families.setdefault(family, []).append((ids, np.asarray(positions), np.asarray(expected)))

    def labels(self) -> list[str]:
        """Each sequence's family, in scoring order."""
        return [family for family, rows in self.families.items() for _ in rows]

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.families.values())


def flipflop_set(length: int, per_family: int) -> TaskSet:
    """Flip-Flop test sequences of a model trained at ``length`` tokens: in distribution and sparse at
    that length, sparse at 2× (the read bits are scored; the streams are the task's test streams).

    >>> tasks = flipflop_set(16, 3)
    >>> list(tasks.families), len(tasks)
    (['in distribution, 16 tokens', 'sparse, 16 tokens', 'sparse, 32 tokens (2×)'], 9)
    """
    from repo_lens.train.flipflop import FlipFlopTask
    from repo_lens.train.loop import IGNORE

    out = TaskSet()
    for name, ignore, factor in (("in distribution", 0.8, 1), ("sparse", 0.98, 1), ("sparse", 0.98, 2)):
        task = FlipFlopTask(batch_size=1, length=factor * length)
        inputs, targets = task.test_batch(ignore, per_family)
        family = f"{name}, {factor * length} tokens" + (f" ({factor}×)" if factor > 1 else "")
        for row, target in zip(inputs.tolist(), targets.numpy()):
            positions = np.nonzero(target != IGNORE)[0]
            out.add(family, row, positions, target[positions])
    return out


def reversal_set(per_family: int, lengths: tuple[int, ...] = REVERSAL_LENGTHS) -> TaskSet:
    """Text-reversal test prompts of each word count (the output words and ``<eos>`` are scored).

    >>> tasks = reversal_set(2, (5, 25))
    >>> list(tasks.families), len(tasks)
    (['5 words', '25 words (beyond training)'], 4)
    """
    from repo_lens.train.tasks import ReversalTask

    task = ReversalTask(batch_size=1, eval_per_length=per_family)
    out = TaskSet()
    for length in lengths:
        beyond = length > task.train_lengths[1]
        family = f"{length} words" + (" (beyond training)" if beyond else "")
        rng = random.Random(f"interventions-{length}")  # not the card's test stream: fresh prompts
        for _ in range(per_family):
            example = task.example(rng, length)
            positions = np.arange(example.answer_start - 1, len(example.ids) - 1)  # the words, then <eos>
            out.add(family, example.ids[:-1], positions, np.asarray(example.ids[example.answer_start:]))
    return out


def task_set(lens: Lens, task: str, per_family: int) -> TaskSet:
    """The scored sequences of ``task`` for ``lens``' model."""
    if task == "flipflop":
        return flipflop_set(int(lens.model.cfg.max_position_embeddings), per_family)
    return reversal_set(per_family)


class TaskScorer:
    """Per sequence: exact match of every scored token (0/1) and their mean log-probability (nats),
    under an edit; a family's sequences (one length) are batched together, longer than the model's
    context where the family asks for it. A batch holds at most ``batch_size`` sequences and about
    ``BATCH_CELLS`` token pairs, so CoPE's per-layer [batch, head, T, T] tensors stay small enough for the
    allocator to reuse (several times faster on CPU than page-faulting large ones afresh); the batch
    size does not change the numbers.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> tasks = TaskSet()
    >>> tasks.add("one", [5, 6, 7, 8], np.array([2]), np.array([8]))
    >>> hits, logprobs = TaskScorer(Lens(tiny_model("repo"), ByteTokenizer()), tasks, 4)("constant")
    >>> hits.shape, bool(logprobs[0] < 0)
    ((1,), True)
    """

    def __init__(self, lens: Lens, tasks: TaskSet, batch_size: int) -> None:
        self.lens, self.tasks, self.batch_size = lens, tasks, batch_size

    def __call__(self, mode: Any, layers: Any = None, heads: Any = None) -> tuple[np.ndarray, np.ndarray]:
        from repo_lens import interventions

        hits: list[float] = []
        logprobs: list[float] = []
        for rows in self.tasks.families.values():
            reference = [ids for ids, _, _ in rows[:REFERENCE_SEQUENCES]] if mode == "mean" else None
            width = max(len(ids) for ids, _, _ in rows)
            size = max(1, min(self.batch_size, BATCH_CELLS // width**2))
            for first in range(0, len(rows), size):
                chunk = rows[first:first + size]
                edit = interventions.Mean(reference=reference) if mode == "mean" else mode
                logits = interventions.ablate(self.lens, [ids for ids, _, _ in chunk], mode=edit, layers=layers,
                                              heads=heads, allow_beyond_context=True)
                assert isinstance(logits, torch.Tensor)  # no metric: the logits
                log_probs = torch.log_softmax(logits.float(), dim=-1)
                for row, (_, positions, expected) in enumerate(chunk):
                    scored = log_probs[row, torch.as_tensor(positions)]
                    target = torch.as_tensor(expected)
                    hits.append(float(bool((scored.argmax(-1) == target).all())))
                    logprobs.append(float(scored.gather(-1, target[:, None]).mean()))
        return np.asarray(hits), np.asarray(logprobs)
