"""The mechanism registry: every kind builds its module, the traits agree with the modules, and what
the rest of the toolkit asks of it (learned layers, layer kinds, trace settings, colours) follows."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_lens.errors import CheckpointError
from repo_lens.model import POSITION_MECHANISMS, LensModel, ModelConfig
from repo_lens.model import registry
from repo_lens.model.registry import (
    MechanismTraits, build_position_mechanism, default_layer_kinds, is_learned, kind_index, learned_layers,
    mechanism_class, mechanism_kinds, mechanism_traits, recorded_settings, register,
)
from repo_lens.plots.style import kind_color

# the mechanisms of the sources, in registration order (others may be registered after or between them)
ALL_KINDS = ["rope", "nope", "repo", "lpi", "lpi-layer", "grape-m", "fox", "cope", "grape-ap", "alibi"]


def config(kinds) -> ModelConfig:
    return ModelConfig(family="olmo2", vocab_size=16, d_model=32, n_layers=len(kinds), n_heads=4, d_mlp=16,
                       layer_mechanisms=list(kinds))


def test_the_registry_holds_every_mechanism_in_order():
    kinds = mechanism_kinds()
    assert [kind for kind in kinds if kind in ALL_KINDS] == ALL_KINDS and kinds[0] == "rope"
    assert list(POSITION_MECHANISMS) == kinds and len(POSITION_MECHANISMS) == len(kinds)
    assert "alibi" in POSITION_MECHANISMS and "rotary" not in POSITION_MECHANISMS
    assert [kind_index(kind) for kind in kinds] == list(range(len(kinds)))
    assert kind_index("not-a-kind") == len(kinds)


@pytest.mark.parametrize("kind", mechanism_kinds())
def test_every_kind_builds_a_module_whose_kind_and_role_match_its_traits(kind):
    traits = mechanism_traits(kind)
    attention = registry.attentions_of(kind)[0]  # the zoo's, but for a kind only an authors' attention runs
    family = registry.block_families(kind)[0]
    module = build_position_mechanism(kind, ModelConfig(**{**config([kind]).to_dict(), "family": family}), attention)
    assert type(module) is mechanism_class(kind, attention) is POSITION_MECHANISMS[kind]
    assert module.kind == traits.kind == kind
    assert module.role == traits.role
    assert traits.label and traits.bias and traits.positions
    assert hasattr(module, "hook_delta") == (traits.increments is not None)
    if traits.biases_logits:  # attention_mass asks these of every mechanism that biases the logits
        assert callable(module.query_rows_bias) and isinstance(module.row_bias_hooks, tuple)


def test_learned_and_fixed_kinds():
    assert [kind for kind in ALL_KINDS if not is_learned(kind)] == ["rope", "nope", "alibi"]
    assert is_learned("from-a-foreign-trace")  # unknown kinds are not assumed to be fixed
    assert learned_layers(["rope", "nope", "repo", "alibi", "cope"]) == [2, 4]
    assert learned_layers([]) == []


def test_unknown_kinds_are_refused_with_the_supported_ones_named():
    with pytest.raises(CheckpointError, match=r"unknown position mechanism 'rotary'; supported: rope, nope"):
        build_position_mechanism("rotary", config(["rope"]))
    with pytest.raises(CheckpointError, match="unknown position mechanism"):
        default_layer_kinds("rotary", 3)
    with pytest.raises(KeyError, match="supported: rope"):
        mechanism_traits("rotary")
    with pytest.raises(KeyError):
        POSITION_MECHANISMS["rotary"]


def test_default_layer_kinds_keep_rope_below_a_third_only_for_repo():
    assert default_layer_kinds("repo", 6) == ["rope", "rope", "repo", "repo", "repo", "repo"]  # ⌈6/3⌉ = 2
    assert default_layer_kinds("repo", 4, first_layer=1) == ["rope", "repo", "repo", "repo"]
    for kind in ALL_KINDS:
        if kind != "repo":
            assert default_layer_kinds(kind, 3) == [kind] * 3


def test_recorded_settings_are_those_of_the_kinds_present():
    assert recorded_settings(config(["rope", "nope", "fox", "alibi"])) == {}
    cfg = config(["rope", "lpi-layer", "cope", "repo"])
    assert recorded_settings(cfg) == {"lpi_hidden": 8, "lpi_max_delta": 10.0, "cope_max_position": 64,
                                      "d_position": 4}  # d_model // 4, default bound, default p_max, d_model // 8


def test_a_registered_mechanism_is_known_everywhere_without_other_edits(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))
    register(MechanismTraits(kind="rope-copy", role="rotary", learned=False, bias="as RoPE", positions="as RoPE",
                             label="RoPE (copy)", module="repo_lens.model.positions.IntegerPositions"))
    assert mechanism_kinds()[-1] == "rope-copy" and "rope-copy" in POSITION_MECHANISMS
    assert not is_learned("rope-copy") and default_layer_kinds("rope-copy", 2) == ["rope-copy"] * 2
    assert build_position_mechanism("rope-copy", config(["rope"])).role == "rotary"
    assert kind_color("rope-copy") not in {kind_color(kind) for kind in mechanism_kinds()[:-1]}
    with pytest.raises(ValueError, match="role 'sideways'"):
        register(MechanismTraits(kind="odd", role="sideways", learned=True, bias="", positions="", label="",
                                 module="repo_lens.model.positions.IntegerPositions"))


# the class that runs the sources' kinds in the authors' attentions, written out by hand from their loaders and
# models (other kinds may run there too)
AUTHORS_CLASSES = {
    "authors": {"rope": "IntegerPositions", "nope": "ConstantPositions", "alibi": "AlibiPositions", "fox": "ForgetGates",
                "grape-a": "GatedRates", "grape-ap-rotated": "PathPotentials", "grape-m-context": "ContextPhases"},
    "cope": {"nope": "ConstantPositions", "cope": "GatedCope", "rel": "RelativePositions"},
}


@pytest.mark.parametrize("attention", sorted(AUTHORS_CLASSES))
def test_each_authors_attention_runs_its_kinds_with_the_module_the_registry_names(attention):
    classes = AUTHORS_CLASSES[attention]
    assert set(classes) <= set(registry.kinds_in_attention(attention))
    family = ModelConfig(family=attention, vocab_size=16, d_model=32, n_layers=1, n_heads=4, d_mlp=16,
                         layer_mechanisms=["nope"])
    for kind in registry.kinds_in_attention(attention):
        module = build_position_mechanism(kind, family, attention=attention)
        assert type(module) is mechanism_class(kind, attention)
        assert type(module).__name__ == classes.get(kind, type(module).__name__)
        assert module.kind == kind and module.role == mechanism_traits(kind).role
        assert hasattr(module, "hook_delta") == (mechanism_traits(kind).increments is not None)


def test_an_attention_refuses_a_kind_it_does_not_run():
    with pytest.raises(CheckpointError, match=r"layer kind 'repo' does not run in the GRAPE and FoX authors' "
                                              r"attention .*; it runs rope, nope, fox"):
        mechanism_class("repo", attention="authors")
    with pytest.raises(CheckpointError, match="unknown attention 'sideways'"):
        mechanism_class("fox", attention="sideways")
    with pytest.raises(ValueError, match=r"attention_modules names \['zoo'\]"):
        register(MechanismTraits(kind="odd", role="rotary", learned=False, bias="", positions="", label="",
                                 module="repo_lens.model.positions.IntegerPositions",
                                 attention_modules={"zoo": "repo_lens.model.positions.IntegerPositions"}))


# the kinds that the zoo's attention cannot run, and the attentions that do, written out by hand (the GRAPE
# authors' GRAPE-AP reads the layer input, which the zoo's attention does not hand a mechanism)
NOT_IN_THE_ZOO = {"grape-ap-rotated": ["authors"]}


def test_a_kind_only_an_authors_attention_runs_is_refused_by_the_zoo_and_built_in_its_family():
    assert {kind: registry.attentions_of(kind) for kind in mechanism_kinds()
            if kind not in registry.kinds_in_attention("zoo")} == NOT_IN_THE_ZOO
    assert registry.attentions_of("grape-ap") == ["zoo"]  # the zoo's equation: the authors' attention runs the other
    assert registry.attentions_of("fox") == ["zoo", "authors"] and registry.block_families("grape-ap-rotated") == [
        "authors"]
    with pytest.raises(CheckpointError, match=r"layer kind 'grape-ap-rotated' does not run in the zoo's attention "
                                              r"(.|\n)*'grape-ap-rotated' runs in the GRAPE and FoX authors' attention "
                                              r"\(block family authors\): build its model of block family 'authors'"):
        LensModel(config(["rope", "grape-ap-rotated"]))
    with pytest.raises(CheckpointError, match=r"layer kind 'grape-ap' does not run in the GRAPE and FoX authors'"):
        mechanism_class("grape-ap", attention="authors")  # (a config of family authors reads it as grape-ap-rotated)
    model = LensModel(ModelConfig(**{**config(["rope", "grape-ap-rotated"]).to_dict(), "family": "authors"}))
    assert type(model.blocks[1].attn.mechanism).__name__ == "PathPotentials"
    assert registry.family_attention("olmo2") == registry.family_attention("llama") == "zoo"


def test_the_attentions_trait_must_name_known_attentions_each_with_its_module():
    base = dict(role="rotary", learned=False, bias="", positions="", label="",
                module="repo_lens.model.positions.IntegerPositions")
    with pytest.raises(ValueError, match=r"attentions \['sideways'\] are not attentions"):
        register(MechanismTraits(kind="odd", attentions=("sideways",), **base))
    with pytest.raises(ValueError, match=r"disagree; give each authors' attention that runs the kind its module"):
        register(MechanismTraits(kind="odd", attentions=("authors",), **base))
    with pytest.raises(ValueError, match="disagree"):
        register(MechanismTraits(kind="odd", attentions=("zoo",), attention_modules={"cope": base["module"]}, **base))
    assert "odd" not in mechanism_kinds()


def test_the_deprecated_authors_builder_asks_the_registry():
    from repo_lens.model.authors.mechanisms import build_authors_mechanism

    cfg = ModelConfig(family="authors", vocab_size=16, d_model=32, n_layers=1, n_heads=4, d_mlp=16,
                      layer_mechanisms=["fox"])
    with pytest.warns(DeprecationWarning, match=r"build_position_mechanism\(kind, cfg, attention='authors'\)"):
        module = build_authors_mechanism("fox", cfg)
    assert type(module).__name__ == "ForgetGates"


def test_the_recipe_kinds_are_those_with_the_recipe_trait():
    # what train --base converts to (the docs' table)
    sources = ["rope", "repo", "lpi-layer", "grape-m", "lpi-resid", "lpi-graft"]
    assert [kind for kind in registry.recipe_kinds() if kind in sources] == sources
    assert registry.recipe_kinds() == [kind for kind in mechanism_kinds() if mechanism_traits(kind).recipe]
    assert not set(registry.recipe_kinds()) & {"nope", "fox", "cope", "grape-ap", "alibi", "grape-m-context",
                                               "grape-ap-rotated"}


def test_asking_the_registry_does_not_import_torch():
    code = ("import sys; from repo_lens.model.registry import mechanism_kinds, is_learned; "
            "from repo_lens.plots.style import kind_color; kind_color(mechanism_kinds()[0]); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
