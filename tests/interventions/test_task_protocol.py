"""The causal study's protocol on the zoo's task models (Flip-Flop, text reversal): the scored sequences
against the tasks' own definitions, the scores against plain forward passes and greedy decoding, and the
study end to end (quick) on a task model; ``ablate`` beyond the trained length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.errors import ContextLengthError
from repo_lens.loading import load
from repo_lens.studies.reproductions.position_interventions_tasks import (TaskScorer, flipflop_set, reversal_set,
                                                                          trained_task)


@pytest.fixture(scope="module")
def reversal():
    return load("zoo:reversal-repo", device="cpu")


@pytest.fixture(scope="module")
def flipflop():
    return load("zoo:flipflop-rope", device="cpu")


def test_flipflop_sequences_score_every_read_bit_and_nothing_else():
    from repo_lens.train.flipflop import FLIPFLOP_VOCAB

    tasks = flipflop_set(32, 5)
    read, bits = FLIPFLOP_VOCAB.index("r"), {FLIPFLOP_VOCAB.index("0"), FLIPFLOP_VOCAB.index("1")}
    for family, rows in tasks.families.items():
        for ids, positions, expected in rows:
            assert len(ids) == (64 if "2×" in family else 32) - 1
            reads = [index for index, token in enumerate(ids) if token == read]
            assert positions.tolist() == reads  # every r, and only r, predicts a scored bit
            assert set(expected.tolist()) <= bits
            memory = None
            for index in range(0, len(ids) - 1, 2):  # the read bit is the latest written one
                if ids[index] == FLIPFLOP_VOCAB.index("w"):
                    memory = ids[index + 1]
                if ids[index] == read and index + 1 < len(ids):
                    assert ids[index + 1] == memory
            assert expected[-1] == memory  # the final read, whose bit is the unseen last token


def test_reversal_prompts_score_the_reversed_words(reversal):
    tasks = reversal_set(3, (4, 25))
    assert list(tasks.families) == ["4 words", "25 words (beyond training)"]
    for (ids, positions, expected), length in [(rows[0], n) for rows, n in zip(tasks.families.values(), (4, 25))]:
        eos, sep = (reversal.tokenizer.convert_tokens_to_ids(token) for token in ("<eos>", "<sep>"))
        assert len(expected) == length + 1 and positions[-1] == len(ids) - 1 and expected[-1] == eos
        assert ids[positions[0]] == sep  # <sep> predicts the first output word
        inputs = ids[positions[0] - length:positions[0]]
        assert expected[:-1].tolist() == inputs[::-1]
        assert ids[positions[0] + 1:] == expected[:-1].tolist()  # teacher forcing: the right words come in


def test_task_hits_match_a_plain_forward_pass(flipflop):
    tasks = flipflop_set(int(flipflop.model.cfg.max_position_embeddings), 24)
    hits, logprobs = TaskScorer(flipflop, tasks, 64)(interventions.Interpolate(p=0.0))
    expected_hits, expected_logprobs = [], []
    with torch.no_grad():
        for rows in tasks.families.values():
            logits = flipflop.model(torch.tensor([ids for ids, _, _ in rows]))
            for row, (_, positions, expected) in enumerate(rows):
                scored = torch.log_softmax(logits[row, positions], -1)
                expected_hits.append(float((scored.argmax(-1).numpy() == expected).all()))
                expected_logprobs.append(float(scored[np.arange(len(expected)), expected].mean()))
    np.testing.assert_array_equal(hits, expected_hits)
    np.testing.assert_allclose(logprobs, expected_logprobs, atol=1e-4)
    labels = np.asarray(tasks.labels())
    assert hits[labels == "in distribution, 128 tokens"].mean() == 1.0  # the card's 0 % error at 128 tokens
    assert 0.0 < hits[labels == "sparse, 256 tokens (2×)"].mean() < 1.0  # RoPE fails beyond its length


def test_teacher_forced_exact_match_is_greedy_decoding_accuracy(reversal):
    from repo_lens.train.tasks import ReversalTask

    task = ReversalTask(batch_size=1)
    eos = task.index["<eos>"]
    tasks = reversal_set(12, (30,))  # beyond training: some right, some wrong
    hits, _ = TaskScorer(reversal, tasks, 64)(interventions.Interpolate(p=0.0))
    greedy = []
    with torch.no_grad():
        for ids, positions, expected in next(iter(tasks.families.values())):
            tokens = list(ids[:positions[0] + 1])
            while len(tokens) <= len(ids) and (len(tokens) == positions[0] + 1 or tokens[-1] != eos):
                tokens.append(int(reversal.model(torch.tensor([tokens]))[0, -1].argmax()))
            greedy.append(float(tokens[positions[0] + 1:] == expected.tolist()))  # then stops at <eos>
    np.testing.assert_array_equal(hits, greedy)
    assert 0.0 < np.mean(hits) < 1.0


def test_ablate_runs_beyond_the_context_only_when_asked(flipflop):
    ids = flipflop_set(128, 1).families["sparse, 256 tokens (2×)"][0][0]
    with pytest.raises(ContextLengthError, match="allow_beyond_context"):
        interventions.ablate(flipflop, ids, mode="constant")
    logits = interventions.ablate(flipflop, ids, mode=interventions.Interpolate(p=0.0), allow_beyond_context=True)
    with torch.no_grad():
        torch.testing.assert_close(logits, flipflop.model(torch.tensor([ids])), rtol=0, atol=1e-5)
    edited = interventions.ablated_positions(flipflop, ids, mode="constant", layers=1, allow_beyond_context=True)
    assert edited.shape[-1] == len(ids) and np.ptp(edited[1]) == 0.0


@pytest.mark.study
def test_the_study_runs_a_task_model_through_the_retrieval_protocol(tmp_path, reversal):
    from repo_lens.studies.reproductions import STUDIES

    assert trained_task(reversal) == "reversal"
    document = STUDIES["position_interventions"].load()(tmp_path, ["zoo:reversal-repo"], quick=True, figures=False,
                                                        progress=False)
    result = document["results"]["zoo:reversal-repo"]
    assert result["protocol"] == "task" and result["patching"] is None and result["prompts"] == 10
    ablations = result["ablations"]
    assert len(ablations["unedited"]["by_family"]) == 5
    constant = ablations["conditions"]["all constant"]
    assert constant["moves"] and constant["accuracy"]["low"] <= constant["accuracy"]["value"]
    assert constant["vs_unedited"]["accuracy"]["difference"]["n"] == 10
    assert "reversal-repo" in document["markdown"] and "30 words (beyond training)" in document["markdown"]
    assert "| reversal-repo | repo | reversal exact match | 1.00 |" in document["markdown"]  # the mechanism table
