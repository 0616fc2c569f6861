"""attention_mass: agreement with the full attention pattern, closed forms, invariants, bad input, memory."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from repo_lens.analysis.attention_mass import AttentionMass, _RowReducer, attention_mass
from repo_lens.analysis.mass_rows import key_groups
from repo_lens.errors import InputError
from repo_lens.model import LensModel, ModelConfig

# the module itself (repo_lens.analysis re-exports the function under the same name)
MASS = importlib.import_module("repo_lens.analysis.attention_mass")


def make_model(family: str = "olmo2", kinds=("rope", "nope", "repo"), n_kv_heads=None, seed: int = 0,
               d_model: int = 64, n_heads: int = 4, max_len: int = 2048) -> LensModel:
    torch.manual_seed(seed)
    cfg = ModelConfig(family=family, vocab_size=257, d_model=d_model, n_layers=len(kinds), n_heads=n_heads,
                      d_mlp=2 * d_model, layer_mechanisms=list(kinds), n_kv_heads=n_kv_heads,
                      max_position_embeddings=max_len)
    model = LensModel(cfg).eval()
    with torch.no_grad():  # spread the RePo positions so that they matter
        for block in model.blocks:
            if block.attn.kind == "repo":
                block.attn.mechanism.final_map.weight.mul_(30.0)
            if block.attn.kind == "cope":  # e[p] start at zero: make the positions matter
                block.attn.mechanism.position_embeddings.normal_(std=1.0)
            if block.attn.kind == "fox":
                block.attn.mechanism.forget_gate.weight.mul_(10.0)
    return model


def full_patterns(model: LensModel, ids: np.ndarray) -> np.ndarray:
    """[L, H, T, T] float64 attention patterns through hook_pattern (the reference)."""
    patterns = {}

    def keep(layer):
        def hook(pattern, hook):
            patterns[layer] = pattern[0].detach().double().clone()

        return hook

    hooks = [(f"blocks.{layer}.attn.hook_pattern", keep(layer)) for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        model.run_with_hooks(torch.as_tensor(ids)[None], fwd_hooks=hooks)
    return torch.stack([patterns[layer] for layer in range(model.cfg.n_layers)]).numpy()


def reference_mass(patterns: np.ndarray, spans: dict, query: tuple[int, int]) -> dict[str, np.ndarray]:
    """The definition, written out independently: per row, sum over the span's keys / length."""
    q0, q1 = query
    rows = patterns[:, :, q0:q1, :]  # [L, H, R, T]
    out = {}
    named = np.zeros(patterns.shape[-1], dtype=bool)
    for name, (a, b) in spans.items():
        out[name] = rows[..., a:b].sum(-1).mean(-1) / (b - a)
        named[a:b] = True
    rest = [key for key in range(q0) if not named[key]]
    out["rest"] = rows[..., rest].sum(-1).mean(-1) / len(rest)
    out["self"] = rows[..., q0:q1].sum(-1).mean(-1)
    return out


def random_ids(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 257, size=n)


CASES = [
    pytest.param("olmo2", ("rope", "nope", "repo"), None, id="olmo2-rope-nope-repo"),
    pytest.param("llama", ("repo", "rope"), 2, id="llama-gqa"),
    pytest.param("llama", ("nope", "repo", "repo"), 1, id="llama-mqa"),
    pytest.param("olmo2", ("lpi", "fox", "cope"), None, id="olmo2-lpi-fox-cope"),
    pytest.param("llama", ("grape-ap", "lpi-layer", "grape-m"), 2, id="llama-grape-ap-lpi-layer-grape-m"),
]


@pytest.mark.parametrize("family,kinds,n_kv_heads", CASES)
def test_matches_full_attention(family, kinds, n_kv_heads):
    model = make_model(family, kinds, n_kv_heads)
    ids = random_ids(90)
    spans = {"needle": (20, 27), "early": (0, 3), "query": (70, 84)}
    query = (84, 90)
    mass = attention_mass(model, ids, spans, query)
    reference = reference_mass(full_patterns(model, ids), spans, query)
    for name in ["needle", "early", "query", "rest"]:
        np.testing.assert_allclose(mass.by_layer_head[name], reference[name], atol=1e-5, rtol=0)
        assert mass.per_token[name] == pytest.approx(reference[name].mean(), abs=1e-5)
    np.testing.assert_allclose(mass.self_mass, reference["self"], atol=1e-5, rtol=0)
    assert mass.span_lengths == {"needle": 7, "early": 3, "query": 14, "rest": 84 - 24}
    assert mass.layer_kinds == list(kinds)


@pytest.mark.parametrize("family,kinds,n_kv_heads", CASES)
def test_masses_do_not_depend_on_the_order_hooks_fire_in(family, kinds, n_kv_heads):
    """The hooks of one pass, handed a real forward's tensors in reverse order (each layer's keys before
    its queries and bias inputs, the last layer first) or shuffled, give the numbers of attention_mass."""
    model = make_model(family, kinds, n_kv_heads)
    ids = random_ids(90)
    prompt = (ids, {"needle": (20, 27), "query": (70, 84)}, (84, 90))
    expected = attention_mass(model, *prompt)
    row_biases = MASS._row_biases(model, None)
    names = [name for name, _ in MASS._MassPass(model, [prompt], row_biases).hooks()]
    assert {f"blocks.{layer}.attn.hook_rot_{x}" for layer in range(len(kinds)) for x in "qk"} <= set(names)
    _, cache = model.run_with_cache(torch.as_tensor(ids)[None], names_filter=names)
    shuffled = list(np.random.default_rng(0).permutation(len(names)))
    for order in (list(range(len(names)))[::-1], shuffled):
        one_pass = MASS._MassPass(model, [prompt], row_biases)
        hooks = one_pass.hooks()
        with torch.inference_mode():  # as in the forward pass
            for step, index in enumerate(order):
                name, hook = hooks[index]
                if step < len(order) - 1:
                    hook(cache[name], hook=None)
                else:  # the pass stops at the last tensor any layer needs, not at the last layer's keys
                    with pytest.raises(MASS._StopForward):
                        hook(cache[name], hook=None)
        [mass] = one_pass.masses(list(kinds))
        for name in expected.per_token:
            np.testing.assert_allclose(mass.by_layer_head[name], expected.by_layer_head[name], atol=1e-6, rtol=0)
        np.testing.assert_allclose(mass.self_mass, expected.self_mass, atol=1e-6, rtol=0)


def test_lens_like_object_tensor_ids_and_layer_subset():
    model = make_model()
    ids = random_ids(50)

    class FakeLens:
        pass

    lens = FakeLens()
    lens.model = model
    spans = {"a": (5, 10)}
    full = attention_mass(model, ids, spans, (45, 50))
    some = attention_mass(lens, torch.as_tensor(ids)[None], spans, (45, 50), layers=[2, 0])
    assert some.layers == [0, 2] and some.layer_kinds == ["rope", "repo"]
    np.testing.assert_allclose(some.by_layer_head["a"], full.by_layer_head["a"][[0, 2]], atol=1e-6)


def test_uniform_attention_closed_form():
    """q = 0 makes every row attend uniformly to its causal prefix: row r puts 1/(r+1) on each key."""
    model = make_model("olmo2", ("rope",))
    zero_q = [("blocks.0.attn.hook_q", lambda q, hook: torch.zeros_like(q))]
    ids = random_ids(30)
    spans = {"first": (0, 4), "mid": (10, 12)}
    query = (25, 28)
    with model.hooks(fwd_hooks=zero_q):
        mass = attention_mass(model, ids, spans, query)
    rows = np.arange(25, 28)
    expected_per_key = np.mean(1.0 / (rows + 1))  # identical for every key before the query
    for name in ["first", "mid", "rest"]:
        np.testing.assert_allclose(mass.by_layer_head[name], expected_per_key, atol=1e-6)
    expected_self = np.mean((rows - 25 + 1) / (rows + 1))
    np.testing.assert_allclose(mass.self_mass, expected_self, atol=1e-6)
    assert mass.span_lengths["rest"] == 25 - 6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masses_sum_to_one_per_row(seed):
    model = make_model(seed=seed)
    rng = np.random.default_rng(seed)
    n = 120
    ids = rng.integers(0, 257, size=n)
    q0 = int(rng.integers(60, 110))
    q1 = int(rng.integers(q0 + 1, n + 1))
    cuts = np.sort(rng.choice(np.arange(1, q0), size=6, replace=False))
    spans = {f"s{i}": (int(cuts[2 * i]), int(cuts[2 * i + 1])) for i in range(3)}
    if q1 < n:
        spans["after"] = (q1, n)  # after the query rows: never attended
    mass = attention_mass(model, ids, spans, (q0, q1))
    total = sum(mass.by_layer_head[name] * mass.span_lengths[name] for name in mass.per_token)
    np.testing.assert_allclose(total + mass.self_mass, 1.0, atol=1e-5)
    if "after" in spans:
        assert mass.per_token["after"] == 0.0


def test_rest_empty_is_nan_and_query_at_start():
    model = make_model()
    ids = random_ids(12)
    mass = attention_mass(model, ids, {"all": (0, 6)}, (6, 12))
    assert np.isnan(mass.per_token["rest"]) and mass.span_lengths["rest"] == 0
    first = attention_mass(model, ids, {}, (0, 3))
    np.testing.assert_allclose(first.self_mass, 1.0, atol=1e-6)


def test_hooks_are_removed_and_logits_unchanged():
    model = make_model()
    ids = torch.as_tensor(random_ids(40))[None]
    with torch.no_grad():
        before = model(ids)
    attention_mass(model, ids, {"a": (0, 5)}, (30, 40))
    with torch.no_grad():
        after = model(ids)
    assert torch.equal(before, after)
    assert not any(hook_point.fwd_hooks for hook_point in model.hook_dict.values())


def test_bfloat16_model_runs_softmax_in_fp32():
    model = make_model()
    ids = random_ids(64)
    spans = {"a": (10, 20)}
    reference = attention_mass(model, ids, spans, (60, 64))
    mass = attention_mass(model.to(torch.bfloat16), ids, spans, (60, 64))
    total = sum(mass.by_layer_head[name] * mass.span_lengths[name] for name in mass.per_token)
    np.testing.assert_allclose(total + mass.self_mass, 1.0, atol=1e-5)  # fp32 softmax: rows still sum to 1
    assert abs(mass.per_token["a"] - reference.per_token["a"]) < 0.02


BAD = [
    ({"a": (0, 200)}, (90, 95), r"span 'a' = \(0, 200\) must be non-empty and within \[0, 100\)"),
    ({"a": (-1, 3)}, (90, 95), r"span 'a' = \(-1, 3\) must be non-empty"),
    ({"a": (5, 5)}, (90, 95), r"span 'a' = \(5, 5\) must be non-empty"),
    ({"a": (0, 10), "b": (5, 15)}, (90, 95), r"spans 'a' = \(0, 10\) and 'b' = \(5, 15\) overlap"),
    ({"a": (85, 92)}, (90, 95), r"span 'a' = \(85, 92\) overlaps the query rows \(90, 95\)"),
    ({"rest": (0, 5)}, (90, 95), r"span name 'rest' is reserved"),
    ({"a": (0, 5)}, (50, 50), r"query rows \(50, 50\) must be non-empty"),
    ({"a": (0, 5)}, (90, 101), r"query rows \(90, 101\) must be non-empty and within \[0, 100\)"),
    ({"a": (0, 5)}, 7, r"query must be a pair of integers"),
    ({"a": (0.5, 3)}, (90, 95), r"span 'a' must be a pair of integers"),
    ({"": (0, 3)}, (90, 95), r"span names must be non-empty strings"),
]


@pytest.mark.parametrize("spans,query,message", BAD)
def test_bad_spans_and_query(spans, query, message):
    model = make_model()
    with pytest.raises(InputError, match=message):
        attention_mass(model, random_ids(100), spans, query)


def test_bad_ids_layers_and_length():
    model = make_model(max_len=64)
    with pytest.raises(InputError, match="non-empty 1-D"):
        attention_mass(model, [], {}, (0, 1))
    with pytest.raises(InputError, match="non-empty 1-D"):
        attention_mass(model, np.zeros((2, 5), dtype=int), {}, (0, 1))
    with pytest.raises(InputError, match=r"must lie in 0..256"):
        attention_mass(model, [1, 2, 300], {}, (2, 3))
    with pytest.raises(InputError, match="token ids, not text"):
        attention_mass(model, "hello", {}, (2, 3))
    with pytest.raises(InputError, match=r"layer 7 does not exist; this model has layers 0..2"):
        attention_mass(model, random_ids(10), {}, (5, 10), layers=[7])
    with pytest.raises(InputError, match="longer than the model's context of 64"):
        attention_mass(model, random_ids(80), {}, (70, 80))
    mass = attention_mass(model, random_ids(80), {}, (70, 80), allow_beyond_context=True)
    assert isinstance(mass, AttentionMass)
    with pytest.raises(InputError, match="needs a Lens"):
        attention_mass(object(), [1, 2], {}, (1, 2))


def test_never_materialises_t_by_t(monkeypatch):
    """At T=2048, no tensor created during attention_mass has T*T or more elements (a T×T
    pattern, or anything of that size, would be caught), and the score chunks are [head, rows, keys]."""
    T = 2048
    model = make_model(d_model=32, n_heads=2, kinds=("rope", "repo"), max_len=T)
    ids = random_ids(T)
    largest = []
    score_shapes = []
    original_matmul, original_softmax = torch.matmul, torch.softmax

    def watch(result):
        if isinstance(result, torch.Tensor):
            largest.append(result.numel())
        return result

    def matmul(a, b, *args, **kwargs):
        out = original_matmul(a, b, *args, **kwargs)
        score_shapes.append(tuple(out.shape))
        return watch(out)

    monkeypatch.setattr(torch, "matmul", matmul)
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: watch(original_softmax(*a, **k)))

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return watch(func(*args, **(kwargs or {})))

    with Spy():
        mass = attention_mass(model, ids, {"needle": (100, 110)}, (T - 16, T))
    assert mass.per_token["needle"] > 0
    assert score_shapes and all(shape == (2, 16, T) for shape in score_shapes)
    assert max(largest) < T * T // 8, f"a tensor of {max(largest)} elements was created (T*T = {T * T})"


def test_row_chunks_bound_memory(monkeypatch):
    """Many query rows are processed in chunks of at most the element budget."""
    # the module itself, even if repo_lens.analysis re-exports the function under the same name
    module = importlib.import_module("repo_lens.analysis.attention_mass")

    monkeypatch.setattr(module, "_ELEMENT_BUDGET", 4 * 64 * 10)
    model = make_model()
    ids = random_ids(200)
    spans = {"a": (3, 30)}
    chunked = attention_mass(model, ids, spans, (130, 200))
    monkeypatch.setattr(module, "_ELEMENT_BUDGET", 1 << 21)
    whole = attention_mass(model, ids, spans, (130, 200))
    for name in whole.per_token:
        np.testing.assert_allclose(chunked.by_layer_head[name], whole.by_layer_head[name], atol=1e-6)


def test_row_reducer_shapes():
    reducer = _RowReducer(key_groups({"a": (0, 2)}, (3, 5)), d_head=4)  # keys: a, a, rest, own, own
    assert reducer.groups.index.tolist() == [0, 0, 1, 2, 2]
    out = reducer(torch.zeros(3, 2, 4), torch.zeros(3, 7, 4))
    assert out.shape == (3, 2, 3)
    np.testing.assert_allclose(out[0].numpy(), [[2 / 4, 1 / 4, 1 / 4], [2 / 5, 1 / 5, 2 / 5]], atol=1e-6)
