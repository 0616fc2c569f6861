"""The retrieval mixture (issue 17): rows of exact length, answer weights on exactly the answer bytes,
reproducible batches, a weighted loss in the loop and a NIAH accuracy that counts what greedy decoding does."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.train import preset, train
from repo_lens.train.mixture import RetrievalMixTask, niah_accuracy

ENGLISH = ["The river ran past the old mill and the children watched the boats go by. " * 40,
           "A letter came on Monday; nobody opened it until the rain stopped. " * 40]
ENGLISH_HELD_OUT = ["Zebras crossed the plain at dawn. " * 80]
CHINESE = ["今天的天气很好，我们一起去公园散步。" * 60, "新年的第一天，城市里到处都是欢乐的人群。" * 60]
CHINESE_HELD_OUT = ["山上的雪还没有融化。" * 120]
SPLITS = {"en": (ENGLISH, ENGLISH_HELD_OUT), "zh": (CHINESE, CHINESE_HELD_OUT)}


def make_task(**options) -> RetrievalMixTask:
    return RetrievalMixTask(SPLITS, context=768, batch_size=12, lengths=(512, 768), **options)


def test_rows_have_the_drawn_length_and_targets_are_the_next_bytes():
    task = make_task()
    for step in range(6):
        inputs, targets, weights = task.train_batch(step)
        assert inputs.shape == targets.shape == weights.shape
        assert inputs.shape[0] == 12 and inputs.shape[1] in (512, 768)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        assert int(inputs.max()) <= ByteTokenizer.separator_id and int(inputs.min()) >= 0


def test_every_row_kind_mixes_in_one_batch():
    from repo_lens.train.mixture import ROW_KINDS

    task = make_task(row_weights={kind: 1.0 for kind in ROW_KINDS})
    for step in range(8):  # 96 rows: every kind appears, the NIAH prompts' own meta included
        inputs, targets, weights = task.train_batch(step)
        assert inputs.shape == weights.shape and float(weights.max()) == task.answer_weight


def test_the_heavy_weights_sit_on_exactly_the_answer_and_the_answer_is_in_the_context():
    task = make_task(row_weights={"niah": 1.0}, answer_weight=7.0)
    tokenizer = ByteTokenizer()
    inputs, targets, weights = task.train_batch(3)
    for row in range(inputs.shape[0]):
        heavy = (weights[row] == 7.0).nonzero().flatten()
        assert set(weights[row].unique().tolist()) == {1.0, 7.0}
        assert torch.equal(heavy, torch.arange(int(heavy[0]), int(heavy[-1]) + 1))  # one contiguous run
        assert int(heavy[-1]) == inputs.shape[1] - 1  # the answer ends the row
        answer = tokenizer.decode(targets[row, heavy].tolist())
        before = tokenizer.decode([t for t in inputs[row, : int(heavy[0])].tolist() if t < 256])
        assert re.fullmatch(r"\d{7}", answer), answer
        assert f"is: {answer}." in before  # the needle holding the answer is inside the row
        assert before.rstrip().endswith("mentioned in the provided text is")


def test_fewshot_and_table_rows_weigh_their_answers():
    tokenizer = ByteTokenizer()
    for kind in ("fewshot", "table"):
        task = make_task(row_weights={kind: 1.0}, answer_weight=3.0)
        inputs, targets, weights = task.train_batch(1)
        for row in range(inputs.shape[0]):
            heavy = (weights[row] == 3.0).nonzero().flatten()
            assert len(heavy) >= 1
            assert int(heavy[-1]) == inputs.shape[1] - 1
            answer = tokenizer.decode(targets[row, heavy].tolist())
            before = tokenizer.decode([t for t in inputs[row, : int(heavy[0])].tolist() if t < 256])
            if kind == "table":  # the answer is a cell of the row's table, asked for by the question
                assert re.search(rf"(\| |: ){re.escape(answer)}( \||\n| \|?\n)", before + "\n"), (answer, before[-300:])
                assert re.search(r"What is the (city|age|code) of \w+\? ?$", before)
            else:  # the answer follows the query's output prefix
                assert before.rstrip().endswith("Output:"), before[-80:]


def test_recall_rows_weigh_every_answer_and_each_answer_is_the_keys_value():
    tokenizer = ByteTokenizer()
    task = make_task(row_weights={"recall": 1.0}, answer_weight=4.0)
    styles = set()
    for step in range(4):
        inputs, targets, weights = task.train_batch(step)
        for row in range(inputs.shape[0]):
            text = tokenizer.decode([t for t in inputs[row].tolist() if t < 256]) + tokenizer.decode([int(targets[row, -1])])
            memory, questions_text = re.split(r"(?<=[.;] )\n|(?<=\.\n)\n", text.split("Remember:\n", 1)[1], maxsplit=1)
            short = dict(re.findall(r"([a-z]+-[a-z]+)=(\d{7}); ", memory))
            needles = dict(re.findall(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.\n", memory))
            assert bool(short) != bool(needles)  # one style per row
            styles.add("short" if short else "needle")
            pairs = short or needles
            pattern = r"([a-z]+-[a-z]+)\? (\d{7})\n?" if short else r"The special magic number for ([a-z]+-[a-z]+) is (\d{7})\n?"
            questions = re.findall(pattern, questions_text)
            assert len(questions) >= 2 and all(pairs[key] == value for key, value in questions)
            heavy = tokenizer.decode(targets[row, weights[row] == 4.0].tolist())
            assert heavy == "".join(value for _, value in questions)  # every answer, and nothing else
    assert styles == {"short", "needle"}


def test_repeat_rows_write_one_segment_again_and_again_with_plain_weights():
    tokenizer = ByteTokenizer()
    task = make_task(row_weights={"repeat": 1.0}, answer_weight=4.0)
    for step in range(3):
        inputs, targets, weights = task.train_batch(step)
        assert torch.equal(weights, torch.ones_like(weights))  # dense copying needs no extra weight
        for row in range(inputs.shape[0]):
            assert int(inputs[row, 0]) == ByteTokenizer.separator_id
            text = tokenizer.decode(inputs[row, 1:].tolist()) + tokenizer.decode([int(targets[row, -1])])
            segment = text[:text.index("\n") + 1]
            assert 20 <= len(segment) <= 220 and all(word.isalpha() or (word.isdigit() and len(word) == 7)
                                                      for word in segment.split())
            assert text == (segment * (len(text) // len(segment) + 1))[:len(text)]  # the segment, over and over


def test_copy_warmup_steps_are_repeat_rows_at_the_shortest_length_then_the_mix():
    task = make_task(row_weights={"niah": 1.0}, copy_warmup_steps=3)
    for step in range(3):
        inputs, targets, weights = task.train_batch(step)
        assert inputs.shape == (12, 512) and torch.equal(weights, torch.ones_like(weights))
        text = ByteTokenizer().decode(inputs[0, 1:].tolist())
        segment = text[:text.index("\n") + 1]
        assert text == (segment * (len(text) // len(segment) + 1))[:len(text)]
    _, _, weights = task.train_batch(3)  # NIAH rows from here on: their answers weigh more
    assert bool((weights > 1).any())
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InputError, match="copy_warmup_steps"):
            make_task(copy_warmup_steps=bad)


def test_batches_depend_only_on_seed_and_step():
    first, second = make_task(), make_task()
    for step in (0, 7, 7, 2):
        a, b = first.train_batch(step), second.train_batch(step)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(first.train_batch(0)[0], first.train_batch(1)[0][:, : first.train_batch(0)[0].shape[1]])


def test_text_rows_come_from_training_documents_and_evaluation_prompts_from_held_out_ones():
    task = make_task(row_weights={"text": 1.0})
    inputs, _, weights = task.train_batch(0)
    assert bool((weights == 1).all())
    train_text = [doc.encode() for lang in SPLITS for doc in SPLITS[lang][0]]
    for row in inputs[:4]:
        chunk = bytes(row[100:140].tolist())
        assert any(chunk in doc for doc in train_text)
    prompts = task.niah_prompts(600, 3, haystack="en")
    assert all(len(p.ids) <= 600 and "special magic number" in p.text for p in prompts)
    assert all("Zebras crossed the plain" in p.text and "river" not in p.text for p in prompts)
    assert all(b"Zebras" not in bytes(row.clamp(max=255).tolist()) for row in task.train_batch(1)[0])


class OracleModel(torch.nn.Module):
    """Logits that predict the next byte of the prompts it was built from (a perfect model), except
    the positions listed in ``wrong``."""

    def __init__(self, prompts, wrong=()):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.rows = {tuple(np.asarray(p.ids).tolist()): i for i, p in enumerate(prompts)}
        self.wrong = set(wrong)

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, 257)
        for row in range(ids.shape[0]):
            sequence = ids[row].tolist()
            index = next(i for key, i in self.rows.items() if tuple(sequence[: len(key)]) == key)
            for t in range(ids.shape[1] - 1):
                predicted = sequence[t + 1]
                if (index, t) in self.wrong:
                    predicted = (predicted + 1) % 256
                logits[row, t, predicted] = 1.0
        return logits


def test_niah_accuracy_counts_a_prompt_right_only_when_every_answer_byte_is_the_argmax():
    task = make_task()
    prompts = task.niah_prompts(512, 5)
    assert niah_accuracy(OracleModel(prompts), prompts, batch_size=2) == 1.0
    start, end = prompts[3].query
    # the last answer byte wrong in prompt 3; the byte after the answer wrong in prompt 1 (not counted)
    wrong = {(3, end - 2), (1, end)}
    assert niah_accuracy(OracleModel(prompts, wrong), prompts, batch_size=2) == pytest.approx(4 / 5)
    wrong = {(0, prompts[0].query[0] - 1), (2, prompts[2].query[0] - 2)}  # first answer byte; the byte before
    assert niah_accuracy(OracleModel(prompts, wrong), prompts, batch_size=3) == pytest.approx(4 / 5)


def test_the_loop_minimises_the_weighted_mean_of_the_token_losses(tmp_path, monkeypatch):
    cfg = preset("tiny", mechanism="rope", steps=1, context=512, eval_every=1, lr=0.0, warmup=1)
    task = RetrievalMixTask(SPLITS, context=512, batch_size=2, answer_weight=5.0)
    seen = []
    real = torch.nn.functional.cross_entropy

    def spy(logits, targets, **kwargs):
        loss = real(logits, targets, **kwargs)
        if kwargs.get("reduction") == "none":
            seen.append((logits.detach(), targets, loss.detach()))
        return loss

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", spy)
    result = train(cfg, task, tmp_path / "run", progress=False)
    logits, targets, per_token = seen[0]
    _, _, weights = task.train_batch(0)
    expected = (per_token * weights.flatten()).sum() / weights.sum()
    log_probs = torch.log_softmax(logits.float(), -1).gather(-1, targets[:, None]).squeeze(-1)
    torch.testing.assert_close(per_token, -log_probs, atol=1e-5, rtol=1e-5)
    assert result.history[0]["train_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert weights.max() == 5.0 and (weights == 5.0).sum() >= 1  # the batch has answer bytes to weigh


@pytest.mark.parametrize("options, named", [
    ({"lengths": (256,)}, "512"), ({"lengths": (1024,)}, "512..768"), ({"lengths": (600.5,)}, "whole numbers"),
    ({"length_weights": (1.0,)}, "one positive number per row length"),
    ({"length_weights": (1.0, -1.0)}, "one positive number"), ({"row_weights": {"poems": 1.0}}, "unknown kinds"),
    ({"row_weights": {"text": 0}}, "not all 0"), ({"answer_weight": float("nan")}, "answer_weight"),
])
def test_bad_mixture_settings_are_refused_naming_the_setting(options, named):
    from repo_lens.errors import InputError

    settings = {"lengths": (512, 768), **options}
    with pytest.raises(InputError, match=re.escape(named)):
        RetrievalMixTask(SPLITS, context=768, batch_size=2, **settings)
    with pytest.raises(InputError, match="more than"):
        RetrievalMixTask({"en": (["short"], ["text"])}, context=512, batch_size=2)
