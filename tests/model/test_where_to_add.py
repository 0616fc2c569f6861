"""Every place docs/architecture.md ("Where to add things") says a position mechanism goes holds every kind of
the registry that belongs there: a kind missing from one of them fails here, naming the place and the fix.
The places are written out below, independently of the registry, and the page must name each of them."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.registry import (
    DEFAULT_KIND, LOADERS, ZOO_ATTENTION, is_learned, kinds_in_attention, loader_kinds, mechanism_class,
    mechanism_kinds, mechanism_traits, recipe_kinds,
)

ROOT = Path(__file__).resolve().parents[2]
POSITIONS_PAGE = "docs/guide/positions.md"  # the mechanisms table: one row for every kind
INTERVENTIONS_PAGE = "docs/interventions.md"  # the edits table: every kind with an edit
HOOKS_PAGE = "docs/guide/hook-points.md"  # every hook a kind's edit writes (written from repo_lens/model/hook_shapes.py)
TRAINING_PAGE = "docs/guide/training.md"  # the recipe's table: every kind with a recipe
LOADER_PAGES = {"grape": "docs/guide/authors-checkpoints.md", "fox": "docs/guide/authors-checkpoints.md",
                "cope": "docs/guide/authors-checkpoints.md", "increments_post": "docs/guide/authors-checkpoints.md",
                "repo_authors": "docs/guide/checkpoints.md"}
# the files "Where to add things" lists for a mechanism (each must exist, and the page must name it)
PLACES = ["repo_lens/model/mechanisms.json", POSITIONS_PAGE, INTERVENTIONS_PAGE,
          HOOKS_PAGE, "repo_lens/model/hook_shapes.py", TRAINING_PAGE, "repo_lens/train/reposition.py",
          "repo_lens/plots/style.py", "repo_lens/model/authors/", "repo_lens/model/loaders/",
          "docs/guide/authors-checkpoints.md", "docs/guide/checkpoints.md", "tests/interventions/helpers.py", "tests/model/test_where_to_add.py", "CHANGELOG.md"]


def _table_kinds(page: str, header: str) -> set[str]:
    """The backticked names in the first cell of each row of the markdown table whose header row starts ``header``."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(header))
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:])
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_the_architecture_page_lists_every_place_a_mechanism_goes():
    section = (ROOT / "docs/architecture.md").read_text(encoding="utf-8").split("**A position mechanism**")[1]
    section = section.split("\n**An analyzer**")[0]
    for place in PLACES:
        assert (ROOT / place).exists(), f"{place} is gone: update PLACES and docs/architecture.md"
        assert f"`{place}`" in section, f"docs/architecture.md's 'Where to add things' does not name {place}"


def test_the_positions_page_has_one_row_for_every_kind():
    documented = _table_kinds(POSITIONS_PAGE, "| layer kind |")
    missing = [kind for kind in mechanism_kinds() if kind not in documented]
    assert not missing, f"{POSITIONS_PAGE}: add a row for {missing} to the table of layer kinds"
    assert documented <= set(mechanism_kinds()), f"{POSITIONS_PAGE} names kinds the registry lacks: " \
                                                 f"{sorted(documented - set(mechanism_kinds()))}"


def test_the_interventions_page_names_every_kind_with_an_edit():
    documented = _table_kinds(INTERVENTIONS_PAGE, "| kinds |")
    edited = {kind for kind in mechanism_kinds() if mechanism_traits(kind).edit}
    assert edited <= documented, f"{INTERVENTIONS_PAGE}: add {sorted(edited - documented)} to the table of edits"
    assert documented <= set(mechanism_kinds())
    hooks = (ROOT / HOOKS_PAGE).read_text(encoding="utf-8")
    undocumented = {kind: mechanism_traits(kind).edit["hook"] for kind in edited
                    if f"`blocks.{{l}}.{mechanism_traits(kind).edit['hook']}`" not in hooks}
    assert not undocumented, (f"{HOOKS_PAGE} lacks the hooks these kinds edit: {undocumented}; declare them in "
                              "repo_lens/model/hook_shapes.py and run python docs/hook_table.py")


def test_every_kind_has_a_colour_of_its_own():
    from repo_lens.plots.style import KIND_PALETTE, kind_color

    kinds = mechanism_kinds()
    assert len(KIND_PALETTE) >= len(kinds), (f"repo_lens/plots/style.py: KIND_PALETTE has {len(KIND_PALETTE)} "
                                             f"colours for {len(kinds)} kinds; add a colour-blind-safe one")
    assert len({kind_color(kind) for kind in kinds}) == len(kinds)


def _base() -> torch.nn.Module:
    from repo_lens.model import LensModel, ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(family="llama", vocab_size=64, d_model=32, n_layers=3, n_heads=4, d_mlp=32,
                      layer_mechanisms=["rope"] * 3, max_position_embeddings=64)
    return LensModel(cfg).eval()


@pytest.mark.parametrize("kind", recipe_kinds())
def test_the_recipe_starts_every_kind_with_the_recipe_trait_as_the_base(kind):
    from repo_lens.train.reposition import RECIPE_KINDS, recipe_config, repositioned_model

    assert sorted(RECIPE_KINDS) == sorted(recipe_kinds()) and RECIPE_KINDS[0] == DEFAULT_KIND
    assert f"| `{kind}` |" in (ROOT / TRAINING_PAGE).read_text(encoding="utf-8"), \
        f"{TRAINING_PAGE}: add a row for {kind} to the recipe's table of mechanisms"
    assert mechanism_traits(kind).role == "rotary", "the recipe rotates the base's q and k at the new positions"
    base = _base()
    model = repositioned_model(base, recipe_config(kind, first_layer=1)).eval()
    ids = torch.arange(1, 17)[None]
    with torch.no_grad():
        difference = (model(ids) - base(ids)).abs().max().item()
    if kind == DEFAULT_KIND:  # RePo starts at random positions, then anneals from the index
        assert difference > 1e-3
    else:  # every other kind starts as the base: RoPE kept, or its module at the index
        assert difference < 1e-3, f"train --base --mechanism {kind} does not start as the base ({difference:.2e})"
        assert not is_learned(kind) or any(hasattr(module, "start_at_integers") or hasattr(module, "start_as_post")
                                           for module in model.modules())


def _produced(loader: str) -> set[str]:
    """The kinds ``loader`` can give a layer, from its own tables and functions."""
    if loader == "grape":
        from repo_lens.model.loaders.grape.config import KINDS

        return set(KINDS.values())
    if loader == "fox":
        from repo_lens.model.loaders.fox.config import fox_model_config

        configs = [{"fgate_type": gate, "use_rope": rope} for gate in ("full", "none") for rope in (False, True)]
        return {fox_model_config({"hidden_size": 16, "num_heads": 2, "num_hidden_layers": 1, "vocab_size": 8,
                                  **config}).layer_mechanisms[0] for config in configs}
    if loader == "cope":
        from repo_lens.model.loaders.cope.options import POS_EMBS, layer_kinds

        kinds: set[str] = set()
        for pos_emb, every in itertools.product(POS_EMBS, (1, 2)):
            try:
                kinds.update(layer_kinds({"pos_emb": pos_emb, "cope_layers": every}, 4))
            except CheckpointError:  # a combination their code refuses
                pass
        return kinds
    if loader == "increments_post":
        from repo_lens.model.grafted_increments import GraftIncrementPositions
        from repo_lens.model.loaders.increments_post.config import POS_ENCODINGS, PostVariant, layer_kind

        variants = itertools.product(POS_ENCODINGS, (False, True), (False, True), (None, "shared", "per_head"))
        return {layer_kind(PostVariant(encoding, per_layer, per_head, "none", frozen))
                for encoding, per_layer, per_head, frozen in variants} | {GraftIncrementPositions.kind}
    from repo_lens.model.loaders.hf.config import HF_BASE_MECHANISM
    from repo_lens.model.loaders.repo_authors.pe_config import INTEGER_POSITION_MODES, MODE_MECHANISMS, read_pe_config

    modes = [*MODE_MECHANISMS, *INTEGER_POSITION_MODES]
    return {kind for mode in modes for kind in read_pe_config(
        {"dynamic_pe_mode": mode, "dynmaic_pe_start_layer": 1}, 2, 64, 4, HF_BASE_MECHANISM).layer_mechanisms}


@pytest.mark.parametrize("loader", LOADERS)
def test_each_loader_of_other_code_produces_the_kinds_its_traits_name(loader):
    produced = _produced(loader)
    assert produced == set(loader_kinds(loader)), (
        f"the {loader} loader gives layers {sorted(produced)}, the registry's 'loaders' traits say "
        f"{sorted(loader_kinds(loader))}: add {loader!r} to the traits of {sorted(produced - set(loader_kinds(loader)))} "
        f"in repo_lens/model/mechanisms.json (or remove it from {sorted(set(loader_kinds(loader)) - produced)})")
    attention = {"grape": "authors", "fox": "authors", "cope": "cope"}.get(loader, ZOO_ATTENTION)
    assert produced <= set(kinds_in_attention(attention)), \
        f"the {loader} loader's models run in the {attention} attention: give these kinds an attention_modules entry"
    for kind in produced:
        assert mechanism_class(kind, attention).kind == kind
    page = (ROOT / LOADER_PAGES[loader]).read_text(encoding="utf-8")
    undocumented = sorted(kind for kind in produced if f"`{kind}`" not in page)
    assert not undocumented, f"{LOADER_PAGES[loader]}: name {undocumented} in the {loader} loader's table"
