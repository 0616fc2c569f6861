"""Issue 13, property-based: the public analyzers and plot builders on arbitrary arrays.

Valid input (finite arrays of the documented shape) gives results of the documented shape and
range, checked against independent expectations (a per-chunk loop, brute-force pair counting,
cumulative sums, numpy's own reductions); invalid input (wrong rank, NaN/inf where refused, empty,
non-numeric dtype, mismatched lengths) raises the project's InputError and never another exception.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repo_lens.analysis import (
    BYTE_CATEGORIES,
    PATTERN_LABELS,
    SUBWORD_CATEGORIES,
    attention_lookback,
    boundary_auc,
    byte_categories,
    chunk_patterns,
    entity_grouping_test,
    head_summary,
    increments_by_category,
    lookback_correlation,
    pattern_fractions,
    position_increments,
    range_stats,
    select_heads,
    subword_categories,
)
from repo_lens.errors import InputError
from repo_lens.plots import (
    boundary_auc_figure,
    category_increments_figure,
    layer_head_heatmap,
    layer_series_figure,
    pattern_fractions_figure,
    pattern_strip_figure,
    position_scatter_figure,
    range_heatmap,
    spaced_tokens_figure,
)
from repo_lens.trace import Trace

FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIGURES = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values with many ties, exact constants and ordinary spread, so every chunk pattern occurs
VALUES = st.one_of(st.sampled_from([0.0, 0.1, 0.2, 1.0, -1.0]), st.floats(-100, 100, allow_nan=False, width=32))


def positions_arrays(min_tokens: int = 1, max_tokens: int = 24, elements=VALUES):
    shapes = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(min_tokens, max_tokens))
    return shapes.flatmap(lambda shape: hnp.arrays(np.float64, shape, elements=elements))


def broken_arrays(ndim: int | None, min_tokens: int = 1):
    """Arrays an analyzer of rank ``ndim`` (None: any rank >= 1) must refuse, with what is wrong with them."""
    rank = ndim or 2
    good_shape = st.tuples(*[st.integers(1, 3)] * (rank - 1), st.integers(min_tokens, 12))
    bad_value = st.sampled_from([np.nan, np.inf, -np.inf])

    def with_bad_value(shape):
        return st.tuples(hnp.arrays(np.float64, shape, elements=st.floats(-10, 10)), bad_value,
                         st.integers(0, int(np.prod(shape)) - 1)).map(_put_bad_value)

    cases = [
        good_shape.flatmap(with_bad_value),
        good_shape.map(lambda shape: np.zeros(shape[:-1] + (0,))),  # empty
        good_shape.map(lambda shape: np.full(shape, "1.0")),  # str dtype
        good_shape.map(lambda shape: np.ones(shape, dtype=complex)),
        good_shape.map(lambda shape: np.full(shape, None, dtype=object)),
    ]
    if ndim is not None:
        wrong_ranks = [r for r in range(0, 5) if r != ndim]
        cases.append(st.sampled_from(wrong_ranks).map(lambda r: np.ones((2,) * r)))
    else:
        cases.append(st.just(np.float64(1.0)))
    return st.one_of(cases)


def _put_bad_value(parts):
    array, value, index = parts
    array = array.copy()
    array.flat[index] = value
    return array


def refused(function, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        function(*args, **kwargs)
    return caught.value


# ---------------------------------------------------------------- analyzers on valid input

@FEW
@given(positions_arrays(elements=st.floats(allow_nan=False, allow_infinity=False)))
def test_range_stats_is_the_non_negative_spread(z):
    ranges = range_stats(z)
    assert ranges.shape == z.shape[:2]
    assert (ranges >= 0).all()
    with np.errstate(over="ignore"):
        assert np.array_equal(ranges, z.max(-1) - z.min(-1))


def _chunk_pattern_by_loop(chunk: list[float], eps: float) -> str:
    mean = 0.0
    for value in chunk:  # the documented left-to-right sum
        mean += value
    mean /= len(chunk)
    if all(abs(value - mean) <= eps for value in chunk):
        return "constant"
    steps = [b - a for a, b in zip(chunk, chunk[1:])]
    if all(step > 0 for step in steps) or all(step < 0 for step in steps):
        return "mono"
    return "hybrid"


@FEW
@given(positions_arrays(min_tokens=2), st.integers(2, 6), st.sampled_from([0.0, 0.2, 1.0]))
def test_chunk_patterns_match_a_per_chunk_loop(z, size, eps):
    if z.shape[-1] < size:
        refused(chunk_patterns, z, size, eps)
        return
    patterns = chunk_patterns(z, size=size, eps=eps)
    n_chunks = z.shape[-1] // size
    assert patterns.shape == (*z.shape[:2], n_chunks)
    assert set(patterns.ravel()) <= set(PATTERN_LABELS)
    for layer, head, chunk in np.ndindex(patterns.shape):
        values = z[layer, head, chunk * size:(chunk + 1) * size].tolist()
        assert patterns[layer, head, chunk] == _chunk_pattern_by_loop(values, eps)
    fractions = pattern_fractions(patterns)
    assert np.allclose(fractions.per_head.sum(-1), 1.0)
    assert np.allclose(fractions.overall, fractions.per_head.mean(axis=(0, 1)))
    assert fractions.n_chunks == n_chunks


@FEW
@given(positions_arrays(min_tokens=2))
def test_head_summary_shares_and_moments(z):
    summary = head_summary(z)
    for share in (summary.negative_share, summary.increasing_share, summary.decreasing_share):
        assert share.shape == z.shape[:2] and ((share >= 0) & (share <= 1)).all()
    assert (summary.increasing_share + summary.decreasing_share <= 1 + 1e-12).all()
    assert (summary.std >= 0).all()
    assert np.array_equal(summary.range, range_stats(z))
    spread = 1e-9 * (1 + np.abs(z).max())
    assert ((summary.mean >= z.min(-1) - spread) & (summary.mean <= z.max(-1) + spread)).all()


@FEW
@given(positions_arrays())
def test_increments_undo_a_cumulative_sum(deltas):
    positions = np.cumsum(deltas, axis=-1)
    increments = position_increments(positions)
    assert increments.shape == positions.shape
    assert np.allclose(np.cumsum(increments, axis=-1), positions, atol=1e-9 * (1 + np.abs(positions).max()))
    assert np.isnan(position_increments(positions, origin=np.nan)[..., 0]).all()


@FEW
@given(positions_arrays(), st.data())
def test_increments_by_category_counts_and_means(increments, data):
    n_tokens = increments.shape[-1]
    categories = np.asarray(data.draw(st.lists(st.sampled_from(["lowercase", "space", "digit", "mine"]),
                                               min_size=n_tokens, max_size=n_tokens)))
    result = increments_by_category(increments, categories)
    assert set(result.labels) == set(categories)
    assert result.count.shape == (*increments.shape[:-1], len(result.labels))
    assert (result.count.sum(-1) == n_tokens).all()
    for index, label in enumerate(result.labels):
        chosen = increments[..., categories == label]
        assert np.allclose(result.mean[..., index], chosen.mean(-1))
        assert result.overall_count[index] == chosen.size


@FEW
@given(st.lists(st.integers(0, 256), min_size=1, max_size=40))
def test_byte_categories_label_every_byte(ids):
    categories = byte_categories(ids)
    assert categories.shape == (len(ids),)
    assert set(categories) <= set(BYTE_CATEGORIES)
    for byte, category in zip(ids, categories):
        if ord("a") <= byte <= ord("z"):
            assert category == "lowercase"
        if 0x80 <= byte <= 0xBF:
            assert category == "continuation"


@FEW
@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=12))
def test_subword_categories_label_every_token(tokens):
    categories = subword_categories(tokens)
    assert categories.shape == (len(tokens),) and set(categories) <= set(SUBWORD_CATEGORIES)


def _auc_by_pairs(scores: np.ndarray, labels: np.ndarray) -> float:
    positives, negatives = scores[labels], scores[~labels]
    wins = sum(float(p > n) + 0.5 * float(p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


@FEW
@given(st.integers(2, 20).flatmap(lambda n: st.tuples(
    hnp.arrays(np.float64, (2, n), elements=st.sampled_from([0.0, 0.5, 1.0, 2.0]) | st.floats(-5, 5)),
    hnp.arrays(bool, n).filter(lambda labels: 0 < labels.sum() < len(labels)))))
def test_boundary_auc_is_the_pair_count_within_0_and_1(parts):
    scores, labels = parts
    auc = boundary_auc(scores, labels)
    assert auc.shape == (2,) and ((auc >= 0) & (auc <= 1)).all()
    for head in range(2):
        assert auc[head] == pytest.approx(_auc_by_pairs(scores[head], labels))
    assert np.allclose(boundary_auc(-scores, labels), 1 - auc)


@FEW
@given(st.integers(1, 8).flatmap(lambda n: hnp.arrays(np.float64, (2, n, n), elements=st.floats(0, 10))))
def test_lookback_of_a_causal_pattern_lies_between_0_and_the_query_index(weights):
    n_tokens = weights.shape[-1]
    causal = np.tril(weights) + np.eye(n_tokens)  # every row has mass, none on later keys
    lookback = attention_lookback(causal)
    assert lookback.shape == (2, n_tokens)
    index = np.arange(n_tokens)
    assert ((lookback >= -1e-9) & (lookback <= index + 1e-9)).all()
    expected = (causal * (index[:, None] - index[None, :])).sum(-1) / causal.sum(-1)
    assert np.allclose(lookback, expected)


@FEW
@given(st.integers(1, 15).flatmap(lambda n: st.tuples(hnp.arrays(np.float64, (2, 2, n), elements=VALUES),
                                                      hnp.arrays(np.float64, (2, 2, n), elements=VALUES))))
def test_lookback_correlations_are_within_minus_1_and_1_or_nan(pair):
    increments, lookback = pair
    result = lookback_correlation(increments, lookback)
    for values in (result.pearson, result.spearman):
        assert values.shape == (2, 2)
        finite = values[~np.isnan(values)]
        assert ((finite >= -1 - 1e-9) & (finite <= 1 + 1e-9)).all()
    assert (result.n == increments.shape[-1]).all()


@FEW
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(hnp.arrays(np.float64, (n, 2), elements=VALUES),
                                                      hnp.arrays(np.float64, (n, 2), elements=VALUES))))
def test_entity_grouping_test_p_values_and_shares(pair):
    real, reversed_ = pair
    result = entity_grouping_test(real, reversed_)
    assert result.p_value.shape == (2,) and ((result.p_value >= 0) & (result.p_value <= 1)).all()
    assert np.array_equal(result.share_smaller, (real < reversed_).mean(0))
    assert result.n == real.shape[0]


@FEW
@given(positions_arrays(), st.data())
def test_select_heads_keeps_rank_and_values(z, data):
    layers = data.draw(st.lists(st.integers(0, z.shape[0] - 1), min_size=1, max_size=3))
    heads = data.draw(st.lists(st.integers(0, z.shape[1] - 1), min_size=1, max_size=3))
    chosen = select_heads(z, layers, heads)
    assert chosen.shape == (len(layers), len(heads), z.shape[-1])
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            assert np.array_equal(chosen[i, j], z[layer, head])


# ---------------------------------------------------------------- analyzers on invalid input

POSITION_ANALYZERS = {
    "range_stats": range_stats,
    "chunk_patterns": lambda z: chunk_patterns(z, size=1 + 1),
    "head_summary": head_summary,
}


@pytest.mark.parametrize("name", POSITION_ANALYZERS)
@FEW
@given(bad=broken_arrays(ndim=3, min_tokens=2))
def test_position_analyzers_refuse_bad_arrays(name, bad):
    refused(POSITION_ANALYZERS[name], bad)


@FEW
@given(bad=broken_arrays(ndim=None))
def test_position_increments_refuses_bad_arrays(bad):
    refused(position_increments, bad)


@FEW
@given(bad=broken_arrays(ndim=None, min_tokens=2))
def test_paired_analyzers_refuse_bad_arrays(bad):
    partner = np.ones(bad.shape if bad.ndim else (2,))
    refused(entity_grouping_test, bad, partner)
    if not (bad.dtype.kind == "f" and np.isnan(bad).any()):  # lookback_correlation skips NaN tokens by design
        refused(lookback_correlation, bad, partner)


@FEW
@given(st.integers(1, 10), st.integers(1, 10))
def test_mismatched_lengths_are_refused(n_a, n_b):
    n_b += n_a == n_b
    labels = np.arange(n_b) % 2 == 0
    refused(boundary_auc, np.ones((2, n_a)), labels)
    refused(increments_by_category, np.ones((2, n_a)), np.asarray(["space"] * n_b))
    refused(lookback_correlation, np.ones((2, n_a)), np.ones((2, n_b)))
    refused(entity_grouping_test, np.ones((n_a + 1, 2)), np.ones((n_b + 1, 2)))


@FEW
@given(st.one_of(
    st.lists(st.integers(-5, -1) | st.integers(257, 10_000), min_size=1, max_size=5),
    st.just([]),
    st.lists(st.floats(0.1, 255.9).filter(lambda x: x != int(x)), min_size=1, max_size=5),
    st.just([["a", "b"]]),
))
def test_byte_categories_refuse_what_are_no_byte_ids(ids):
    refused(byte_categories, ids)


@FEW
@given(st.integers(2, 12).flatmap(lambda n: hnp.arrays(np.float64, (n, n), elements=st.floats(-1, 1))
                                  .filter(lambda p: (p < 0).any() or (p.sum(-1) <= 0).any())))
def test_attention_lookback_refuses_what_are_no_probabilities(pattern):
    refused(attention_lookback, pattern)


# ---------------------------------------------------------------- plot builders

def _trace(z: np.ndarray) -> Trace:
    n_layers, _, n_tokens = z.shape
    return Trace(tokens=[chr(97 + t % 26) for t in range(n_tokens)], token_ids=np.arange(n_tokens) % 26 + 97,
                 layer_kinds=["rope"] * n_layers, positions=z.astype(np.float32))


def _layer_rows(fig, n_layers: int) -> list:
    """The trace named after each layer (one row per layer), in layer order."""
    names = [f"L{layer} rope" for layer in range(n_layers)]
    rows = [d for d in fig.data if d.name in names]
    assert [d.name for d in rows] == names
    return rows


@FIGURES
@given(positions_arrays(min_tokens=2, max_tokens=10))
def test_spaced_tokens_figure_draws_one_row_per_layer(z):
    trace = _trace(z)
    n_layers = z.shape[0]
    shared = _layer_rows(spaced_tokens_figure(trace, head=0, scale="shared"), n_layers)
    for layer, row in enumerate(shared):
        assert np.allclose(np.asarray(row.x, dtype=np.float64), trace.positions[layer, 0])
    scaled = _layer_rows(spaced_tokens_figure(trace, head=0, scale="row"), n_layers)
    assert all(0 <= x <= 1 for row in scaled for x in row.x)


@FIGURES
@given(positions_arrays(min_tokens=2), st.sampled_from(["focus", "global"]))
def test_scatter_shows_every_finite_point_once(z, view):
    fig = position_scatter_figure(_trace(z), layer=0, head="all", view=view)
    n_heads, n_tokens = z.shape[1:]
    assert sum(len(d.x) for d in fig.data) == n_heads * n_tokens
    assert len([d for d in fig.data if d.name != "clipped outliers"]) == n_heads


@FIGURES
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 4)), elements=st.floats(0, 50)))
def test_heatmaps_hold_the_values(values):
    assert np.array_equal(range_heatmap(values).data[0].z, values)
    auc = values / 50
    fig = boundary_auc_figure(auc, ["rope"] * auc.shape[0])
    assert len(fig.data) == 1 and np.array_equal(fig.data[0].z, auc) and len(fig.data[0].y) == auc.shape[0]


@FIGURES
@given(positions_arrays(min_tokens=4))
def test_pattern_figures_count_chunks(z):
    patterns = chunk_patterns(z, size=2)
    fig = pattern_fractions_figure(pattern_fractions(patterns))
    assert len(fig.data) == len(PATTERN_LABELS)
    strip = pattern_strip_figure(patterns[:, 0], 2)
    codes = np.asarray(strip.data[0].z)
    assert codes.shape == patterns[:, 0].shape
    assert np.array_equal(np.asarray(PATTERN_LABELS)[codes], patterns[:, 0])


@FIGURES
@given(st.lists(st.dictionaries(st.sampled_from(BYTE_CATEGORIES), st.floats(0, 5), min_size=1), min_size=1, max_size=4))
def test_category_and_series_figures_draw_one_trace_per_entry(layers):
    assert len(category_increments_figure(layers, categories=list(BYTE_CATEGORIES)).data) == len(layers)
    series = {f"s{index}": list(table.values()) for index, table in enumerate(layers)}
    assert len(layer_series_figure(series, "mean", "t").data) == len(series)


BAD_TABLES = st.one_of(
    st.just(np.array([["a", "b"]])),
    st.just(np.array([[None, 1.0]], dtype=object)),
    st.sampled_from([np.ones(3), np.ones((2, 2, 2)), np.zeros((0, 3)), np.float64(1.0)]),
)


@FIGURES
@given(BAD_TABLES)
def test_heatmaps_refuse_bad_tables(values):
    refused(layer_head_heatmap, values, title="t", colorbar_title="d")
    refused(range_heatmap, values)
    refused(boundary_auc_figure, values)


@FIGURES
@given(hnp.arrays(np.float64, (2, 3), elements=st.floats(1.01, 10) | st.floats(-10, -0.01)))
def test_auc_heatmap_refuses_values_outside_0_and_1(values):
    refused(boundary_auc_figure, values)


@FIGURES
@given(st.one_of(
    hnp.arrays(np.int64, (2, 3), elements=st.integers(3, 100) | st.integers(-100, -1)),
    hnp.arrays(np.float64, (2, 3), elements=st.floats(0.1, 1.9).filter(lambda x: x != 1.0)),
    st.just(np.array([["constant", "wobbly"]])),
    st.just(np.zeros((0, 3), dtype=np.int64)),
    st.just(np.zeros(3, dtype=np.int64)),
))
def test_pattern_strip_refuses_what_are_no_patterns(patterns):
    refused(pattern_strip_figure, patterns, 4)


@FIGURES
@given(st.integers(-3, 0))
def test_pattern_strip_refuses_chunk_sizes_below_1(size):
    refused(pattern_strip_figure, np.zeros((1, 2), dtype=np.int64), size)
