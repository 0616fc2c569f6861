"""CoPE authors' training checkpoints (issue 34): each --pos-emb of their code and every --cope-* /
--rel-pos-* option, written as their checkpoint.save writes it, loads through repo_lens.load(path to
the .pt), runs their forward (log-probs within 1e-4 relative of an independent float64 reference) and
traces the positions their layers define, with their word tokenizer."""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.analysis import attention_mass
from repo_lens.errors import CheckpointError, InputError

from .cope_layout import CASES, WORDS, write_cope_checkpoint
from .reference_cope import cope_forward

TEXT = "x = 1 . y = 2 , what is x ? count the apples"  # 16 tokens with <sta>: their block_size
IDS = [1] + [WORDS.index(word) for word in TEXT.replace(".", " .").replace(",", " ,").replace("?", " ?").split()]


@pytest.mark.parametrize("name", list(CASES))
def test_every_option_loads_runs_their_forward_and_traces(tmp_path, name):
    path, opts, weights = write_cope_checkpoint(tmp_path, name, seed=len(name))
    lens = repo_lens.load(path, device="cpu")
    reference, positions = cope_forward(weights, opts, IDS)
    with torch.no_grad():
        logprobs = torch.log_softmax(lens.model(torch.tensor([IDS])), -1)[0]
    assert float((logprobs.double() - reference).abs().max() / reference.abs().max()) < 1e-4
    trace = lens.trace(IDS, progress=False)
    np.testing.assert_allclose(trace.positions, torch.stack(positions).numpy(), rtol=1e-4, atol=1e-4)
    assert trace.meta["authors"]["options"]["pos_emb"] == opts["pos_emb"] and json.dumps(trace.meta)
    assert trace.tokens[:3] == ["<sta>", "x", "="]


def test_layer_kinds_follow_their_code(tmp_path):
    kinds = {name: repo_lens.load(write_cope_checkpoint(tmp_path / name, name)[0], device="cpu").layer_kinds
             for name in ("cope", "cope+rel-every2-shared", "rel", "abs", "rope")}
    assert kinds == {"cope": ["cope"] * 3, "cope+rel-every2-shared": ["rel", "cope", "rel"], "rel": ["rel"] * 3,
                     "abs": ["nope"] * 3, "rope": ["nope"] * 3}


def test_text_goes_through_their_word_tokenizer(tmp_path):
    lens = repo_lens.load(write_cope_checkpoint(tmp_path, "cope")[0], device="cpu")
    assert lens.trace("X = 1.", progress=False).tokens == ["x", "=", "1", "."]
    with pytest.raises(InputError, match="'banana' is not in the CoPE checkpoint's vocabulary"):
        lens.trace("x = banana", progress=False)


@pytest.mark.parametrize("name", ["cope-sep-key", "cope-val-gates", "cope+rel", "rel"])
def test_attention_mass_equals_the_hooked_pattern(tmp_path, name):
    lens = repo_lens.load(write_cope_checkpoint(tmp_path, name, seed=2)[0], device="cpu")
    mass = attention_mass(lens, IDS, {"needle": (2, 5)}, (9, 12))
    _, cache = lens.model.run_with_cache(torch.tensor([IDS]), names_filter=lambda hook: hook.endswith("hook_pattern"))
    rows = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0, :, 9:12] for layer in range(lens.n_layers)])
    np.testing.assert_allclose(mass.by_layer_head["needle"], (rows[..., 2:5].sum(-1).mean(-1) / 3).numpy(),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["cope-sep-key", "cope+rel", "abs+rel-postnorm"])
def test_decoding_with_the_kv_cache_equals_the_full_forward(tmp_path, name):
    model = repo_lens.load(write_cope_checkpoint(tmp_path, name, seed=4)[0], device="cpu").model
    ids = torch.tensor([IDS])
    with torch.no_grad():
        full, cache = model(ids), model.new_cache()
        pieces = [model(ids[:, :5], cache=cache), model(ids[:, 5:6], cache=cache), model(ids[:, 6:], cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_missing_and_surplus_weights_are_refused_by_name(tmp_path):
    path, opts, weights = write_cope_checkpoint(tmp_path, "cope-sep-key")
    state = dict(weights)
    del state["module.core.layers.1.attn.proj_key_cope.bias"]
    state["module.core.layers.0.attn.extra"] = torch.zeros(2)
    torch.save({"cfg": argparse.Namespace(**opts), "model": state}, path)
    with pytest.raises(CheckpointError, match=r"missing weights.*blocks\.1\.attn\.k_cope_proj\.bias.*surplus weights.*"
                                              r"module\.core\.layers\.0\.attn\.extra"):
        repo_lens.load(path, device="cpu")


def test_a_checkpoint_with_a_code_payload_is_refused_and_runs_nothing(tmp_path):
    path = tmp_path / "checkpoints" / "evil.pt"
    path.parent.mkdir()
    marker = tmp_path / "owned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"cfg": Payload(), "model": {}}, path)
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        repo_lens.load(path, device="cpu")
    assert not marker.exists()


def test_a_pt_file_that_is_not_their_checkpoint_is_refused(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="in no checkpoint format .* CoPE training checkpoint .* learned-increments post"):
        repo_lens.load(path, device="cpu")


def test_their_decoder_is_built_of_their_layers(tmp_path):
    """--post-norm: norm(x + f(x)) in every layer and no final norm; --emb-tie: the output projection is the
    embedding; --cope-sep-key: the gates compare the queries with keys of their own projection."""
    model = repo_lens.load(write_cope_checkpoint(tmp_path / "tied", "cope-postnorm-tied")[0], device="cpu").model
    assert isinstance(model, repo_lens.model.authors.cope_model.CopeModel)
    assert isinstance(model.final_norm, torch.nn.Identity) and model.unembed.weight is model.embed.weight
    assert all(isinstance(block, repo_lens.model.authors.cope_block.CopeBlock) and block.post_norm
               for block in model.blocks)
    _, cache = model.run_with_cache(torch.tensor([IDS]))
    norm = model.blocks[0].ff_norm  # post-norm: what a layer outputs is LayerNorm'd last, so zero-mean in every row
    unit = (cache["blocks.0.hook_resid_post"] - norm.bias) / norm.weight
    torch.testing.assert_close(unit.mean(-1), torch.zeros(1, len(IDS)), atol=1e-4, rtol=0)
    model = repo_lens.load(write_cope_checkpoint(tmp_path / "sep", "cope-sep-key")[0], device="cpu").model
    attention = model.blocks[1].attn
    assert isinstance(attention, repo_lens.model.authors.cope_attention.CopeAttention)
    assert (attention.kind, attention.gates_from) == ("cope", "separate keys") and hasattr(attention, "k_cope_proj")
    assert not model.blocks[1].post_norm and isinstance(model.final_norm, torch.nn.LayerNorm)


def test_their_checkpoint_names_are_told_apart_from_other_files(tmp_path):
    """Their checkpoint code names its files <name>.pt, <name>.pt.best and <name>.pt.<epoch> (<name>.pt.cfg holds
    the options alone)."""
    from repo_lens.model.loaders.authors import authors_file, is_authors_file
    from repo_lens.model.loaders.cope.load import is_cope_file

    names = {"run.pt": True, "run.pt.best": True, "run.pt.12": True, "run.pt.cfg": False, "run.pth": False,
             "pytorch_model.bin": False, "run.pt.bestx": False}
    assert {name: is_cope_file(tmp_path / name) for name in names} == names
    (tmp_path / "folder.pt").mkdir()
    assert not is_cope_file(tmp_path / "folder.pt") and not is_authors_file(tmp_path / "folder.pt")
    assert is_authors_file(tmp_path / "run.pt.best") and authors_file(tmp_path / "run.pt") == tmp_path / "run.pt"
