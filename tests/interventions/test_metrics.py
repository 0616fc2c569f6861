"""The built-in metrics on logits written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from repo_lens import interventions

IDS = np.array([5, 1, 2, 3])  # the answer is tokens 2..3 (ids 2, 3), predicted by rows 1 and 2


def _logits() -> torch.Tensor:
    logits = torch.zeros(2, 4, 6)
    logits[0, 1, 2] = logits[0, 2, 3] = math.log(5.0)  # row 0: p = 5/10 for each answer token, both argmax
    logits[1, 1, 2] = math.log(5.0)                     # row 1: the second answer token is uniform (p = 1/6)
    return logits


def test_answer_logprob_loss_and_exact_match_by_hand():
    target = (IDS, (2, 4))
    logprob = interventions.answer_logprob(target)(_logits())
    np.testing.assert_allclose(logprob.numpy(), [2 * math.log(0.5), math.log(0.5) + math.log(1 / 6)], rtol=1e-6)
    loss = interventions.span_loss(target)(_logits())
    np.testing.assert_allclose(loss.numpy(), -logprob.numpy() / 2, rtol=1e-6)
    assert interventions.niah_exact_match(target)(_logits()).tolist() == [1.0, 0.0]


def test_one_target_per_row_and_logit_difference():
    per_row = interventions.answer_logprob([(IDS, (2, 4)), (IDS, (3, 4))])(_logits())
    np.testing.assert_allclose(per_row.numpy(), [2 * math.log(0.5), math.log(1 / 6)], rtol=1e-6)
    assert interventions.logit_difference(2, 0, position=1)(_logits()).tolist() == pytest.approx([math.log(5.0)] * 2)


def test_metrics_are_differentiable_except_exact_match():
    logits = _logits().requires_grad_(True)
    assert interventions.answer_logprob((IDS, (2, 4)))(logits).requires_grad
    assert not interventions.niah_exact_match((IDS, (2, 4)))(logits).requires_grad
