"""A model's decay (repo_lens.model.decay: the learned-increments post's ALiBi or learned forget-gate bias, added to
every rotary layer's scores) against a float64 computation written from its equations, and through the KV cache,
the hooks, checkpoints, traces and the analyses that recompute attention rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.analysis import attention_mass, position_attribution, score_decomposition
from repo_lens.errors import CheckpointError, InputError
from repo_lens.lens import Lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.decay import AlibiDecay, ForgetDecay, layer_decay_rows, post_alibi_slopes
from repo_lens.model.loaders.native.format import save_checkpoint
from repo_lens.model.registry import build_decay, decay_names, decay_traits, recorded_settings

T = 14


def make_model(decay: str, layers=("rope", "lpi-head", "repo"), n_heads: int = 4, n_kv_heads: int = 2,
               seed: int = 0) -> LensModel:
    """A llama-family model with ``decay``, every weight perturbed so the forget gates vary (biases around 1)."""
    cfg = ModelConfig(family="llama", vocab_size=40, d_model=32, n_layers=len(layers), n_heads=n_heads,
                      n_kv_heads=n_kv_heads, head_dim=8, d_mlp=48, layer_mechanisms=list(layers), decay=decay)
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.add_(0.3 * torch.randn_like(param))
            if name == "decay.fc2.bias":
                param.fill_(1.0)  # α around sigmoid(1): a decay that matters in every head
    return model


def ids_for(seed: int = 1, length: int = T, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, 40, (batch, length), generator=torch.Generator().manual_seed(seed))


def reference_log_forget(model: LensModel, embedded: torch.Tensor) -> torch.Tensor:
    """log α [head, pos] in float64 from the equations: ALiBi −(2^(−8/H))^(h+1); the forget gate
    logsigmoid(fc2(gelu(fc1(e)))) with the exact (erf) GELU."""
    n_heads, n_tokens = model.cfg.n_heads, embedded.shape[0]
    if model.cfg.decay == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)], dtype=torch.float64)
        return -slopes[:, None].expand(n_heads, n_tokens)
    W = {name: value.double() for name, value in model.decay.state_dict().items()}
    e = embedded.double()
    pre = e @ W["fc1.weight"].T + W["fc1.bias"]
    hidden = 0.5 * pre * (1.0 + torch.erf(pre / math.sqrt(2.0)))
    logit = hidden @ W["fc2.weight"].T + W["fc2.bias"]
    return (-torch.log1p(torch.exp(-logit))).T  # log sigmoid


@pytest.mark.parametrize("decay", decay_names())
def test_scores_are_the_rotated_q_k_plus_the_decay_bias(decay):
    """hook_attn_scores = q·k/√d of the rotated q and k + A_i − A_j, A = Σ_{s≤t} log α_s, in every layer."""
    model = make_model(decay)
    ids = ids_for()
    names = ("hook_embed", "hook_rot_q", "hook_rot_k", "hook_attn_scores", "hook_decay", "hook_log_forget")
    _, cache = model.run_with_cache(ids, names_filter=lambda name: name.endswith(names))
    log_forget = reference_log_forget(model, cache["hook_embed"][0])
    torch.testing.assert_close(cache["hook_log_forget"][0].double(), log_forget, atol=1e-6, rtol=1e-6)
    levels = torch.cumsum(log_forget, -1)
    bias = levels[:, :, None] - levels[:, None, :]
    assert bias.tril().abs().max() > 1.0  # the decay moves the scores
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(model.cfg.n_layers):
        q = cache[f"blocks.{layer}.attn.hook_rot_q"][0].double().transpose(0, 1)  # [head, pos, d]
        k = cache[f"blocks.{layer}.attn.hook_rot_k"][0].double().transpose(0, 1)
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        expected = (q @ k.transpose(-1, -2) / math.sqrt(8) + bias).masked_fill(~causal, float("-inf"))
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_attn_scores"][0].double(), expected,
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_decay"][0].double(), levels, atol=1e-5, rtol=1e-5)


def test_alibi_decay_takes_the_post_slopes_for_any_head_count():
    """(2^(−8/H))^(h+1) for every H, unlike the alibi kind's rule for H that is not a power of two."""
    assert post_alibi_slopes(8) == [2.0 ** -(h + 1) for h in range(8)]
    assert post_alibi_slopes(6)[0] == pytest.approx(2 ** (-8 / 6)) and post_alibi_slopes(6)[-1] == pytest.approx(2 ** -8)
    model = make_model("alibi", layers=("rope", "rope"), n_heads=6, n_kv_heads=6)
    log_forget = model.decay.log_forget(torch.zeros(1, 3, 32))
    np.testing.assert_allclose(-log_forget[0, :, 0].numpy(), post_alibi_slopes(6), rtol=1e-6)


def test_zeros_at_hook_log_forget_are_the_model_without_decay():
    with_decay = make_model("forget")
    state = {name: value for name, value in with_decay.state_dict().items() if not name.startswith("decay.")}
    plain = LensModel(ModelConfig(**{**with_decay.cfg.to_dict(), "decay": "none"})).eval()
    plain.load_state_dict(state)
    ids = ids_for(seed=3)
    with torch.no_grad():
        zeroed = with_decay.run_with_hooks(ids, fwd_hooks=[("hook_log_forget", lambda t, hook: torch.zeros_like(t))])
        decayed = with_decay(ids)
        torch.testing.assert_close(zeroed, plain(ids), atol=1e-5, rtol=1e-5)
    assert (decayed - zeroed).abs().max() > 0.1


@pytest.mark.parametrize("decay", decay_names())
def test_decoding_with_the_kv_cache_equals_the_full_forward(decay):
    """Keys keep their levels A in the cache, so a prompt pass then one token at a time gives the full forward's
    logits and levels; greedy generation with the cache equals it without."""
    model = make_model(decay)
    ids = ids_for(seed=4, batch=2)
    levels = {}

    def keep(step):
        return [("blocks.2.attn.hook_decay", lambda t, hook: levels.setdefault(step, t.clone()))]

    with torch.no_grad():
        full = model.run_with_hooks(ids, fwd_hooks=keep("full"))
        cache = model.new_cache()
        pieces = [model.run_with_hooks(ids[:, :6], cache=cache, fwd_hooks=keep(0))]
        pieces += [model.run_with_hooks(ids[:, t:t + 1], cache=cache, fwd_hooks=keep(t)) for t in range(6, T)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-4, rtol=0)
    stepped = torch.cat([levels[0]] + [levels[t] for t in range(6, T)], dim=-1)
    torch.testing.assert_close(stepped, levels["full"], atol=1e-5, rtol=1e-5)
    greedy = dict(max_new_tokens=6, do_sample=False, verbose=False, return_type="tokens")
    cached = model.generate(ids[:1, :5], use_past_kv_cache=True, **greedy)
    uncached = model.generate(ids[:1, :5], use_past_kv_cache=False, **greedy)
    assert torch.equal(cached, uncached)


def test_runs_without_the_embeddings_are_refused_by_name():
    model = make_model("forget", layers=("rope", "repo", "pope"))
    ids = ids_for()
    with torch.no_grad():
        resid = model(ids, stop_at_layer=1)
        with pytest.raises(InputError, match=r"decay \('forget'\) is computed from the token embeddings"):
            model(resid, start_at_layer=1)
        with pytest.raises(InputError, match="layer 1 adds the model's decay .*run the model from its tokens"):
            model.blocks[1](resid)


def test_configurations_a_decay_cannot_run_are_refused():
    base = dict(family="llama", vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_mlp=48)
    with pytest.raises(CheckpointError, match=r"layers of kind \['fox'\] bias their scores themselves"):
        LensModel(ModelConfig(**base, layer_mechanisms=["rope", "fox"], decay="forget"))
    with pytest.raises(CheckpointError, match=r"unknown decay 'exponential'; expected 'none' or one of \['alibi', "
                                              r"'forget'\]"):
        LensModel(ModelConfig(**base, layer_mechanisms=["rope", "rope"], decay="exponential"))
    with pytest.raises(CheckpointError, match="decay_hidden=0; expected a positive integer"):
        ModelConfig(**base, layer_mechanisms=["rope", "rope"], decay="forget", decay_hidden=0)
    with pytest.raises(CheckpointError, match="family='authors' has its own attention"):
        build_decay(ModelConfig(**{**base, "family": "authors"}, layer_mechanisms=["rope", "rope"], decay="alibi"))


def test_the_registry_declares_each_decay_once():
    assert decay_names() == ["alibi", "forget"]
    assert [decay_traits(name).module.rsplit(".", 1)[1] for name in decay_names()] == ["AlibiDecay", "ForgetDecay"]
    assert {decay_traits(name).hook for name in decay_names()} == {"hook_log_forget"}
    assert not decay_traits("alibi").learned and decay_traits("forget").learned
    assert isinstance(make_model("alibi").decay, AlibiDecay) and isinstance(make_model("forget").decay, ForgetDecay)
    assert not any(name.startswith("decay.") for name in make_model("alibi").state_dict())  # ALiBi saves nothing
    forget = make_model("forget").cfg
    assert recorded_settings(forget)["decay"] == "forget" and recorded_settings(forget)["decay_hidden"] == 8
    assert layer_decay_rows(make_model("none").blocks[0].attn) is None


def test_checkpoints_and_traces_keep_the_decay(tmp_path):
    model = make_model("forget")
    save_checkpoint(model, tmp_path / "ckpt", tokenizer="bytes")
    lens = repo_lens.load(tmp_path / "ckpt", device="cpu")
    ids = ids_for(seed=6)
    with torch.no_grad():
        torch.testing.assert_close(lens.model(ids), model(ids), atol=1e-6, rtol=1e-6)
    assert lens.model.cfg.decay == "forget"
    trace = lens.trace(ids[0].tolist(), progress=False)
    assert trace.meta["mechanism"]["decay"] == "forget" and trace.meta["mechanism"]["decay_hidden"] == 8
    trace.save(tmp_path / "trace.safetensors")
    assert repo_lens.Trace.load(tmp_path / "trace.safetensors").meta["mechanism"]["decay"] == "forget"


@pytest.mark.parametrize("decay", decay_names())
def test_attention_mass_is_the_mass_of_the_hooked_pattern(decay):
    model = make_model(decay)
    ids = ids_for(seed=7, length=40)
    spans, query = {"needle": (5, 12), "question": (28, 34)}, (34, 40)
    mass = attention_mass(model, ids[0].tolist(), spans, query)
    _, cache = model.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_pattern"))
    for layer in range(model.cfg.n_layers):
        rows = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, query[0]:query[1]].double()  # [head, R, T]
        for name, (a, b) in spans.items():
            expected = rows[:, :, a:b].sum(-1).mean(-1) / (b - a)
            np.testing.assert_allclose(mass.by_layer_head[name][layer], expected.numpy(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("decay", decay_names())
def test_score_decomposition_puts_the_decay_in_the_position_part(decay):
    """content + position = hook_attn_scores; the bands add up to the score minus the decay's bias; at the
    RoPE layer the integer reference is the actual pattern (the reference keeps the decay)."""
    model = make_model(decay)
    lens = Lens(model, ByteTokenizer())
    ids = ids_for(seed=8, length=20)[0].tolist()
    _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda name: name.endswith(
        ("hook_attn_scores", "hook_decay", "hook_pattern")))
    rows = [12, 19]
    for layer in range(model.cfg.n_layers):
        found = score_decomposition(lens, ids, layer, queries=rows)
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, :, rows].numpy()
        visible = found.mask[None].repeat(4, 0)
        np.testing.assert_allclose(found.score[visible], scores[visible], atol=1e-5, rtol=1e-5)
        levels = cache[f"blocks.{layer}.attn.hook_decay"][0].numpy()
        bias = levels[:, rows, None] - levels[:, None, :20]
        np.testing.assert_allclose(found.bands.sum(-1)[visible], (scores - bias)[visible], atol=1e-5, rtol=1e-5)
        assert np.abs(bias[visible]).max() > 0.5
    at_rope = score_decomposition(lens, ids, 0, queries=rows, reference="integer")
    np.testing.assert_allclose(at_rope.patterns["reference"], at_rope.patterns["actual"], atol=1e-6)
    np.testing.assert_allclose(at_rope.patterns["actual"], cache["blocks.0.attn.hook_pattern"][0, :, rows].numpy(),
                               atol=1e-6)


def test_position_attribution_and_ablate_work_on_the_positions_and_keep_the_decay():
    """The decay is no position: position_attribution attributes the layer's positions as the trace has them,
    and ablate edits positions while every layer keeps its decay; patching, which reruns blocks from a cached
    residual stream, is refused by name."""
    from repo_lens import interventions

    model = make_model("forget")
    lens = Lens(model, ByteTokenizer())
    ids = ids_for(seed=9)[0].tolist()
    attribution = position_attribution(lens, ids, 2)
    np.testing.assert_allclose(attribution.positions, lens.trace(ids, progress=False).positions[2], rtol=1e-5, atol=1e-6)
    ablated = interventions.ablate(lens, ids, mode="constant", layers=[1, 2])
    hooks = [("blocks.1.attn.mechanism.hook_delta", lambda t, hook: torch.zeros_like(t)),
             ("blocks.2.attn.hook_pos", lambda t, hook: torch.zeros_like(t))]
    with torch.no_grad():
        expected = model.run_with_hooks(torch.tensor([ids]), fwd_hooks=hooks)
        without_decay = model.run_with_hooks(torch.tensor([ids]), fwd_hooks=[
            *hooks, ("hook_log_forget", lambda t, hook: torch.zeros_like(t))])
    torch.testing.assert_close(ablated, expected, atol=1e-5, rtol=1e-5)
    assert (ablated - without_decay).abs().max() > 0.1
    metric = interventions.logit_difference(3, 4)
    with pytest.raises(InputError, match="adds the model's decay .*cannot run a model with a decay"):
        interventions.patch(lens, ids, ids[:-1] + [5], metric, grid="layer",
                            options=interventions.GridOptions(progress=False))
