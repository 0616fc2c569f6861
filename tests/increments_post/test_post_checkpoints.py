"""The learned-increments post's training checkpoints ("Learned position increments", Brendan Long;
github.com/brendanlong/learned-position-increments-experiment): each variant repo_lens runs, written as its
save_model_checkpoint writes it, loads through repo_lens.load (the .pt file or its run folder), gives its
forward's logits (within 1e-4 of an independent float64 reference, in fp32) and traces its positions per
layer and head, with δ at a hook that edits can write."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.model.loaders.increments_post import FORMAT, is_post_checkpoint
from repo_lens.model.loaders.increments_post.config import PostVariant, layer_kind, read_fields
from repo_lens.model.loaders.increments_post.load import load_post
from repo_lens.model.loaders.increments_post.notes import CODE
from repo_lens.model.pope import IntegerPopePositions, ResidualHeadPopePositions
from repo_lens.model.registry import mechanism_class
from repo_lens.model.residual_increments import ResidualIncrementPositions

from .reference_post import post_config, post_forward, write_post_checkpoint

IDS = list("Marie Curie 人工智能.\n".encode())  # 24 bytes: ASCII, CJK lead and continuation bytes
# name -> (model_config overrides, expected layer kind)
VARIANTS = {
    "rope": ({"pos_encoding": "rope"}, "rope"),
    "rope-3-layers": ({"pos_encoding": "rope", "n_layers": 3}, "rope"),
    "selective_rope-shared": ({"pos_encoding": "selective_rope"}, "lpi"),
    "selective_rope-shared-hidden12": ({"pos_encoding": "selective_rope", "delta_hidden_dim": 12}, "lpi"),
    "selective_rope-per-head": ({"pos_encoding": "selective_rope", "per_head_delta": True}, "lpi-head"),
    "selective_rope-per-layer": ({"pos_encoding": "selective_rope", "per_layer_delta": True}, "lpi-resid"),
    "selective_rope-per-layer-per-head": ({"pos_encoding": "selective_rope", "per_layer_delta": True,
                                           "per_head_delta": True, "n_layers": 3}, "lpi-resid-head"),
    "rope-gelu": ({"pos_encoding": "rope", "activation": "gelu"}, "rope"),
    "selective_rope-per-layer-gelu": ({"pos_encoding": "selective_rope", "per_layer_delta": True,
                                       "activation": "gelu"}, "lpi-resid"),
    "pope": ({"pos_encoding": "pope"}, "pope"),
    "selective_pope-shared": ({"pos_encoding": "selective_pope"}, "lpi-pope"),
    "selective_pope-per-head": ({"pos_encoding": "selective_pope", "per_head_delta": True}, "lpi-head-pope"),
    "selective_pope-per-layer": ({"pos_encoding": "selective_pope", "per_layer_delta": True}, "lpi-resid-pope"),
    "selective_pope-per-layer-per-head": ({"pos_encoding": "selective_pope", "per_layer_delta": True,
                                           "per_head_delta": True}, "lpi-resid-head-pope"),
}
# its decay (ALiBi, or the learned forget gate), added to every layer's scores on top of each rotation
for _base, (_overrides, _kind) in list(VARIANTS.items()):
    for _decay in ("alibi", "learned"):
        VARIANTS[f"{_base}-decay-{_decay}"] = ({**_overrides, "decay": _decay}, _kind)
LOGIT_TOLERANCE = 1e-4
POSITION_TOLERANCE = 1e-5  # relative: fp32 running sums against float64 ones


def _load_and_compare(path, cfg, weights, ids=IDS):
    lens = repo_lens.load(path, device="cpu")
    reference = post_forward(weights, cfg, ids)
    with torch.no_grad():
        logits = lens.model(torch.tensor([ids]))[0].double()
    error = float((logits - reference["logits"]).abs().max())
    assert error < LOGIT_TOLERANCE, error
    trace = lens.trace(ids, progress=False)
    np.testing.assert_allclose(trace.positions, reference["positions"].numpy(), rtol=POSITION_TOLERANCE, atol=1e-6)
    return lens, reference, trace


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_loads_and_runs_its_forward(tmp_path, name):
    overrides, kind = VARIANTS[name]
    cfg = post_config(**overrides)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=len(name))
    lens, reference, trace = _load_and_compare(path, cfg, weights)
    assert lens.layer_kinds == [kind] * cfg["n_layers"] and trace.layer_kinds == lens.layer_kinds
    assert lens.meta["format"] == "increments-post" and lens.meta["dtype"] == "float32"
    assert lens.meta["authors"]["options"]["pos_encoding"] == cfg["pos_encoding"] and lens.meta["authors"]["step"] == 100
    assert "Learned position increments" in lens.meta["authors"]["code"]
    decay = {"none": "none", "alibi": "alibi", "learned": "forget"}[cfg["decay"]]
    assert lens.model.cfg.decay == decay and trace.meta["mechanism"].get("decay", "none") == decay
    if kind not in ("rope", "pope"):  # δ varies from token to token, and the trace keeps it
        deltas = reference["deltas"].numpy()
        assert deltas.std() > 0.05
        np.testing.assert_allclose(trace.extras["increments"], deltas, rtol=1e-5, atol=1e-6)
    assert trace.tokens[:2] == ["M", "a"]


@pytest.mark.parametrize("frozen", ["shared", "per_head"])
@pytest.mark.parametrize("encoding", ["selective_rope", "selective_pope"])
def test_frozen_delta_tables_load(tmp_path, frozen, encoding):
    """A run trained with --frozen-delta-from: frozen_delta.deltas [V] or [V, H], no delta_mlp.* keys."""
    cfg = post_config(pos_encoding=encoding)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=8, frozen=frozen)
    lens, reference, trace = _load_and_compare(path, cfg, weights)
    assert lens.layer_kinds == ["lpi-table" + ("-pope" if encoding.endswith("pope") else "")] * cfg["n_layers"]
    np.testing.assert_allclose(trace.extras["increments"], reference["deltas"].numpy(), rtol=1e-6)
    assert (np.abs(np.diff(trace.positions[0], axis=0)).max() > 0.1) == (frozen == "per_head")


def test_per_head_positions_differ_between_heads(tmp_path):
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, per_head_delta=True)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=3)
    _, reference, trace = _load_and_compare(path, cfg, weights)
    assert np.abs(trace.positions[:, 0] - trace.positions[:, 1]).max() > 0.5


def test_a_run_folder_loads_its_latest_step(tmp_path):
    cfg = post_config(pos_encoding="selective_rope")
    write_post_checkpoint(tmp_path, cfg, seed=1, step=500)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=2, step=1000)
    lens, _, _ = _load_and_compare(tmp_path, cfg, weights)
    assert lens.meta["authors"]["step"] == 1000 and any("step_1000.pt" in note for note in lens.meta["authors"]["notes"])
    assert [file.name for file in repo_lens.checkpoint_files(tmp_path)] == ["step_1000.pt"]


def test_compiled_names_older_configs_and_gpu_tags_load(tmp_path):
    """Keys with torch.compile's _orig_mod. prefix; a config from before per_layer_delta, per_head_delta and
    decay existed; tensors saved from a GPU (tagged cuda:0) read onto the CPU."""
    cfg = post_config(pos_encoding="selective_rope")
    path, weights = write_post_checkpoint(tmp_path / "a", cfg, prefix="_orig_mod.",
                                          drop_fields=("per_layer_delta", "per_head_delta", "decay", "head_dim"))
    lens, _, _ = _load_and_compare(path, cfg, weights)
    assert any("_orig_mod." in note for note in lens.meta["authors"]["notes"])
    path, weights = write_post_checkpoint(tmp_path / "b", cfg, seed=5)
    tagged = tmp_path / "b" / "step_7.pt"
    _save_tagged_cuda(torch.load(path, weights_only=True), tagged)
    assert b"cuda:0" in tagged.read_bytes()
    _load_and_compare(tagged, cfg, weights)


def _save_tagged_cuda(obj, path):
    """torch.save with every storage's location tagged cuda:0, as a GPU run saves it (no GPU needed)."""
    registry = torch.serialization._package_registry
    entry = (-100, lambda storage: "cuda:0", lambda storage, location: None)
    registry.insert(0, entry)
    try:
        torch.save(obj, path)
    finally:
        registry.remove(entry)


def test_gpt2_vocabulary_runs_on_token_ids(tmp_path):
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, vocab_size=50257, n_layers=1)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=4)
    ids = [464, 3290, 318, 257, 1332, 13, 50256]
    lens, _, trace = _load_and_compare(path, cfg, weights, ids)
    if lens.tokenizer is None:  # no GPT-2 tokenizer in the Hugging Face cache: ids only, and a note says so
        assert any("GPT-2's tokenizer" in note for note in lens.meta["authors"]["notes"])
        with pytest.raises(Exception, match="(?i)tokenizer"):
            lens.trace("text", progress=False)


def test_written_increments_set_the_positions(tmp_path):
    """δ passes through blocks.{l}.attn.mechanism.hook_delta: writing 1 there gives integer positions 1..T."""
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, per_head_delta=True)
    path, _ = write_post_checkpoint(tmp_path, cfg, seed=6)
    model = repo_lens.load(path, device="cpu").model
    seen = {}
    hooks = [("blocks.1.attn.mechanism.hook_delta", lambda delta, hook: torch.ones_like(delta)),
             ("blocks.1.attn.hook_pos", lambda pos, hook: seen.setdefault("pos", pos.clone()))]
    with torch.no_grad():
        model.run_with_hooks(torch.tensor([IDS]), fwd_hooks=hooks)
    expected = torch.arange(1, len(IDS) + 1, dtype=torch.float32).expand(1, cfg["n_heads"], len(IDS))
    torch.testing.assert_close(seen["pos"], expected)


def test_decoding_with_the_kv_cache_equals_the_full_forward(tmp_path):
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, per_head_delta=True)
    model = repo_lens.load(write_post_checkpoint(tmp_path, cfg, seed=7)[0], device="cpu").model
    ids = torch.tensor([IDS])
    with torch.no_grad():
        full, cache = model(ids), model.new_cache()
        pieces = [model(ids[:, :9], cache=cache), model(ids[:, 9:10], cache=cache), model(ids[:, 10:], cache=cache)]
    # fp32 matmuls of 1 and of many tokens sum in other orders (1.4e-5 apart on an AVX-512 CPU), as in the decay test
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-4)


def test_a_gelu_model_is_a_non_gated_transformer_lens_model(tmp_path):
    cfg = post_config(pos_encoding="selective_rope", activation="gelu")
    model = repo_lens.load(write_post_checkpoint(tmp_path, cfg, seed=9)[0], device="cpu").model
    assert model.cfg.gated_mlp is False and model.cfg.act_fn == "gelu"
    _, cache = model.run_with_cache(torch.tensor([IDS]))
    pre, post = cache["blocks.1.mlp.hook_pre"], cache["blocks.1.mlp.hook_post"]
    torch.testing.assert_close(post, torch.nn.functional.gelu(pre))
    assert tuple(model.blocks[0].mlp.W_in.shape) == (cfg["dim"], cfg["intermediate_dim"])


def test_position_attribution_reads_what_a_residual_reading_module_reads(tmp_path):
    from repo_lens.analysis import position_attribution

    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True)
    lens = repo_lens.load(write_post_checkpoint(tmp_path, cfg, seed=10)[0], device="cpu")
    attribution = position_attribution(lens, IDS[:8], 1)
    np.testing.assert_allclose(attribution.positions, lens.trace(IDS[:8], progress=False).positions[1], rtol=1e-5)


def test_every_variant_of_its_config_has_one_kind():
    """pos_encoding × δ source → the registry kind that runs it; every kind is registered and its class known."""
    expected = {("rope", False, False, None): "rope", ("pope", False, False, None): "pope",
                ("selective_rope", False, False, None): "lpi", ("selective_rope", False, True, None): "lpi-head",
                ("selective_rope", True, False, None): "lpi-resid", ("selective_rope", True, True, None): "lpi-resid-head",
                ("selective_rope", False, False, "shared"): "lpi-table", ("selective_rope", False, True, "per_head"): "lpi-table",
                ("selective_pope", True, True, None): "lpi-resid-head-pope", ("selective_pope", False, False, "shared"): "lpi-table-pope"}
    for (encoding, per_layer, per_head, frozen), kind in expected.items():
        for decay in ("none", "alibi", "learned"):  # a decay is the model's: every layer keeps its kind
            assert layer_kind(PostVariant(encoding, per_layer, per_head, decay, frozen)) == kind
        assert mechanism_class(kind).kind == kind
    assert mechanism_class("pope") is IntegerPopePositions and mechanism_class("lpi-resid") is ResidualIncrementPositions
    assert mechanism_class("lpi-resid-head-pope") is ResidualHeadPopePositions
    assert read_fields({"dim": 32, "n_heads": 4, "n_layers": 2, "intermediate_dim": 64})["vocab_size"] == 50257
    assert is_post_checkpoint({"model_config": {}}) and not is_post_checkpoint({"cfg": 1})
    assert "step_<N>.pt" in FORMAT and "Brendan Long" in CODE and callable(load_post)
