"""The intervals and tests of ``interventions.stats`` (scipy.stats inside) against values worked out by hand,
and against what the earlier hand-written code recorded on real study outputs (the shipped results.json.gz)."""

from __future__ import annotations

import gzip
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from repo_lens.interventions import stats

RESULTS = Path(__file__).resolve().parents[2] / "analyses/results/position_interventions/results.json.gz"


def wilson_by_hand(hits: int, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval from its textbook formula (centre ± half width, clipped to [0, 1])."""
    rate = hits / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@pytest.mark.parametrize(("hits", "n"), [(0, 10), (10, 10), (5, 10), (2, 32), (31, 32), (150, 210), (1, 1)])
@pytest.mark.parametrize("z", [stats.Z95, 1.0, 2.5758293035489004])
def test_wilson_is_the_textbook_formula(hits, n, z):
    estimate = stats.wilson(hits, n, z=z)
    assert estimate["value"] == hits / n and estimate["n"] == n
    assert (estimate["low"], estimate["high"]) == pytest.approx(wilson_by_hand(hits, n, z), abs=1e-12)


def test_wilson_at_the_ends_by_hand():
    z2 = stats.Z95 ** 2  # 0 of n: [0, z²/(n + z²)]; n of n: the mirror image
    none, every = stats.wilson(0, 10), stats.wilson(10, 10)
    assert (none["low"], none["high"]) == pytest.approx((0.0, z2 / (10 + z2)), abs=1e-12)
    assert (every["low"], every["high"]) == pytest.approx((10 / (10 + z2), 1.0), abs=1e-12)
    empty = stats.wilson(3, 0)
    assert empty["n"] == 0 and all(math.isnan(empty[key]) for key in ("value", "low", "high"))


@pytest.mark.parametrize(("only_first", "only_second", "expected"), [
    (10, 0, Fraction(2, 2 ** 10)),                 # 2 · C(10, 0) / 2^10
    (3, 0, Fraction(2, 2 ** 3)),
    (5, 1, Fraction(2 * (1 + 6), 2 ** 6)),          # 2 · (C(6,0) + C(6,1)) / 2^6
    (12, 2, Fraction(2 * (1 + 14 + 91), 2 ** 14)),  # 2 · (C(14,0) + C(14,1) + C(14,2)) / 2^14
    (2, 12, Fraction(2 * (1 + 14 + 91), 2 ** 14)),
    (9, 9, Fraction(1)), (0, 1, Fraction(1)), (0, 0, Fraction(1)),
])
def test_mcnemar_exact_p_values_by_hand(only_first, only_second, expected):
    concordant = [1] * 4 + [0] * 5  # pairs that agree do not count
    first = [1] * only_first + [0] * only_second + concordant
    second = [0] * only_first + [1] * only_second + concordant
    assert stats.mcnemar(first, second) == pytest.approx(float(expected), rel=1e-12)
    assert stats.paired(first, second, binary=True)["p"] == pytest.approx(float(expected), rel=1e-12)


def bootstrap_by_hand(data: np.ndarray, resamples: int = 2000, seed: int = 0, level: float = 0.95):
    """Percentile bootstrap of the mean with numpy alone: ``resamples`` rows of indices drawn with replacement."""
    means = data[np.random.default_rng(seed).integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return tuple(np.percentile(means, [tail, 100 - tail]))


def test_bootstrap_mean_equals_the_numpy_resampling():
    logprobs = np.asarray(_results()["results"]["zoo:bytes1k-repo"]["ablations"]["unedited"]["logprobs"])
    for data, seed, level, resamples in [(logprobs, 0, 0.95, 2000), (logprobs[:7], 3, 0.9, 500),
                                         (np.array([0.0, 1.0]), 1, 0.95, 2000)]:
        estimate = stats.bootstrap_mean(data, resamples=resamples, seed=seed, level=level)
        assert estimate["value"] == pytest.approx(data.mean()) and estimate["n"] == data.size
        assert (estimate["low"], estimate["high"]) == pytest.approx(bootstrap_by_hand(data, resamples, seed, level),
                                                                    abs=1e-12)


def test_bootstrap_mean_of_one_value_and_of_nan():
    assert stats.bootstrap_mean([3.5]) == {"value": 3.5, "low": 3.5, "high": 3.5, "n": 1}
    assert stats.bootstrap_mean([2.0, 2.0, 2.0]) == {"value": 2.0, "low": 2.0, "high": 2.0, "n": 3}
    with_nan = stats.bootstrap_mean([1.0, float("nan"), 2.0])
    assert with_nan["n"] == 3 and all(math.isnan(with_nan[key]) for key in ("value", "low", "high"))
    assert stats.bootstrap_mean([])["n"] == 0


def test_sign_flip_by_hand():
    # one difference: every flip has the same |mean|, so every resample is as extreme: p = 1
    assert stats.sign_flip([2.0], resamples=999) == 1.0
    assert stats.sign_flip([1.0, -1.0]) == 1.0  # mean 0
    # three equal differences: only the 2 of 8 sign patterns that agree reach |mean| = 1, so p ≈ 1/4
    assert stats.sign_flip([1.0, 1.0, 1.0], resamples=20000) == pytest.approx(0.25, abs=0.015)


def _results() -> dict:
    if not RESULTS.is_file():
        pytest.skip(f"{RESULTS} is not in this checkout")
    return json.loads(gzip.decompress(RESULTS.read_bytes()))


@pytest.mark.study
def test_the_recorded_intervals_and_p_values_of_a_real_study_are_reproduced():
    """results.json was written by the hand-written Wilson, bootstrap and McNemar: the same inputs give the same
    numbers (the hits are exact 0/1; the logprobs are rounded there, so their intervals are not compared)."""
    compared = 0
    for model, result in _results()["results"].items():
        if "ablations" not in result:
            continue
        unedited = result["ablations"]["unedited"]
        recorded = unedited["accuracy"]
        assert stats.accuracy(unedited["hits"]) == pytest.approx(recorded, abs=1e-12), model
        for name, condition in result["ablations"]["conditions"].items():
            if "hits" not in condition:  # per-prompt outcomes are kept for some conditions only
                continue
            accuracy = stats.accuracy(condition["hits"])
            assert accuracy == pytest.approx(condition["accuracy"], abs=1e-12), (model, name)
            test = stats.paired(condition["hits"], unedited["hits"], binary=True)
            recorded = condition["vs_unedited"]["accuracy"]
            assert test["test"] == recorded["test"]
            assert test["p"] == pytest.approx(recorded["p"], rel=1e-9, abs=1e-300), (model, name)
            assert test["difference"] == pytest.approx(recorded["difference"], abs=1e-12), (model, name)
            compared += 1
    assert compared >= 20


def test_head_comparisons_by_family_pool_to_the_study_s_own_comparison():
    """analyses/head_comparisons_by_family.py: its pooled cell is the study's recorded head-against-head test,
    and each family's cell is the same test on that family's prompts alone (recomputed here by hand)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("by_family", RESULTS.parents[2] / "head_comparisons_by_family.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    result = _results()["results"]["zoo:bytes1k-repo"]
    cells = script.compare(result, "head 2.0 constant", "head 2.3 constant")
    recorded = result["ablations"]["head_comparisons"]["2 constant h0 vs h3"]
    assert cells[0].startswith(f"{recorded['difference']['value']:+.2f} ") and f"p = {recorded['p']:.2g}" in cells[0]
    first = np.asarray(result["ablations"]["conditions"]["head 2.0 constant"]["hits"])
    second = np.asarray(result["ablations"]["conditions"]["head 2.3 constant"]["hits"])
    families = result["ablations"]["unedited"]["by_family"]
    assert len(cells) == 1 + len(families)
    start = 0
    for cell, score in zip(cells[1:], families.values()):
        rows = slice(start, start + score["accuracy"]["n"])
        assert np.isclose(float(cell.split()[0]), first[rows].mean() - second[rows].mean(), atol=0.005)
        start += score["accuracy"]["n"]
    assert start == len(first)
