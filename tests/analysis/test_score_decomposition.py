"""score_decomposition against brute force written here, on every registered mechanism: the parts from the
model's own hooks (hook_q / hook_k through the layer's qk-norm and its encoding at position 0, hook_pos and
the band angles for rotary layers; hook_rot_q / hook_rot_k and the mechanism's own formula for the bias of
the others), the actual pattern against hook_pattern, and the integer and constant reference patterns
against the pattern of a forward in which interventions.ablate edited the layer's positions.

The models run in float64: where the score is computed from the hooks in float64 the parts agree to 1e-10;
where the model itself rounds to float32 (its rotation, its attention pattern, the CoPE embeddings' logits)
to 1e-6."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import repo_lens
from repo_lens import InputError, interventions
from repo_lens.analysis import ScoreDecomposition, score_decomposition
from repo_lens.model.alibi import alibi_slopes
from repo_lens.model.registry import mechanism_kinds, mechanism_traits
from repo_lens.model.attention import apply_rotary, rotary_cos_sin
from repo_lens.model.tiny import tiny_model

IDS = [5, 9, 2, 33, 4, 4, 80, 1, 7, 19, 26, 3]
ROWS = [3, 7, 11]
LAYER = 1
EXACT = dict(rtol=0.0, atol=1e-10)
FLOAT32 = dict(rtol=1e-6, atol=1e-6)


def _perturbed(model, seed: int = 1):
    """The position module's weights moved off their initialisation (CoPE's and the relative embeddings start at 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.blocks[LAYER].attn.mechanism.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return model


def _hooks(model, ids=IDS):
    _, cache = model.run_with_cache(torch.tensor([ids]))
    hooks = {name.removeprefix(f"blocks.{LAYER}.attn."): value[0].detach().double()
             for name, value in cache.items() if name.startswith(f"blocks.{LAYER}.attn.")}
    if hasattr(model.blocks[LAYER], "ln1"):  # the attention input of a pre-norm block: ln1's weight × normalised
        hooks["layer_input"] = model.blocks[LAYER].ln1.weight.detach().double() * cache[
            f"blocks.{LAYER}.ln1.hook_normalized"][0].detach().double()
    return hooks


@pytest.fixture(scope="module", params=mechanism_kinds())
def case(request):
    kind = request.param
    model = _perturbed(tiny_model(kind, n_layers=2, d_model=32, n_heads=4, seed=3).double())
    lens = repo_lens.Lens(model, None)
    return SimpleNamespace(kind=kind, model=model, lens=lens, hooks=_hooks(model),
                           found=score_decomposition(lens, IDS, LAYER, queries=ROWS))


# ------------------------------------------------------------------------------------------- brute force


def per_query_head(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[T, kv_head, d] -> [head, T, d]."""
    return x.repeat_interleave(n_heads // x.shape[1], dim=1).transpose(0, 1)


def rotated_qk(hooks, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    return per_query_head(hooks["hook_rot_q"], n_heads), per_query_head(hooks["hook_rot_k"], n_heads)


def masked(values: torch.Tensor) -> np.ndarray:
    """The query rows ROWS of [head, T, T] as numpy, NaN after each query."""
    rows = values[:, ROWS].numpy().copy()
    rows[:, np.arange(len(IDS))[None, :] > np.array(ROWS)[:, None]] = np.nan
    return rows


@torch.no_grad()
def rotary_brute_force(model, hooks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """content, position, bands [head, row, key, band] of a rotary layer from hook_q / hook_k (through the layer's
    qk-norm and its own encoding at position 0) and hook_pos, with an explicit 2 × 2 rotation per band:
    s_ij = Σ_b u_i^(b)ᵀ R(θ_b (p_j − p_i)) w_j^(b) / √d, R(φ) = [[cos φ, −sin φ], [sin φ, cos φ]]."""
    attn = model.blocks[LAYER].attn
    n_heads, d_head, n_tokens = attn.n_heads, attn.d_head, len(IDS)
    q, k = hooks["hook_q"], hooks["hook_k"]
    if attn.qk_norm:
        q = attn.q_norm(q.reshape(n_tokens, -1)).view(n_tokens, -1, d_head)
        k = attn.k_norm(k.reshape(n_tokens, -1)).view(n_tokens, -1, d_head)
    encode = getattr(attn.mechanism, "encode", apply_rotary)
    cos0, sin0 = rotary_cos_sin(torch.zeros(1, 1, n_tokens), attn.inv_freq, attn.attention_scaling)
    u = encode(q.transpose(0, 1)[None], cos0, sin0)[0].double()  # what q·k would use at position 0
    w = encode(per_query_head(k, n_heads)[None], cos0, sin0)[0].double()
    theta = attn.rope.inv_freq_at(n_tokens, attn.inv_freq).double()
    positions = hooks["hook_pos"]  # [head, T]
    phi = theta[None, None, None, :] * (positions[:, None, :, None] - positions[:, :, None, None])  # p_j − p_i
    half = d_head // 2
    u1, u2, w1, w2 = u[..., :half], u[..., half:], w[..., :half], w[..., half:]
    dot = u1[:, :, None] * w1[:, None] + u2[:, :, None] * w2[:, None]  # [head, i, j, band]
    cross = u2[:, :, None] * w1[:, None] - u1[:, :, None] * w2[:, None]
    bands = (phi.cos() * dot + phi.sin() * cross) / math.sqrt(d_head)
    content = dot.sum(-1) / math.sqrt(d_head)
    band_rows = bands[:, ROWS].numpy().copy()
    band_rows[:, np.arange(n_tokens)[None, :] > np.array(ROWS)[:, None]] = np.nan
    return masked(content), masked(bands.sum(-1) - content), band_rows


@torch.no_grad()
def bias_brute_force(kind: str, model, hooks) -> torch.Tensor:
    """[head, T, T] bias of an additive or contextual layer, by the mechanism's formula (the registry's bias)."""
    attn = model.blocks[LAYER].attn
    mechanism = attn.mechanism
    n_heads, d_head, n_tokens = attn.n_heads, attn.d_head, len(IDS)
    q, k = rotated_qk(hooks, n_heads)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_head)
    index = torch.arange(n_tokens)
    allowed = index[None, :] <= index[:, None]
    distance = (index[:, None] - index[None, :]).double()
    if mechanism_traits(kind).role == "additive":  # position_j − position_i
        positions = hooks["hook_pos"]
        return positions[:, None, :] - positions[:, :, None]
    if kind == "cope":
        gates = torch.sigmoid(scores).masked_fill(~allowed, 0.0)
        p = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=mechanism.max_position)  # Σ_{t=j}^{i} g_it
        logits = q @ mechanism.position_embeddings.double()
        floor = p.floor().long()
        ceil = (floor + 1).clamp(max=mechanism.max_position)
        weight = p - p.floor()
        return logits.gather(-1, floor) * (1 - weight) + logits.gather(-1, ceil) * weight
    if kind == "grape-ap":
        psi = F.logsigmoid(scores + mechanism.potential_bias.double()[:, None, None]).masked_fill(~allowed, 0.0)
        return psi.flip(-1).cumsum(-1).flip(-1) - psi  # Σ_{l=j+1}^{i} ψ(i, l)
    if kind == "grape-ap-rotated":  # the GRAPE authors': ψ(i, l) = m_h·logsigmoid(p_i·R(l) p̂_l / d_p), p = c_p(input)
        p = (hooks["layer_input"] @ mechanism.c_p.weight.double().T).view(n_tokens, n_heads, -1).transpose(0, 1)
        d_p, half = p.shape[-1], p.shape[-1] // 2
        p_hat = p * torch.rsqrt(p.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float64).eps)
        angle = index.double()[:, None]  # the key's index l, in every plane (frequency 1)
        p1, p2 = p_hat[..., :half], p_hat[..., half:]
        p_rot = torch.cat((p1 * angle.cos() + p2 * angle.sin(), -p1 * angle.sin() + p2 * angle.cos()), dim=-1)
        slopes = torch.tensor(alibi_slopes(n_heads), dtype=torch.float64)[:, None, None]
        psi = (slopes * F.logsigmoid(p @ p_rot.transpose(-1, -2) / d_p)).masked_fill(~allowed, 0.0)
        return psi.flip(-1).cumsum(-1).flip(-1) - psi  # Σ_{l=j+1}^{i} ψ(i, l)
    if kind == "grape-a":  # query-gated in a zoo model: −(i − j)·softplus(ω_h)·m_h·softplus(v̂_h·q_i/√d)
        rate = F.softplus((q * F.normalize(mechanism.v.double(), dim=-1)[:, None, :]).sum(-1) / math.sqrt(d_head))
        omega = F.softplus(mechanism.omega.double()) * torch.tensor(alibi_slopes(n_heads), dtype=torch.float64)
        return -distance.clamp(min=0)[None] * omega[:, None, None] * rate[:, :, None]
    if kind == "rel":  # q_i·R[:, M − 1 − (i − j)], 0 beyond the table
        table = q @ mechanism.emb.double()
        column = (mechanism.npos - 1 - distance).long()
        return torch.where(column >= 0, table.gather(-1, column.clamp(0, mechanism.npos - 1)[None].expand(n_heads, -1, -1)), 0.0)
    return hooks["hook_attn_scores"] - scores  # a contextual kind added later: the model's own scores minus q·k


def brute_force(case) -> tuple[np.ndarray, np.ndarray]:
    """content and position [head, row, key] of the case's layer, NaN after each query."""
    if mechanism_traits(case.kind).role == "rotary":
        content, position, _ = rotary_brute_force(case.model, case.hooks)
        return content, position
    q, k = rotated_qk(case.hooks, case.model.cfg.n_heads)
    content = q @ k.transpose(-1, -2) / math.sqrt(case.model.blocks[LAYER].attn.d_head)
    return masked(content), masked(bias_brute_force(case.kind, case.model, case.hooks))


def score_from_hooks(case) -> np.ndarray:
    """The layer's score: rotated q·k in float64 from hook_rot_q / hook_rot_k, plus the brute-force bias."""
    q, k = rotated_qk(case.hooks, case.model.cfg.n_heads)
    score = q @ k.transpose(-1, -2) / math.sqrt(case.model.blocks[LAYER].attn.d_head)
    if mechanism_traits(case.kind).role != "rotary":
        score = score + bias_brute_force(case.kind, case.model, case.hooks)
    return masked(score)


def softmax_rows(values: np.ndarray) -> np.ndarray:
    shifted = np.where(np.isnan(values), -np.inf, values)
    shifted = np.exp(shifted - shifted.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


# ------------------------------------------------------------------------------------------------ the parts


def test_parts_equal_the_brute_force_from_the_hooks(case):
    content, position = brute_force(case)
    found = case.found
    assert found.content.shape == found.position.shape == (4, len(ROWS), max(ROWS) + 1)
    np.testing.assert_allclose(found.content, content, **FLOAT32)  # the model rotates in float32
    np.testing.assert_allclose(found.position, position, **FLOAT32)


def test_content_plus_position_is_the_layers_score(case):
    exact = mechanism_traits(case.kind).role != "contextual"  # contextual biases run in float32 in the model
    np.testing.assert_allclose(case.found.content + case.found.position, score_from_hooks(case),
                               **(EXACT if exact else FLOAT32))
    scores = case.hooks["hook_attn_scores"][:, ROWS].numpy()  # the model's own, in float32
    visible = case.found.mask[None]
    np.testing.assert_allclose(np.where(visible, case.found.score, 0.0), np.where(visible, scores, 0.0),
                               rtol=1e-5, atol=1e-5)


def test_bands_add_up_to_the_score_minus_the_bias(case):
    found = case.found
    if mechanism_traits(case.kind).role != "rotary":
        with pytest.raises(InputError, match=rf"layer {LAYER} .*rotates neither q nor k.*\.content and \.position"):
            found.bands
        assert found.frequencies is None and found.n_bands == 0
        return
    bands = found.bands
    assert bands.shape == (*found.content.shape, 4) and found.frequencies.shape == (4, 4)
    q, k = rotated_qk(case.hooks, case.model.cfg.n_heads)
    pairs = (q[:, :, None] * k[:, None]).numpy()  # [head, i, j, d]: each channel's product of the rotated q and k
    by_pair = (pairs[..., :4] + pairs[..., 4:]) / math.sqrt(8)
    by_pair[:, ~np.tril(np.ones((len(IDS), len(IDS)), dtype=bool))] = np.nan
    np.testing.assert_allclose(bands, by_pair[:, ROWS], **EXACT)
    np.testing.assert_allclose(bands.sum(-1), found.score, **EXACT)
    np.testing.assert_allclose(bands, rotary_brute_force(case.model, case.hooks)[2], **FLOAT32)


def test_the_actual_pattern_is_the_models_and_the_parts_patterns_their_softmaxes(case):
    found = case.found
    np.testing.assert_allclose(found.patterns["actual"], case.hooks["hook_pattern"][:, ROWS].numpy(), **FLOAT32)
    np.testing.assert_allclose(found.patterns["content"], softmax_rows(found.content), **EXACT)
    np.testing.assert_allclose(found.patterns["position"], softmax_rows(found.position), **EXACT)
    for pattern in found.patterns.values():
        np.testing.assert_allclose(pattern.sum(-1), 1.0, **EXACT)
        assert (pattern[:, ~found.mask] == 0).all()


def _ablated_pattern(case, mode: str) -> np.ndarray:
    seen = {}

    def keep(pattern, hook):
        seen["pattern"] = pattern[0].detach().double()

    with case.model.hooks(fwd_hooks=[(f"blocks.{LAYER}.attn.hook_pattern", keep)]):
        interventions.ablate(case.lens, IDS, layers=[LAYER], mode=mode)
    return seen["pattern"][:, ROWS].numpy()


@pytest.mark.parametrize("mode", ["integer", "constant"])
def test_the_reference_pattern_is_the_ablated_forwards(case, mode):
    found = case.found if mode == "integer" else score_decomposition(case.lens, IDS, LAYER, queries=ROWS,
                                                                      reference=mode)
    assert found.reference == mode
    if not mechanism_traits(case.kind).edit:  # learned relative logits: integer distances are their own
        expected = found.patterns["actual" if mode == "integer" else "content"]
        np.testing.assert_allclose(found.patterns["reference"], expected, **FLOAT32)
        return
    np.testing.assert_allclose(found.patterns["reference"], _ablated_pattern(case, mode), **FLOAT32)


def test_reference_positions_given_as_an_array(case):
    if mechanism_traits(case.kind).role == "contextual":
        return  # refused there (tests/bad_input)
    integers = np.arange(len(IDS), dtype=np.float64)
    for given in (integers, np.tile(integers, (4, 1)) + 7.0):  # one row for every head; a shift changes nothing
        found = score_decomposition(case.lens, IDS, LAYER, queries=ROWS, reference=given)
        assert found.reference == "array"
        np.testing.assert_allclose(found.patterns["reference"], case.found.patterns["reference"], **FLOAT32)
    assert score_decomposition(case.lens, IDS, LAYER, queries=ROWS, reference=None).patterns.keys() == {
        "actual", "content", "position"}


# ------------------------------------------------------------------------------------------ other models


@pytest.mark.parametrize("kind", ["rope", "repo", "alibi", "cope", "grape-m"])
def test_float32_models_are_exact_to_1e_5(kind):
    model = _perturbed(tiny_model(kind, n_layers=2, d_model=32, n_heads=4, seed=5))
    lens = repo_lens.Lens(model, None)
    found = score_decomposition(lens, IDS, LAYER, queries=ROWS)
    hooks = _hooks(model)
    assert found.content.dtype == np.float32
    visible = found.mask[None]
    np.testing.assert_allclose(np.where(visible, found.content + found.position, 0.0),
                               np.where(visible, hooks["hook_attn_scores"][:, ROWS].numpy(), 0.0), rtol=0, atol=1e-5)
    np.testing.assert_allclose(found.patterns["actual"], hooks["hook_pattern"][:, ROWS].numpy(), rtol=0, atol=1e-5)
    if mechanism_traits(kind).role == "rotary":
        np.testing.assert_allclose(found.bands.sum(-1), found.score, rtol=0, atol=1e-5)


def test_grouped_query_attention_repeats_the_keys():
    from repo_lens.model import LensModel, ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(family="llama", vocab_size=257, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_mlp=64,
                      layer_mechanisms=["rope", "repo"])
    model = LensModel(cfg).double().eval()
    hooks = _hooks(model)
    found = score_decomposition(repo_lens.Lens(model, None), IDS, LAYER, queries=ROWS)
    content, position, _ = rotary_brute_force(model, hooks)
    np.testing.assert_allclose(found.content, content, **FLOAT32)
    np.testing.assert_allclose(found.position, position, **FLOAT32)
    np.testing.assert_allclose(found.patterns["actual"], hooks["hook_pattern"][:, ROWS].numpy(), **FLOAT32)


def _two_token_lens(kind: str):
    """A one-layer Llama-family model, d_head 2 (one band, θ = 1), whose q and k a hook sets by hand:
    q_0 = q_1 = (1, 0), k_0 = (1, 0), k_1 = (0, 2) in both heads."""
    from repo_lens.model import LensModel, ModelConfig

    torch.manual_seed(0)
    model = LensModel(ModelConfig(family="llama", vocab_size=257, d_model=4, n_layers=1, n_heads=2, d_mlp=8,
                                  layer_mechanisms=[kind])).double().eval()
    values = {"hook_q": [[1.0, 0.0], [1.0, 0.0]], "hook_k": [[1.0, 0.0], [0.0, 2.0]]}

    def setter(name):
        def hook(tensor, hook):
            return torch.tensor(values[name], dtype=tensor.dtype)[None, :, None, :].expand_as(tensor).clone()
        return hook

    return repo_lens.Lens(model, None), [(f"blocks.0.attn.{name}", setter(name)) for name in values]


def test_a_two_token_rope_case_computed_by_hand():
    lens, hooks = _two_token_lens("rope")
    with lens.model.hooks(fwd_hooks=hooks):
        found = score_decomposition(lens, [7, 8], 0)
        constant = score_decomposition(lens, [7, 8], 0, reference="constant")
    root = math.sqrt(2.0)
    # s_10 = q_1ᵀ R(θ (p_0 − p_1)) k_0 / √2 = (1, 0)·R(−1)(1, 0) / √2 = cos 1 / √2; s_11 = q_1·k_1 / √2 = 0
    assert found.kind == "rope" and found.mask.tolist() == [[True, False], [True, True]]
    # the model rotates in float32, so what it scores is within 1e-7 of the exact values
    np.testing.assert_allclose(found.content[0], [[1 / root, np.nan], [1 / root, 0.0]], atol=1e-7)
    np.testing.assert_allclose(found.position[0], [[0.0, np.nan], [(math.cos(1.0) - 1) / root, 0.0]], atol=1e-7)
    np.testing.assert_allclose(found.bands[0, 1, :, 0], [math.cos(1.0) / root, 0.0], atol=1e-7)
    np.testing.assert_allclose(found.frequencies, [[1.0], [1.0]], **EXACT)

    def row(a: float) -> list[float]:
        return [1 / (1 + math.exp(-a)), 1 / (1 + math.exp(a))]  # softmax([a, 0])

    np.testing.assert_allclose(found.patterns["actual"][0], [[1.0, 0.0], row(math.cos(1.0) / root)], atol=1e-7)
    np.testing.assert_allclose(found.patterns["content"][0, 1], row(1 / root), atol=1e-7)
    np.testing.assert_allclose(found.patterns["position"][0, 1], row((math.cos(1.0) - 1) / root), atol=1e-7)
    np.testing.assert_allclose(found.patterns["reference"], found.patterns["actual"], atol=1e-7)  # RoPE: integers
    np.testing.assert_allclose(constant.patterns["reference"], found.patterns["content"], atol=1e-7)


def test_a_two_token_alibi_case_computed_by_hand():
    lens, hooks = _two_token_lens("alibi")
    with lens.model.hooks(fwd_hooks=hooks):
        found = score_decomposition(lens, [7, 8], 0)
    slopes = alibi_slopes(2)  # [2^-4, 2^-8]: the bias of query 1 on key 0 is −m_h
    assert found.kind == "alibi"
    np.testing.assert_allclose(found.content[:, 1], [[1 / math.sqrt(2.0), 0.0]] * 2, **EXACT)
    np.testing.assert_allclose(found.position[:, 1], [[-slopes[0], 0.0], [-slopes[1], 0.0]], **EXACT)


# --------------------------------------------------------------------------------- selections and summaries


@pytest.fixture(scope="module")
def repo_case():
    model = tiny_model("repo", n_layers=2, d_model=32, n_heads=4, seed=3).double()
    return SimpleNamespace(model=model, lens=repo_lens.Lens(model, None), hooks=_hooks(model))


def test_selected_heads_rows_and_keys_keep_the_layers_normalisation(repo_case):
    found = score_decomposition(repo_case.lens, IDS, LAYER, heads=np.array([3, 1]), queries=[np.int64(7), 2],
                                keys=np.array([0, 5, 11], dtype=np.int32))
    assert isinstance(found, ScoreDecomposition)
    assert found.heads.tolist() == [3, 1] and found.queries.tolist() == [7, 2] and found.keys.tolist() == [0, 5, 11]
    assert found.mask.tolist() == [[True, True, False], [True, False, False]]
    full = score_decomposition(repo_case.lens, IDS, LAYER)  # every head, row and key
    assert full.content.shape == (4, len(IDS), len(IDS))
    pick = np.ix_([3, 1], [7, 2], [0, 5, 11])
    np.testing.assert_allclose(found.content, full.content[pick], **EXACT)
    np.testing.assert_allclose(found.position, full.position[pick], **EXACT)
    np.testing.assert_allclose(found.bands, full.bands[pick], **EXACT)
    for name, pattern in found.patterns.items():  # not renormalised over the selected keys
        np.testing.assert_allclose(pattern, full.patterns[name][pick], **EXACT)
    np.testing.assert_allclose(found.patterns["actual"], repo_case.hooks["hook_pattern"].numpy()[pick], **FLOAT32)
    assert np.isnan(found.content[:, ~found.mask]).all() and np.isnan(found.bands[:, ~found.mask]).all()
    negative = score_decomposition(repo_case.lens, IDS, -1, heads=-1, queries=-1, keys=[-1, 0])
    np.testing.assert_allclose(negative.content, full.content[np.ix_([3], [11], [11, 0])], **EXACT)


def test_span_summary_sums_the_patterns_and_splits_the_variance(repo_case):
    found = score_decomposition(repo_case.lens, IDS, LAYER, queries=[9, 11])
    summary = found.span_summary({"needle": (2, 5), "first": (0, 1)})
    assert list(summary.columns) == ["layer", "head", "query", "span", "keys", "actual", "content", "position",
                                     "reference", "position_share"]
    needle = summary[(summary.span == "needle") & (summary["head"] == 2) & (summary["query"] == 9)].iloc[0]
    assert needle["keys"] == 3
    np.testing.assert_allclose(needle["actual"], found.patterns["actual"][2, 0, 2:5].sum(), **EXACT)
    for pattern in ("actual", "content", "position", "reference"):
        totals = summary.pivot_table(index=["head", "query"], columns="span", values=pattern)
        np.testing.assert_allclose(totals["needle"] + totals["first"] + totals["rest"], totals["all"], **EXACT)
        np.testing.assert_allclose(totals["all"], 1.0, **EXACT)
    every = summary[(summary.span == "all") & (summary["head"] == 1) & (summary["query"] == 11)].iloc[0]
    score, position = found.score[1, 1], found.position[1, 1]
    np.testing.assert_allclose(every["position_share"], np.cov(position, score)[0, 1] / np.var(score, ddof=1),
                               **EXACT)
    first = summary[summary.span == "first"]
    assert (first["keys"] == 1).all() and first["position_share"].isna().all()  # one key: no variance to split


def test_table_is_tidy(repo_case):
    found = score_decomposition(repo_case.lens, IDS, LAYER, heads=[0, 2], queries=[4, 6])
    table = found.table()
    visible = int(found.mask.sum()) * 2  # visible entries × heads
    assert list(table.columns) == ["layer", "head", "query", "key", "part", "band", "value"]
    assert len(table) == 2 * visible and table["band"].isna().all() and str(table["band"].dtype) == "Int64"
    row = table[(table.part == "position") & (table["head"] == 2) & (table["query"] == 6) & (table.key == 3)]
    assert row.value.item() == found.position[1, 1, 3]
    full = found.table(bands=True, patterns=True)
    assert len(full) == visible * (2 + 4 + found.n_bands)
    band = full[(full.part == "band") & (full.band == 3) & (full["head"] == 0) & (full["query"] == 4) & (full.key == 1)]
    assert band.value.item() == found.bands[0, 0, 1, 3]
    assert set(full.part) == {"content", "position", "band", "pattern_actual", "pattern_content",
                              "pattern_position", "pattern_reference"}


def test_the_generic_hugging_face_lens_matches_repo_lens_own(llama_dir):
    pytest.importorskip("nnsight", reason="the generic Hugging Face path needs nnsight")
    from repo_lens.hf import load_hf

    native, generic = repo_lens.load(llama_dir, device="cpu"), load_hf(llama_dir, device="cpu")
    ids = [1, 5, 9, 12, 3, 40, 22, 7, 9, 9, 13]
    for layer in (0, 2):
        options = dict(queries=[4, 10], keys=[0, 2, 4, 9, 10], reference=np.arange(len(ids)) * 0.5)
        mine, theirs = score_decomposition(native, ids, layer, **options), score_decomposition(generic, ids, layer,
                                                                                              **options)
        assert theirs.kind == "rope" and theirs.reference == "array"
        for name in ("content", "position", "bands"):
            np.testing.assert_allclose(getattr(theirs, name), getattr(mine, name), rtol=0, atol=1e-5)
        for name, pattern in mine.patterns.items():
            np.testing.assert_allclose(theirs.patterns[name], pattern, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ["grape-ap-v1", "fox"])
def test_the_grape_and_fox_authors_attention_is_read_as_any_other(variant, tmp_path):
    import warnings

    from authors.grape_layout import run_name, write_grape_checkpoint

    directory = tmp_path / run_name(variant, "M", True)
    write_grape_checkpoint(directory, variant, "M", True, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lens = repo_lens.load(directory, device="cpu")
    ids, rows = IDS[:11], [4, 10]
    for layer in range(lens.n_layers):
        found = score_decomposition(lens, ids, layer, queries=rows)
        _, cache = lens.model.run_with_cache(torch.tensor([ids]))
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0][:, rows].numpy()
        np.testing.assert_allclose(np.where(found.mask, found.score, 0.0), np.where(found.mask, scores, 0.0),
                                   rtol=0, atol=1e-5)
        np.testing.assert_allclose(found.patterns["actual"], cache[f"blocks.{layer}.attn.hook_pattern"][0][:, rows],
                                   rtol=0, atol=1e-6)
        seen = {}
        with lens.model.hooks(fwd_hooks=[(f"blocks.{layer}.attn.hook_pattern",
                                          lambda pattern, hook: seen.update(pattern=pattern[0].detach()))]):
            interventions.ablate(lens, ids, layers=[layer], mode="integer")
        np.testing.assert_allclose(found.patterns["reference"], seen["pattern"][:, rows], rtol=0, atol=1e-6)
