"""The one AttentionMass assembly both lenses use: key groups and per-token mass, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis.mass_rows import REST, key_groups, mass_from_group_sums


def test_key_groups_by_hand():
    # keys 0..9, query rows 8..9; spans (1, 3) and (5, 6); a span after the query sees no key
    groups = key_groups({"a": (1, 3), "b": (5, 6), "late": (12, 14)}, (8, 10))
    assert groups.names == ["a", "b", "late", REST]
    assert groups.index.tolist() == [3, 0, 0, 3, 3, 1, 3, 3, 4, 4]
    assert groups.lengths == {"a": 2, "b": 1, "late": 2, REST: 5}
    assert (groups.own, groups.count, groups.query) == (4, 5, (8, 10))


def test_mass_from_group_sums_by_hand():
    groups = key_groups({"needle": (0, 2)}, (5, 6))  # rest = keys 2, 3, 4
    sums = np.array([  # two layers × two heads; columns: needle, rest, own row
        [[0.6, 0.3, 0.1], [0.2, 0.6, 0.2]],
        [[0.4, 0.3, 0.3], [0.0, 0.9, 0.1]],
    ])
    mass = mass_from_group_sums(sums, groups, [1, 3], ["rope", "repo"])
    np.testing.assert_allclose(mass.by_layer_head["needle"], [[0.3, 0.1], [0.2, 0.0]])
    np.testing.assert_allclose(mass.by_layer_head[REST], [[0.1, 0.2], [0.1, 0.3]])
    assert mass.per_token == pytest.approx({"needle": 0.15, REST: 0.175})
    np.testing.assert_allclose(mass.self_mass, [[0.1, 0.2], [0.3, 0.1]])
    assert mass.span_lengths == {"needle": 2, REST: 3} and mass.query == (5, 6)
    assert mass.layers == [1, 3] and mass.layer_kinds == ["rope", "repo"]
    assert mass.total("needle") == pytest.approx(0.3)


def test_a_rest_without_keys_is_nan():
    groups = key_groups({"all": (0, 4)}, (4, 5))
    mass = mass_from_group_sums(np.array([[[0.7, 0.0, 0.3]]]), groups, [0], ["rope"])
    assert groups.lengths[REST] == 0 and np.isnan(mass.per_token[REST])
    assert mass.per_token["all"] == pytest.approx(0.175)
