"""The hook-shape table (repo_lens.model.hook_shapes) against the models: every hook of a model of every
registered kind, of each decay and of the authors' attentions is a row of the table, takes the row's shape with
the sizes of its config, and every row is a hook of some model; each HookPoint is declared in the table only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.hook_shapes import (
    DIMENSIONS,
    HOOK_SHAPES,
    HOOKS,
    dimension_sizes,
    expected_shapes,
    mechanism_submodule,
    table_key,
)
from repo_lens.model.registry import ATTENTIONS, ZOO_ATTENTION, decay_names, kinds_in_attention, mechanism_kinds
from repo_lens.model.tiny import tiny_model

ROOT = Path(__file__).resolve().parents[2]
BATCH, TOKENS = 3, 6


def gqa_model(kind: str, family: str, decay: str = "none") -> LensModel:
    """Two layers (RoPE, then ``kind``) with grouped-query attention and every dimension a different size
    (batch 3, pos 6, head 4, kv_head 2, d_head 8, d_model 48, d_mlp 64, q_width 32, kv_width 16)."""
    torch.manual_seed(0)
    cfg = ModelConfig(family=family, vocab_size=64, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_mlp=64, layer_mechanisms=["rope", kind], decay=decay)
    return LensModel(cfg).eval()


def authors_model(kind: str, attention: str) -> torch.nn.Module:
    """A model of the GRAPE/FoX authors' blocks (``authors``) or of the CoPE authors' decoder (``cope``, with
    learned absolute position embeddings too), its last layer of ``kind``."""
    torch.manual_seed(0)
    if attention == "authors":
        cfg = ModelConfig(family="authors", vocab_size=64, d_model=48, n_layers=2, n_heads=4, head_dim=8, d_mlp=64,
                          layer_mechanisms=["rope", kind])
        return LensModel(cfg).eval()
    assert attention == "cope", f"no model of {attention}'s attention is built here; add one"
    from repo_lens.model.authors.cope_model import CopeModel

    cfg = ModelConfig(family="cope", vocab_size=64, d_model=48, n_layers=2, n_heads=4, head_dim=8, d_mlp=64,
                      layer_mechanisms=[kind, kind], extra={"authors": {"absolute": True}})
    return CopeModel(cfg).eval()


def checked_hooks(model: torch.nn.Module) -> set[str]:
    """Run ``model`` with every hook cached; check that every hook fired, is a row of the table and has the
    row's shape; return the rows seen."""
    model.set_use_attn_result(True)  # the heads' results are computed only when asked for
    mechanism = mechanism_submodule(model.blocks[-1].attn)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.randint(0, 64, (BATCH, TOKENS)))
    assert set(cache.keys()) == set(model.hook_dict)  # every hook fires (the pattern and the scales when asked for)
    sizes = dimension_sizes(model.cfg, BATCH, TOKENS)
    seen = set()
    for name, value in cache.items():
        key = table_key(name, mechanism)
        assert key in HOOK_SHAPES, f"{name} is not in the hook-shape table"
        shapes = expected_shapes(key, sizes)
        assert tuple(value.shape) in shapes, f"{name}: {tuple(value.shape)}, the table says {HOOK_SHAPES[key]}"
        if tuple(value.shape) != shapes[0]:  # the second shape: keys per query head where a group's positions differ
            assert cache[name.replace("hook_rot_k", "hook_pos")].stride(1) != 0, name
        seen.add(key)
    return seen


def test_the_dimensions_of_the_table_are_the_ones_sized_from_a_config():
    cfg = gqa_model("rope", "llama").cfg
    assert set(dimension_sizes(cfg, BATCH, TOKENS)) == set(DIMENSIONS)
    assert {dim for hook in HOOKS for dim in hook.shape + hook.also} <= set(DIMENSIONS)
    assert len(HOOK_SHAPES) == len(HOOKS)  # one row per name


AUTHORS_ATTENTIONS = [attention for attention in ATTENTIONS if attention != ZOO_ATTENTION]


@pytest.mark.parametrize("kind", mechanism_kinds())
def test_a_tiny_model_of_every_kind_has_the_tables_shapes(kind):
    """A tiny model of every registered kind, in each attention that runs it (the zoo's: ``tiny_model``)."""
    built = 0
    if kind in kinds_in_attention(ZOO_ATTENTION):
        checked_hooks(tiny_model(kind))
        built += 1
    for attention in AUTHORS_ATTENTIONS:
        if kind in kinds_in_attention(attention):
            checked_hooks(authors_model(kind, attention))
            built += 1
    assert built, f"no attention runs {kind}"


def test_every_row_is_a_hook_of_some_model_with_its_shape():
    """GQA models of both block families for every kind, each decay, and the authors' attentions with each kind
    they run: every hook is in the table with its shape, and together they cover every row."""
    seen = set()
    for family in ("olmo2", "llama"):
        for kind in kinds_in_attention(ZOO_ATTENTION):
            seen |= checked_hooks(gqa_model(kind, family))
        for decay in decay_names():
            seen |= checked_hooks(gqa_model("lpi-head", family, decay))
    for attention in AUTHORS_ATTENTIONS:
        for kind in kinds_in_attention(attention):
            seen |= checked_hooks(authors_model(kind, attention))
    assert seen == set(HOOK_SHAPES), f"rows no model has: {sorted(set(HOOK_SHAPES) - seen)}"


def hook_point_attributes() -> list[tuple[str, int, str, str]]:
    """(file, line, attribute, the line's text) of every ``self.NAME = HookPoint()`` in repo_lens/model, and of every
    ``NAME: HookPoint`` a class declares (the attention layers' shared hooks, made by ``add_attention_hooks``)."""
    found = []
    for path in sorted((ROOT / "repo_lens" / "model").rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "HookPoint"):
                for target in node.targets:
                    if isinstance(target, ast.Attribute):
                        found.append((path.name, node.lineno, target.attr, lines[node.lineno - 1]))
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and getattr(node.annotation, "id", None) == "HookPoint"):
                found.append((path.name, node.lineno, node.target.id, lines[node.lineno - 1]))
    return found


def test_each_hook_point_is_declared_with_its_shape_in_the_table_only():
    """Each HookPoint attribute of the model's modules names a row of the table, and carries no shape of its own."""
    declared = hook_point_attributes()
    assert len(declared) >= 30
    names = {key.rsplit(".", 1)[-1] for key in HOOK_SHAPES}
    for file, line, attribute, text in declared:
        assert attribute in names, f"{file}:{line}: {attribute} has no row in repo_lens.model.hook_shapes.HOOKS"
        assert "# [" not in text, f"{file}:{line}: a shape beside the HookPoint; the table holds it"
