"""The inputs of the ``attention_sources`` study: for each task, the query rows that do the task, the keys each
of them should attend to, and how the task is scored under an edit of the positions.

- **needle** (a model trained on the retrieval mixture): RULER needle prompts in noise at the model's context
  (seeds disjoint from training's and from the cards'), depths evenly spread; the rows are the ones that predict
  the needle's value (the last byte before the answer and every answer byte but the last), their targets the
  value's tokens in the needle. Scored by exact match of the value and its log-probability (teacher forced).
- **reversal**: "<bos> Reverse the following words : x1 … xL <sep> xL … x1"; the row that predicts output
  word k (copy of input word L − k) targets that input word, its mirror. Scored by exact match of the whole
  reversal (the text-reversal test sets of 5, 10, 20, 25 and 30 words).
- **flipflop**: Flip-Flop sequences; each read instruction's row targets the latest write instruction and its
  bit. Scored by exact match of every read bit of a sequence (in distribution and sparse, at the training
  length).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from repo_lens.lens import Lens

NEEDLE_SEED = 9000  # above EVAL_SEED_OFFSET: held out from training, apart from the cards' prompts (0..) and
SELECTION_SEED = 9500  # the causal study's (7000..)
SELECTION_INPUTS = 8


@dataclass(frozen=True)
class Item:
    """One input: its token ids, the query rows that do the task and, per row, the keys it should attend to."""

    ids: list[int]
    rows: list[int]
    targets: list[np.ndarray]
    family: str


@dataclass(frozen=True)
class Case:
    """A task's inputs: ``selection`` (to pick the heads), ``items`` (to measure them), and ``scorer``
    ``(mode, layers, heads) -> (hits, log p)`` per scored input (``families`` name them)."""

    task: str
    target: str
    score: str
    selection: list[Item]
    items: list[Item]
    scorer: Callable[..., tuple[np.ndarray, np.ndarray]]
    families: list[str]


def needle_item(prompt: Any) -> Item:
    """The rows that predict the value and the value's tokens as their targets.

    >>> from repo_lens.data import PromptEncoding, niah_prompt
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> prompt = niah_prompt(ByteTokenizer(), 600, seed=1, encoding=PromptEncoding(add_special_tokens=False))
    >>> item = needle_item(prompt)
    >>> bytes(prompt.ids[item.rows[0] + 1:item.rows[-1] + 2].tolist()).decode() == prompt.answer
    True
    >>> bytes(prompt.ids[item.targets[0]].tolist()).decode() == prompt.answer
    True
    """
    start, end = prompt.query
    value = np.arange(*prompt.spans["value"])
    return Item(ids=[int(i) for i in prompt.ids], rows=list(range(start - 1, end - 1)), targets=[value] * (end - start),
                family="needle in noise")


def needle_case(lens: Lens, quick: bool, batch_size: int) -> Case:
    """RULER needles at the model's context (512 tokens where its context is shorter)."""
    from repo_lens.data.niah import niah_prompt
    from repo_lens.data.spans import PromptEncoding
    from repo_lens.studies.reproductions.attention import prompt_length
    from repo_lens.studies.reproductions.position_interventions import Scorer
    from repo_lens.train.mixture import EVAL_SEED_OFFSET

    count, chosen = (4, 2) if quick else (40, SELECTION_INPUTS)
    length = prompt_length(lens.context_length)

    def prompts(number: int, seed: int) -> list:
        return [niah_prompt(lens.tokenizer, length, depth=index / max(1, number - 1),
                            seed=EVAL_SEED_OFFSET + seed + index, encoding=PromptEncoding(add_special_tokens=False))
                for index in range(number)]

    measured = prompts(count, NEEDLE_SEED)
    return Case(task="needle", target="the needle's value", score="exact match of the value",
                selection=[needle_item(prompt) for prompt in prompts(chosen, SELECTION_SEED)],
                items=[needle_item(prompt) for prompt in measured], scorer=Scorer(lens, measured, batch_size),
                families=["needle in noise"] * count)


def reversal_item(ids: list[int], scored: np.ndarray, family: str) -> Item:
    """A reversal prompt (without its closing ``<eos>``) whose ``scored`` rows predict the L output words, then
    ``<eos>``: the row of output word k targets input word L − k, at 1 + len(prompt words) + L − 1 − k.

    >>> from repo_lens.train.tasks import ReversalTask
    >>> task = ReversalTask(batch_size=1)
    >>> example = task.example(random.Random(0), 4)
    >>> item = reversal_item(example.ids[:-1], np.arange(example.answer_start - 1, len(example.ids) - 1), "4 words")
    >>> [example.ids[row + 1] == example.ids[int(target[0])] for row, target in zip(item.rows, item.targets)]
    [True, True, True, True]
    """
    from repo_lens.data.reversal import REVERSAL_PROMPT

    words = len(scored) - 1
    first = 1 + len(REVERSAL_PROMPT)
    rows = [int(row) for row in scored[:words]]
    return Item(ids=list(ids), rows=rows, targets=[np.array([first + words - 1 - k]) for k in range(words)],
                family=family)


def reversal_case(lens: Lens, quick: bool, batch_size: int) -> Case:
    """The text-reversal test sets (``position_interventions_tasks.reversal_set``); heads picked on fresh
    10- and 20-word prompts."""
    from repo_lens.studies.reproductions.position_interventions_tasks import TaskScorer, reversal_set
    from repo_lens.train.tasks import ReversalTask

    tasks = reversal_set(2 if quick else 20)
    task = ReversalTask(batch_size=1)
    selection = []
    for words in (10, 20):
        rng = random.Random(f"attention-sources-{words}")
        for _ in range(1 if quick else SELECTION_INPUTS // 2):
            example = task.example(rng, words)
            selection.append(reversal_item(example.ids[:-1], np.arange(example.answer_start - 1, len(example.ids) - 1),
                                           f"{words} words"))
    items = [reversal_item(ids, scored, family) for family, rows in tasks.families.items() for ids, scored, _ in rows]
    return Case(task="reversal", target="the mirrored input word", score="exact match of the reversal",
                selection=selection, items=items, scorer=TaskScorer(lens, tasks, max(batch_size, 64)),
                families=tasks.labels())


def flipflop_item(ids: list[int], family: str) -> Item:
    """Each read instruction's row, targeting the latest write instruction before it and its bit.

    >>> from repo_lens.train.flipflop import FLIPFLOP_VOCAB
    >>> code = {token: index for index, token in enumerate(FLIPFLOP_VOCAB)}
    >>> ids = [code[t] for t in "w 1 i 0 w 0 r 0 i 1 r".split()]
    >>> item = flipflop_item(ids, "toy")
    >>> item.rows, [target.tolist() for target in item.targets]
    ([6, 10], [[4, 5], [4, 5]])
    """
    from repo_lens.train.flipflop import FLIPFLOP_VOCAB

    write, read = FLIPFLOP_VOCAB.index("w"), FLIPFLOP_VOCAB.index("r")
    rows, targets, latest = [], [], None
    for index in range(0, len(ids), 2):
        if ids[index] == write:
            latest = index
        elif ids[index] == read and latest is not None:
            rows.append(index)
            targets.append(np.array([latest, latest + 1]))
    return Item(ids=list(ids), rows=rows, targets=targets, family=family)


def flipflop_case(lens: Lens, quick: bool, batch_size: int) -> Case:
    """The Flip-Flop test sets at the training length (``position_interventions_tasks.flipflop_set``: in
    distribution and sparse; the set at twice the length is left out, it would cost four times as much again
    under every edit), measured and scored; the heads are picked on fresh in-distribution sequences."""
    from repo_lens.studies.reproductions.position_interventions_tasks import TaskScorer, TaskSet, flipflop_set
    from repo_lens.train.flipflop import FlipFlopTask

    length = int(lens.model.cfg.max_position_embeddings)
    tasks = TaskSet()
    for family, rows in flipflop_set(length, 2 if quick else 50).families.items():
        for ids, scored, expected in rows:
            if len(ids) <= length:
                tasks.add(family, ids, scored, expected)
    generator = FlipFlopTask(batch_size=1, length=length)
    rng = random.Random("attention-sources-flipflop")
    selection = [flipflop_item(generator.sequence(rng, generator.train_ignore)[:-1], "selection")
                 for _ in range(2 if quick else SELECTION_INPUTS)]
    items = [flipflop_item(ids, family) for family, rows in tasks.families.items() for ids, _, _ in rows]
    return Case(task="flipflop", target="the latest write and its bit", score="exact match of every read bit",
                selection=selection, items=items, scorer=TaskScorer(lens, tasks, max(batch_size, 64)),
                families=tasks.labels())


CASES: dict[str, Callable[[Any, bool, int], Case]] = {"mix": needle_case, "reversal": reversal_case,
                                                     "flipflop": flipflop_case}
