"""The GRAPE authors' contextual GRAPE-M (ω = sigmoid((W h + b)/16)) is its own kind, ``grape-m-context``; the
zoo's ``grape-m`` (ω = softplus(W h + b) per head) keeps its name. Checkpoints and traces written while the
authors' phase was called ``grape-m`` still load, as ``grape-m-context``, with a DeprecationWarning.

So is their GRAPE-AP (ψ = m_h·logsigmoid(p_t·R(l)p̂_l/d_p) of a projection p of the layer input),
``grape-ap-rotated``; the zoo's ``grape-ap`` (ψ = log sigmoid(q·k/√d + b_h)) keeps its name, and what was written
as ``grape-ap`` under their attention loads as ``grape-ap-rotated``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.additive import PathIntegralPositions
from repo_lens.model.authors.path_potentials import PathPotentials
from repo_lens.model.authors.phases import ContextPhases
from repo_lens.model.increments import ContentPhasePositions
from repo_lens.model.loaders.native.format import save_checkpoint
from repo_lens.trace import Trace

from .grape_layout import run_name, write_grape_checkpoint

IDS = [3, 17, 5, 60, 1, 2, 90, 44, 8, 21]
RENAMED = r"layer kind 'grape-m' in .* is read as 'grape-m-context'"
AP_RENAMED = r"layer kind 'grape-ap' in .* is read as 'grape-ap-rotated'"
# old kind -> (the fixture of the authors' model that wrote it, the kind it is read as, the warning)
OLD_KINDS = {"grape-m": ("context_lens", "grape-m-context", RENAMED),
             "grape-ap": ("rotated_lens", "grape-ap-rotated", AP_RENAMED)}


def _load(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # their checkpoints carry no tokenizer
        return repo_lens.load(directory, device="cpu")


@pytest.fixture(scope="module")
def context_lens(tmp_path_factory):
    directory = tmp_path_factory.mktemp("grape") / run_name("grape-m-ctx", "M", False)
    write_grape_checkpoint(directory, "grape-m-ctx", "M", False, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # today's loader writes the new kind: nothing to rename
        return _load(directory)


@pytest.fixture(scope="module")
def rotated_lens(tmp_path_factory):
    directory = tmp_path_factory.mktemp("grape") / run_name("grape-ap-v1", "M", False)
    write_grape_checkpoint(directory, "grape-ap-v1", "M", False, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # today's loader writes the new kind: nothing to rename
        return _load(directory)


def _logits(lens) -> torch.Tensor:
    with torch.no_grad():
        return lens.model(torch.tensor([IDS]))[0]


def test_the_grape_authors_contextual_phase_loads_as_its_own_kind(context_lens):
    kinds = context_lens.model.cfg.layer_mechanisms
    assert set(kinds) == {"grape-m-context"}
    for block in context_lens.model.blocks:
        mechanism = block.attn.mechanism
        assert type(mechanism) is ContextPhases and mechanism.kind == "grape-m-context"
        # the sigmoid over the scale: every phase between 0 and 1, shared by the heads (one omega_proj output)
        assert mechanism.omega_proj.out_features == 1 and mechanism.scale == 16.0
    increments = context_lens.trace(IDS, progress=False).extras["increments"]
    assert ((increments > 0) & (increments < 1)).all()


def test_a_zoo_grape_m_config_keeps_its_kind_and_equation():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cfg = ModelConfig(family="llama", vocab_size=16, d_model=16, n_layers=2, n_heads=2, d_mlp=16,
                          layer_mechanisms=["rope", "grape-m"])
    assert cfg.layer_mechanisms == ["rope", "grape-m"]
    assert type(LensModel(cfg).blocks[1].attn.mechanism) is ContentPhasePositions


def test_an_authors_config_naming_the_old_kind_builds_the_new_one():
    with pytest.warns(DeprecationWarning, match=RENAMED):
        cfg = ModelConfig(family="authors", vocab_size=16, d_model=16, n_layers=2, n_heads=2, d_mlp=16,
                          layer_mechanisms=["rope", "grape-m"])
    assert cfg.layer_mechanisms == ["rope", "grape-m-context"]


def test_the_grape_authors_path_potential_loads_as_its_own_kind(rotated_lens):
    assert set(rotated_lens.model.cfg.layer_mechanisms) == {"grape-ap-rotated"}
    for block in rotated_lens.model.blocks:
        mechanism = block.attn.mechanism
        assert type(mechanism) is PathPotentials and mechanism.kind == "grape-ap-rotated"
        # p of its own projection of the layer input (p_head_dim 8 per head), not the scores q·k of the zoo's grape-ap
        assert mechanism.c_p.out_features == 4 * 8 and not hasattr(mechanism, "potential_bias")
    increments = rotated_lens.trace(IDS, progress=False).extras["increments"]
    assert (increments >= 0).all()  # −ψ = −m_h·logsigmoid(·) with ALiBi's slopes m_h > 0


def test_a_zoo_grape_ap_config_keeps_its_kind_and_equation():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cfg = ModelConfig(family="llama", vocab_size=16, d_model=16, n_layers=2, n_heads=2, d_mlp=16,
                          layer_mechanisms=["rope", "grape-ap"])
    assert cfg.layer_mechanisms == ["rope", "grape-ap"]
    assert type(LensModel(cfg).blocks[1].attn.mechanism) is PathIntegralPositions


def test_an_authors_config_naming_grape_ap_builds_the_rotated_kind_with_the_same_logits():
    shape = dict(family="authors", vocab_size=16, d_model=16, n_layers=2, n_heads=2, d_mlp=16,
                 extra={"authors": {"p_tie_mode": "none", "p_head_dim": 4}})
    with pytest.warns(DeprecationWarning, match=AP_RENAMED):
        old = ModelConfig(**shape, layer_mechanisms=["rope", "grape-ap"])
    assert old.layer_mechanisms == ["rope", "grape-ap-rotated"]
    new = ModelConfig(**shape, layer_mechanisms=["rope", "grape-ap-rotated"])
    models = []
    for cfg in (old, new):
        torch.manual_seed(3)
        models.append(LensModel(cfg).eval())
    assert type(models[0].blocks[1].attn.mechanism) is PathPotentials
    with torch.no_grad():
        logits = [model(torch.tensor([[1, 5, 2, 9, 4]])) for model in models]
    assert torch.equal(logits[0], logits[1])


@pytest.mark.parametrize("old", sorted(OLD_KINDS))
def test_an_old_native_checkpoint_with_the_old_kind_loads_as_the_new_kind(old, request, tmp_path):
    fixture, new, renamed = OLD_KINDS[old]
    lens = request.getfixturevalue(fixture)
    directory = save_checkpoint(lens.model, tmp_path / "native")
    config = json.loads((directory / "config.json").read_text())
    n_layers = config["model"]["n_layers"]
    config["model"]["layer_mechanisms"] = [old] * n_layers  # as repo_lens wrote it before the rename
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.warns(DeprecationWarning, match=renamed):
        reloaded = _load(directory)
    assert reloaded.model.cfg.layer_mechanisms == [new] * n_layers
    assert torch.equal(_logits(reloaded), _logits(lens))  # the same equation, the same weights


def _old_trace(trace: Trace, meta: dict, old: str) -> Trace:
    """``trace`` with every layer named ``old``, as a trace of the authors' model was written before."""
    meta = json.loads(json.dumps(meta))
    meta["mechanism"]["layer_kinds"] = [old] * trace.n_layers
    return Trace(tokens=trace.tokens, token_ids=trace.token_ids, positions=trace.positions,
                 layer_kinds=[old] * trace.n_layers, meta=meta, extras=trace.extras)


@pytest.mark.parametrize("old", sorted(OLD_KINDS))
def test_an_old_trace_file_of_the_authors_model_loads_with_the_new_kind(old, request, tmp_path):
    fixture, new, renamed = OLD_KINDS[old]
    trace = request.getfixturevalue(fixture).trace(IDS, progress=False)
    assert trace.meta["format"] == "grape"
    path = _old_trace(trace, trace.meta, old).save(tmp_path / "old.safetensors")
    with pytest.warns(DeprecationWarning, match=renamed):
        loaded = Trace.load(path)
    assert loaded.layer_kinds == trace.layer_kinds == [new] * trace.n_layers
    assert loaded.meta["mechanism"]["layer_kinds"] == trace.layer_kinds
    np.testing.assert_array_equal(loaded.positions, trace.positions)


@pytest.mark.parametrize("old", sorted(OLD_KINDS))
def test_a_zoo_trace_naming_the_old_kind_keeps_it(old, request, tmp_path):
    trace = request.getfixturevalue(OLD_KINDS[old][0]).trace(IDS, progress=False)
    path = _old_trace(trace, {**trace.meta, "format": "repo_lens"}, old).save(tmp_path / "zoo.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        loaded = Trace.load(path)
    assert loaded.layer_kinds == [old] * trace.n_layers
