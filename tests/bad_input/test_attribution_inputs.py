"""Bad input to the attribution entry points (position_attribution and its ``top``, token_attribution,
interventions.attribute, position_attribution_bars), by class: every index that would have to be rounded
or coerced is one InputError naming the argument; every integer (numpy's too, negatives from the end)
gives the result the plain int gives; NaN weights warn as Lens.trace warns; gradients work under
torch.inference_mode() and torch.no_grad().
"""

from __future__ import annotations

import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.analysis.position_attribution import position_attribution, token_attribution
from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model
from repo_lens.plots import position_attribution_bars

IDS = [5, 9, 2, 7, 3, 8]  # 6 tokens
N_HEADS, N_LAYERS, LAYER = 4, 3, 2  # layers: rope, repo, repo
METRIC = interventions.logit_difference(1, 2)
CLEAN, CORRUPTED = "the cat sat", "the dog sat"


def small_lens(seed: int = 0) -> Lens:
    return Lens(tiny_model("repo", n_layers=N_LAYERS, d_model=32, n_heads=N_HEADS, seed=seed), ByteTokenizer())


@pytest.fixture(scope="module")
def lens() -> Lens:
    return small_lens()


@pytest.fixture(scope="module")
def full(lens):
    """Every head and token of the layer: what a selection must be a slice of."""
    return position_attribution(lens, IDS, LAYER)


# --- one index: every class of value that is not an integer, each refused with the argument's name ---------

NOT_INTEGERS = [
    pytest.param(1.5, id="fraction"), pytest.param(2.7, id="fraction-2.7"), pytest.param(-0.5, id="negative-fraction"),
    pytest.param(np.float64(1.5), id="numpy-float64"), pytest.param(np.float32(2.5), id="numpy-float32"),
    pytest.param(1.0, id="integral-float"), pytest.param(np.float64(2.0), id="integral-numpy-float"),
    pytest.param(True, id="bool-true"), pytest.param(False, id="bool-false"), pytest.param(np.bool_(True), id="numpy-bool"),
    pytest.param("1", id="str-digit"), pytest.param("01", id="str-digits"), pytest.param("a", id="str-letter"),
    pytest.param(b"1", id="bytes"), pytest.param(None, id="none"),
    pytest.param(float("nan"), id="nan"), pytest.param(float("inf"), id="inf"), pytest.param(-float("inf"), id="-inf"),
    pytest.param(1j, id="complex"), pytest.param(Fraction(3, 2), id="fraction-object"),
    pytest.param(Decimal("1"), id="decimal"), pytest.param(object(), id="object"),
]
OUT_OF_RANGE = [pytest.param(64, id="beyond-every-axis"), pytest.param(-65, id="before-every-axis"),
                pytest.param(10**30, id="huge"), pytest.param(np.int64(2**62), id="huge-numpy")]
# for an argument that takes one index: a sequence is refused too, not unpacked
SEQUENCES_FOR_ONE = [pytest.param([1], id="list"), pytest.param((1,), id="tuple"),
                     pytest.param(np.array([1]), id="array-1d"), pytest.param(torch.tensor([1]), id="tensor-1d"),
                     pytest.param(torch.tensor([[1]]), id="tensor-2d"), pytest.param(torch.tensor(True), id="bool-tensor")]

# --- a selection (heads=, tokens=, layers=): a whole value that is no selection ------------------------------

NOT_SELECTIONS = [
    pytest.param("01", id="str"), pytest.param("0", id="str-one"), pytest.param(b"01", id="bytes"),
    pytest.param({0: 1}, id="dict"), pytest.param(np.zeros((2, 2), int), id="array-2d"),
    pytest.param(np.array([[1]]), id="array-1x1"), pytest.param(np.array([True, False, True, False]), id="bool-mask"),
    pytest.param(torch.tensor([[0, 1]]), id="tensor-2d"), pytest.param([[0, 1]], id="nested-list"),
    pytest.param([], id="empty-list"), pytest.param((), id="empty-tuple"), pytest.param(range(0), id="empty-range"),
    pytest.param(np.array([], dtype=np.int64), id="empty-array"),
    pytest.param(np.array([1.0, 2.0]), id="float-array"), pytest.param(torch.tensor([1.5]), id="float-tensor"),
    pytest.param(1.5, id="bare-float"), pytest.param(True, id="bare-bool"),
]
# good selections of heads (of 4) and what they select
GOOD_HEADS = [
    pytest.param(1, [1], id="bare-int"), pytest.param(np.int64(1), [1], id="bare-numpy-int"),
    pytest.param(np.array(2), [2], id="0-d-array"), pytest.param([np.int64(1)], [1], id="numpy-int-in-list"),
    pytest.param([np.int32(3), np.uint8(0)], [3, 0], id="numpy-ints-keep-order"), pytest.param((1,), [1], id="tuple"),
    pytest.param(range(1, 3), [1, 2], id="range"), pytest.param(np.array([1, 2]), [1, 2], id="array"),
    pytest.param(torch.tensor([2, 3]), [2, 3], id="tensor"), pytest.param([-1], [3], id="negative-from-end"),
    pytest.param(-4, [0], id="bare-negative"),
]


def _named(caught: pytest.ExceptionInfo, *names: str) -> None:
    message = str(caught.value)
    assert any(name in message for name in names), message


# --- position_attribution ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", NOT_INTEGERS + OUT_OF_RANGE)
@pytest.mark.parametrize("argument", ["heads", "tokens"])
def test_position_attribution_refuses_a_bad_index_in_a_selection(lens, argument, value):
    with pytest.raises(InputError) as caught:
        position_attribution(lens, IDS, LAYER, **{argument: [0, value]})
    _named(caught, argument[:-1])


@pytest.mark.parametrize("value", NOT_SELECTIONS)
@pytest.mark.parametrize("argument", ["heads", "tokens"])
def test_position_attribution_refuses_what_is_no_selection(lens, argument, value):
    with pytest.raises(InputError) as caught:
        position_attribution(lens, IDS, LAYER, **{argument: value})
    _named(caught, argument[:-1])


@pytest.mark.parametrize("value", NOT_INTEGERS + OUT_OF_RANGE + SEQUENCES_FOR_ONE
                         + [pytest.param(0, id="rope-layer"), pytest.param(-3, id="rope-layer-from-end")])
def test_position_attribution_refuses_a_bad_layer(lens, value):
    with pytest.raises(InputError) as caught:
        position_attribution(lens, IDS, value)
    _named(caught, "layer")


@pytest.mark.parametrize("options,message", [
    (dict(heads=[4]), "head 4 does not exist; this model has heads 0..3"),
    (dict(heads=-5), "head -5 does not exist"),
    (dict(tokens=[6]), "token 6 does not exist; this input has tokens 0..5"),
    (dict(tokens=[-7]), "token -7 does not exist"),
], ids=["head-one-past", "head-before-first", "token-one-past", "token-before-first"])
def test_position_attribution_names_the_valid_range(lens, options, message):
    with pytest.raises(InputError, match=message):
        position_attribution(lens, IDS, LAYER, **options)


@pytest.mark.parametrize("heads,expected", GOOD_HEADS)
def test_position_attribution_takes_every_integer_selection_of_heads(lens, full, heads, expected):
    found = position_attribution(lens, IDS, LAYER, heads=heads)
    assert found.heads == expected and all(type(head) is int for head in found.heads)
    np.testing.assert_array_equal(found.values, full.values[expected])
    np.testing.assert_array_equal(found.positions, full.positions[expected])


@pytest.mark.parametrize("tokens,expected", [
    pytest.param(np.int64(2), [2], id="bare-numpy-int"), pytest.param([-1, 0], [5, 0], id="negatives"),
    pytest.param(np.arange(3, 6), [3, 4, 5], id="array"), pytest.param(torch.tensor([1]), [1], id="tensor"),
])
def test_position_attribution_takes_every_integer_selection_of_tokens(lens, full, tokens, expected):
    found = position_attribution(lens, IDS, LAYER, tokens=tokens)
    assert found.tokens == expected
    np.testing.assert_array_equal(found.values, full.values[:, expected])


@pytest.mark.parametrize("layer", [np.int64(2), np.int32(2), np.uint8(2), np.array(2), -1, np.int64(-1)],
                         ids=["int64", "int32", "uint8", "0-d-array", "from-end", "numpy-from-end"])
def test_position_attribution_takes_numpy_and_negative_layers(lens, full, layer):
    found = position_attribution(lens, IDS, layer)
    assert found.layer == LAYER and type(found.layer) is int
    np.testing.assert_array_equal(found.values, full.values)


# --- PositionAttribution.top -------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [-1, -5, 1.5, 2.0, True, False, "3", None, float("nan"), [3], np.float64(2.0)],
                         ids=["negative", "negative-5", "fraction", "integral-float", "true", "false", "str", "none",
                              "nan", "list", "numpy-float"])
def test_top_refuses_a_bad_k(full, k):
    with pytest.raises(InputError) as caught:
        full.top(0, 0, k=k)
    _named(caught, "k ")


def _top_by_hand(full, head: int, token: int, k: int) -> list[tuple[str, float]]:
    row = full.values[head, token]
    order = sorted(range(len(row)), key=lambda index: -abs(row[index]))  # stable, as ties keep label order
    return [(full.labels[index], float(row[index])) for index in order[:k]]


@pytest.mark.parametrize("k,count", [(0, 0), (1, 1), (np.int64(3), 3), (np.uint8(2), 2), (10**6, None)],
                         ids=["zero", "one", "numpy", "uint8", "more-than-there-are"])
def test_top_takes_every_count_from_zero(full, k, count):
    found = full.top(1, 4, k=k)
    expected = _top_by_hand(full, 1, 4, len(full.labels) if count is None else count)
    assert found == expected


@pytest.mark.parametrize("head,token", [(1.0, 0), (True, 0), ("1", 0), (None, 0), ([1], 0), (0, 2.0), (0, np.float64(1)),
                                        (0, False), (2, 0), (0, 4)],
                         ids=["head-float", "head-bool", "head-str", "head-none", "head-list", "token-float",
                              "token-numpy-float", "token-bool", "head-not-attributed", "token-not-attributed"])
def test_top_refuses_a_head_or_token_not_attributed(lens, head, token):
    some = position_attribution(lens, IDS, LAYER, heads=[0, 3], tokens=[0, 5])
    with pytest.raises(InputError) as caught:
        some.top(head, token)
    _named(caught, "head", "token")


def test_top_takes_numpy_heads_and_tokens(full):
    assert full.top(np.int64(3), np.int32(5), k=2) == _top_by_hand(full, 3, 5, 2)


# --- token_attribution --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_token_attribution(lens):
    return token_attribution(lens, IDS, LAYER, 1, 4)


@pytest.mark.parametrize("value", NOT_INTEGERS + OUT_OF_RANGE + SEQUENCES_FOR_ONE)
@pytest.mark.parametrize("argument", ["head", "token", "layer"])
def test_token_attribution_refuses_a_bad_index(lens, argument, value):
    chosen = {"layer": LAYER, "head": 1, "token": 4, argument: value}
    with pytest.raises(InputError) as caught:
        token_attribution(lens, IDS, **chosen)
    _named(caught, argument)


@pytest.mark.parametrize("chosen", [dict(layer=np.int64(2), head=np.int64(1), token=np.int64(4)),
                                    dict(layer=-1, head=-3, token=-2), dict(layer=np.array(2), head=np.uint8(1), token=4)],
                         ids=["numpy", "negatives", "mixed"])
def test_token_attribution_takes_numpy_and_negative_indices(lens, plain_token_attribution, chosen):
    found = token_attribution(lens, IDS, **chosen)
    assert (found.layer, found.head, found.token) == (2, 1, 4)
    np.testing.assert_array_equal(found.gradient, plain_token_attribution.gradient)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad, lambda: torch.set_grad_enabled(False)],
                         ids=["inference-mode", "no-grad", "grad-disabled"])
def test_token_attribution_works_with_autograd_off(lens, plain_token_attribution, mode):
    with mode():
        found = token_attribution(lens, IDS, LAYER, 1, 4)
    np.testing.assert_array_equal(found.gradient, plain_token_attribution.gradient)
    np.testing.assert_array_equal(found.values, plain_token_attribution.values)


def test_attribution_works_on_a_model_first_run_in_inference_mode():
    """A model whose first forward ran under inference mode (caches built there) still gives gradients."""
    fresh, reference = small_lens(seed=4), small_lens(seed=4)
    with torch.inference_mode():
        fresh.trace(IDS, progress=False)
        found = token_attribution(fresh, IDS, LAYER, 2, 5)
        linear = position_attribution(fresh, IDS, LAYER, method="gradient")
        grid = interventions.attribute(fresh, CLEAN, CORRUPTED, METRIC)
    np.testing.assert_array_equal(found.gradient, token_attribution(reference, IDS, LAYER, 2, 5).gradient)
    expected = position_attribution(reference, IDS, LAYER, method="gradient").values
    np.testing.assert_allclose(linear.values, expected, rtol=1e-5, atol=1e-6)  # inference mode's kernels round apart
    np.testing.assert_array_equal(grid.values, interventions.attribute(reference, CLEAN, CORRUPTED, METRIC).values)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inference-mode", "no-grad"])
def test_gradient_position_attribution_works_with_autograd_off(lens, mode):
    expected = position_attribution(lens, IDS, LAYER, method="gradient")
    with mode():
        found = position_attribution(lens, IDS, LAYER, method="gradient")
    np.testing.assert_allclose(found.values, expected.values, rtol=1e-5, atol=1e-6)


# --- NaN or infinite weights: the warning Lens.trace gives --------------------------------------------------

@pytest.mark.parametrize("parameter", ["embed.weight", "blocks.0.mlp.down_proj.weight",
                                       "blocks.2.attn.mechanism.final_map.weight"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_weights_warn_as_the_trace_warns(parameter, bad):
    broken = small_lens(seed=1)
    with torch.no_grad():
        dict(broken.model.named_parameters())[parameter].fill_(bad)
    with pytest.warns(UserWarning, match="positions are NaN or infinite") as traced:
        trace = broken.trace(IDS, progress=False)
    bad_positions = ~np.isfinite(trace.positions[LAYER])  # [head, token]: the independent expectation
    assert bad_positions.any() and any("NaN or infinite" in str(one.message) for one in traced)
    pairs = [[LAYER, int(head)] for head in np.flatnonzero(bad_positions.any(axis=1))]
    expected = f"{int(bad_positions.sum())} positions are NaN or infinite, in (layer, head) {pairs}"
    with pytest.warns(UserWarning) as caught:
        position_attribution(broken, IDS, LAYER)
    found = [one for one in caught if str(one.message).startswith(expected)]
    assert len(found) == 1, [str(one.message) for one in caught]
    assert found[0].filename == __file__  # pointed at the caller, as the trace's warning is
    head, token = (int(i) for i in np.argwhere(bad_positions)[0])
    with pytest.warns(UserWarning, match=rf"1 positions are NaN or infinite, in \(layer, head\) \[\[{LAYER}, {head}\]\]"):
        token_attribution(broken, IDS, LAYER, head, token)


def test_finite_weights_give_no_warning(lens):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        position_attribution(lens, IDS, LAYER, heads=[0])
        token_attribution(lens, IDS, LAYER, 0, 3)


# --- interventions.attribute --------------------------------------------------------------------------------

def _selection(argument: str, value) -> dict:
    """``heads=`` or ``layers=`` as keywords; ``tokens`` in the grid's options."""
    return {"options": interventions.GridOptions(tokens=value)} if argument == "tokens" else {argument: value}


@pytest.mark.parametrize("value", NOT_INTEGERS + OUT_OF_RANGE)
@pytest.mark.parametrize("argument", ["heads", "layers", "tokens"])
def test_attribute_refuses_a_bad_index_in_a_selection(lens, argument, value):
    with pytest.raises(InputError) as caught:
        interventions.attribute(lens, CLEAN, CORRUPTED, METRIC, **_selection(argument, [1, value]))
    _named(caught, argument[:-1])


@pytest.mark.parametrize("value", NOT_SELECTIONS)
@pytest.mark.parametrize("argument", ["heads", "layers", "tokens"])
def test_attribute_refuses_what_is_no_selection(lens, argument, value):
    with pytest.raises(InputError) as caught:
        interventions.attribute(lens, CLEAN, CORRUPTED, METRIC, **_selection(argument, value))
    _named(caught, argument[:-1], "span")


@pytest.fixture(scope="module")
def per_token(lens):
    return interventions.attribute(lens, CLEAN, CORRUPTED, METRIC, grid="layer_head_position")


@pytest.mark.parametrize("heads,layers,tokens", [
    (np.int64(1), None, None), ([np.int64(1), np.int32(3)], None, None), (-1, np.int64(2), None),
    (None, np.array([1, 2]), torch.tensor([4, 5])), (None, None, np.int64(4)), (None, None, [-1, 4]),
    (torch.tensor([0, 2]), range(1, 3), range(4, 7)),
], ids=["numpy-head", "numpy-heads", "negative-head-numpy-layer", "array-layers-tensor-tokens", "bare-numpy-token",
        "negative-token", "tensor-heads-ranges"])
def test_attribute_takes_integer_selections(lens, per_token, heads, layers, tokens):
    """Every selection is the sum of the per-token estimates of its cells (computed once, for every cell)."""
    found = interventions.attribute(lens, CLEAN, CORRUPTED, METRIC, heads=heads, layers=layers,
                                    options=interventions.GridOptions(tokens=tokens))
    chosen_heads = sorted({h % N_HEADS for h in np.atleast_1d(np.asarray(heads if heads is not None else range(4)))})
    chosen_layers = sorted({int(l) for l in np.atleast_1d(np.asarray(layers if layers is not None else [1, 2]))})
    width = per_token.values.shape[-1]
    chosen_tokens = sorted({t % width for t in np.atleast_1d(np.asarray(tokens if tokens is not None else range(width)))})
    assert found.heads == chosen_heads and found.layers == chosen_layers
    effect = per_token.values - per_token.baseline
    for layer in chosen_layers:
        expected = found.baseline + effect[layer][np.ix_(chosen_heads, chosen_tokens)].sum(-1)
        np.testing.assert_allclose(found.values[layer, chosen_heads], expected, atol=1e-4)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inference-mode", "no-grad"])
def test_attribute_works_with_autograd_off(lens, mode):
    expected = interventions.attribute(lens, CLEAN, CORRUPTED, METRIC)
    with mode():
        found = interventions.attribute(lens, CLEAN, CORRUPTED, METRIC)
    np.testing.assert_array_equal(found.values, expected.values)


# --- position_attribution_bars: the same head and token checks ----------------------------------------------

@pytest.mark.parametrize("options", [dict(head=1.0), dict(head=True), dict(token=4.0), dict(token=np.float64(4)),
                                     dict(token=False), dict(top=0), dict(top=-1), dict(top=2.5), dict(top=True)],
                         ids=["head-float", "head-bool", "token-float", "token-numpy-float", "token-bool", "top-zero",
                              "top-negative", "top-fraction", "top-bool"])
def test_attribution_bars_refuse_what_would_be_coerced(full, options):
    chosen = {"head": 1, "token": 4, **options}
    with pytest.raises(InputError) as caught:
        position_attribution_bars(full, **chosen)
    _named(caught, *options)


def test_attribution_bars_take_numpy_integers(full):
    fig = position_attribution_bars(full, head=np.int64(1), token=np.int32(4), top=np.int64(3))
    assert list(fig.data[0].y)[::-1] == [label for label, _ in _top_by_hand(full, 1, 4, 3)]
