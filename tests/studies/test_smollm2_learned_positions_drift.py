"""analyses/smollm2_learned_positions.py's relative drift on synthetic gaps: units are heads, or layers where a
layer's heads are copies; the first token of each sequence is left out; the gap before and the gap after a
token are told apart (a class effect on the token that emits an exclusive sum's step shows in "after"); and
the markdown table carries the numbers of summary.json."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "analyses" / "smollm2_learned_positions.py"
CLASSES = np.array(["whitespace", "punctuation", "word_initial", "continuation", "number"])


@pytest.fixture(scope="module")
def script():
    import repo_lens.analysis  # noqa: F401  (the script imports it lazily; loaded here, outside the tests' time)

    spec = importlib.util.spec_from_file_location("smollm2_learned_positions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.N_BOOT, module.N_PERMUTATIONS = 100, 99
    return module


def sequences(seed: int, n_layers: int, n_heads: int, copies: bool) -> tuple[np.ndarray, np.ndarray]:
    """Two sequences of 400 tokens; each unit's speed differs, and the step after a punctuation token is 2%
    longer (an exclusive sum: the gap before token t is emitted by token t − 1). NaN at each sequence's start."""
    rng = np.random.default_rng(seed)
    category = rng.choice(CLASSES, 800)
    emitted = 1.0 + 0.02 * (category == "punctuation")
    speed = rng.uniform(0.5, 1.5, (n_layers, 1 if copies else n_heads, 1))
    gap = speed * (np.roll(emitted, 1) + rng.normal(0, 0.01, (n_layers, 1 if copies else n_heads, 800)))
    gap = np.broadcast_to(gap, (n_layers, n_heads, 800)).copy()
    gap[..., [0, 400]] = np.nan
    return gap, category


def test_heads_or_layers_and_the_side_of_the_token(script):
    gap, category = sequences(0, 3, 4, copies=False)
    result = script.drift_measures(gap, category, [10, 11, 12])
    assert (result["unit"], result["units"], result["tokens"]) == ("head", 12, 798)
    assert list(result["before"]["units"])[:5] == ["L10H0", "L10H1", "L10H2", "L10H3", "L11H0"]
    after, before = result["after"], result["before"]
    assert after["spread"]["p_value"] == pytest.approx(0.01) and after["spread"]["units_significant_bh"] == 12
    assert after["by_class"]["punctuation"]["interval"][0] > 0 and after["by_class"]["punctuation"]["share_units_up"] == 1
    assert before["spread"]["p_value"] > 0.05  # the token after the step is unrelated to it
    unit = after["units"]["L11H2"]
    row = gap[1, 2][~np.isnan(gap[1, 2])]
    assert unit["mean"] == pytest.approx(row.mean()) and unit["sd"] == pytest.approx(row.std())
    members = row[np.roll(category, 1)[~np.isnan(gap[1, 2])] == "punctuation"]
    assert unit["drift"]["punctuation"]["mean"] == pytest.approx(members.mean() - row.mean())
    assert unit["drift"]["punctuation"]["sd_units"] == pytest.approx((members.mean() - row.mean()) / row.std())
    assert after["trend"]["order"] == ["whitespace", "punctuation", "word_initial", "continuation"]


def test_layers_whose_heads_are_copies_count_once(script):
    gap, category = sequences(1, 2, 9, copies=True)
    result = script.drift_measures(gap, category, [10, 11])
    assert (result["unit"], result["units"]) == ("layer", 2) and list(result["after"]["units"]) == ["L10", "L11"]
    json.dumps(result)  # summary.json holds it as it is
    table = script.drift_markdown({"lpi": {"source": "synthetic", "relative_drift": result}})
    row = result["after"]["by_class"]["punctuation"]
    assert f"| punctuation | {row['tokens']} | {row['median_drift']:+.4f} [" in table
    assert f"{result['after']['spread']['units_significant_bh']} of 2 layers significant" in table


def test_one_delta_shared_by_every_layer_is_one_unit_with_its_own_interval(script):
    """The graft: every layer and head has the same gaps, so they count once, and the interval is the unit's own
    bootstrap over tokens (one unit has no spread over units)."""
    gap, category = sequences(2, 1, 1, copies=True)
    shared = np.broadcast_to(gap, (4, 3, gap.shape[-1])).copy()
    result = script.drift_measures(shared, category, [0, 1, 2, 3])
    assert (result["unit"], result["units"]) == ("shared δ", 1) and list(result["after"]["units"]) == ["shared"]
    row = result["after"]["by_class"]["punctuation"]
    unit = result["after"]["units"]["shared"]
    assert row["median_drift"] == pytest.approx(unit["drift"]["punctuation"]["mean"])
    low, high = row["interval"]
    assert low < row["median_drift"] < high and low > 0  # the 2 % longer step after punctuation, resolved
    assert row["interval_sd"] == pytest.approx([low / unit["sd"], high / unit["sd"]])
    assert result["after"]["spread"]["units_significant_bh"] == 1
    table = script.drift_markdown({"graft": {"source": "synthetic", "relative_drift": result}})
    assert "the class's mean drift from the shared δ's mean gap [95% bootstrap interval over tokens]" in table
    assert f"| punctuation | {row['tokens']} | {row['median_drift']:+.4f} [{low:+.4f}, " in table
    assert ": 1 shared δ," in table and "1 of 1 shared δ significant" in table  # one unit, said in the singular
