"""The position-mechanism registry: what each kind is, and everything the rest of the toolkit may ask of it.

Code outside ``repo_lens.model`` never names a mechanism kind; it asks this registry (is a layer's
position learned, how does it bias attention, how is ``positions`` derived for display, which
settings does a trace record, which colour slot does it take in figures). It is also the one table from
a kind to its module, in each attention that runs it: the zoo's (``module``) and the authors' attentions
(``attention_modules``; :func:`mechanism_class`). Adding a mechanism means: its module (an ``nn.Module``
with ``kind`` and ``role``), one entry in ``mechanisms.json`` beside this file (the fields of
:class:`MechanismTraits` but ``kind``, which is the entry's key), and its tests; docs/architecture.md
lists every place a new kind goes, and :func:`register` adds one at run time.

The same file's ``"decays"`` section declares the decays (:class:`DecayTraits`): a recency bias a model
computes once from its token embeddings and adds to the scores of every layer, on top of the rotation
(``ModelConfig.decay``; "none" for none).

The table is plain data, so traces, figures and the app can ask it without importing torch; a
mechanism's module is imported when a layer of that kind is first built (:func:`mechanism_class`).

Example:
    >>> from repo_lens.model.registry import is_learned, learned_layers, mechanism_traits
    >>> is_learned("rope"), is_learned("repo")
    (False, True)
    >>> learned_layers(["rope", "rope", "repo"])
    [2]
    >>> mechanism_traits("repo").role
    'rotary'
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig, repo_start_layer
from repo_lens.model.mechanism_table import DECAYS_SECTION, TABLE_FILE, read_table

if TYPE_CHECKING:
    from torch import nn

Role = Literal["rotary", "additive", "contextual"]
ROLES: tuple[str, ...] = ("rotary", "additive", "contextual")
BUILTINS_FILE: Path = TABLE_FILE  # the built-in mechanisms' traits, one entry each
ZOO_ATTENTION = "zoo"  # the attention of the zoo's block families (olmo2, llama): a kind's ``module`` runs there
# (unless its ``attentions`` trait leaves the zoo's out)
# the attentions that run position mechanisms, by the name ``attention_modules`` and mechanism_class use
ATTENTIONS: dict[str, str] = {
    ZOO_ATTENTION: "the zoo's attention (block families olmo2 and llama)",
    "authors": "the GRAPE and FoX authors' attention (block family authors)",
    "cope": "the CoPE authors' attention (block family cope)",
}
# the block families (ModelConfig.family) whose models run each attention, the first the one tiny models take
ATTENTION_FAMILIES: dict[str, tuple[str, ...]] = {ZOO_ATTENTION: ("olmo2", "llama"), "authors": ("authors",),
                                                  "cope": ("cope",)}
# the loaders of checkpoints that other code trained (sub-packages of repo_lens/model/loaders/), by the name
# the ``loaders`` trait uses
LOADERS: tuple[str, ...] = ("grape", "fox", "cope", "increments_post", "repo_authors")


@dataclass(frozen=True)
class MechanismTraits:
    """What a position mechanism is.

    kind: the name used in configs, traces (``layer_kinds``) and the CLI.
    role: "rotary" (rotates q and k at ``positions``; the logits are q·k/√d of the rotated q and k),
        "additive" (adds ``key_position − query_position`` to the logits, e.g. FoX), or
        "contextual" (the bias depends on every query-key pair, e.g. CoPE). The module's ``role``.
    learned: False for fixed positions (e.g. RoPE's index, NoPE's constant); True when positions
        come from the model's weights.
    bias: one line on how the mechanism changes the attention logits.
    positions: one line on what ``Trace.positions`` holds for a layer of this kind.
    label: the human-readable name shown in figures and the app.
    module: dotted path of the ``nn.Module`` class that runs the kind in the zoo's attention (block families
        olmo2 and llama), e.g. ``"repo_lens.model.positions.RepoPositions"``; for a kind the zoo's attention
        does not run (``attentions``), the class of its equation (as ``attention_modules`` names it).
    increments: what the module publishes through ``hook_delta`` (and a trace stores in
        ``extras["increments"]``); None when it publishes none.
    settings: trace-meta key -> ``ModelConfig`` attribute, for the settings a trace records in
        ``meta["mechanism"]`` when a layer of this kind is present.
    upper_layers_only: the source keeps RoPE below layer ⌈L/3⌉ (RePo §3.2) instead of replacing the
        position encoding of every layer.
    edit: where and how ``repo_lens.interventions`` edits a layer's positions (see :class:`PositionEdit`):
        ``hook`` (the writable hook under ``blocks.{l}.``), ``integer`` (``"index"``: the token index
        0..T−1, or the value every entry takes so that each token adds one unit), ``constant`` (the value
        that leaves no positional signal), ``quantity`` (what the hook holds), ``pairwise`` (the hook is
        [batch, head, query_pos, key_pos] instead of [batch, head, pos]), ``sum`` (how the positions are
        summed from the quantity, for edits on the positions' own scale; see :class:`PositionEdit`).
    attention_modules: attention -> dotted path of the ``nn.Module`` class that runs the kind in one of the
        authors' attentions (``"authors"``: the GRAPE and FoX authors', ``"cope"``: the CoPE authors'; see
        :data:`ATTENTIONS`), with that code's parameter names and inputs; an attention not named here does not
        run the kind.
    attentions: the attentions that run the kind (:data:`ATTENTIONS`), where it is not the default, the zoo's
        and those ``attention_modules`` names: e.g. ``("authors",)`` for an equation that reads what only the
        authors' attention hands its mechanism (the layer input). Code that builds models of every kind asks
        :func:`attentions_of` (or :func:`kinds_in_attention`).
    loaders: the loaders of other code's checkpoints that produce layers of this kind (:data:`LOADERS`: the
        sub-packages of ``repo_lens.model.loaders``); repo_lens' own checkpoints hold any kind.
    recipe: what ``repo-lens train --base --mechanism KIND`` trains (the recipe that converts a pretrained RoPE
        model, :mod:`repo_lens.train.reposition`), in a few words; None where the recipe cannot start from it.
    recipe_fp32_vectors: the recipe ships the kind's position vectors (norm weights, biases) in fp32 in
        ``delta.safetensors``, its matrices in bf16 as the adapters: bf16 would round a vector's small steps away
        (a norm's weight near 1, the bias that sets every δ's level, whose error the running sum adds up), while a
        matrix's rounding errors are independent across its entries (on ``zoo:smollm2-135m-lpi``: positions within
        0.07 of the fp32 ones over 1,024 tokens, held-out loss within 1e-5 bits).
    formerly: the name this kind was written under before it had its own: ``kind`` (the old name), ``family``
        (the block family of the model configs that wrote it so) and ``format`` (the loader format,
        ``meta["format"]``, of the traces that did); read back, such kinds are renamed
        (:func:`repo_lens.model.mechanism_table.current_kinds`).
    """

    kind: str
    role: Role
    learned: bool
    bias: str
    positions: str
    label: str
    module: str
    increments: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    upper_layers_only: bool = False
    edit: Mapping[str, object] = field(default_factory=dict)
    attention_modules: Mapping[str, str] = field(default_factory=dict)
    attentions: tuple[str, ...] = ()
    loaders: tuple[str, ...] = ()
    recipe: str | None = None
    recipe_fp32_vectors: bool = False
    formerly: Mapping[str, str] = field(default_factory=dict)

    @property
    def biases_logits(self) -> bool:
        """Whether the logits are more than q·k/√d of the hooked (rotated) q and k."""
        return self.role != "rotary"


@dataclass(frozen=True)
class PositionEdit:
    """How a mechanism's positions are made "integer" (one unit per token, as RoPE has them) or
    "constant" (no positional signal, NoPE-like): the hook to write and the values to write there.

    hook: the hook under ``blocks.{l}.``, e.g. ``"attn.hook_pos"``.
    integer: the value of every entry for integer positions; None: the token index t = 0..T−1.
    constant: the value of every entry for a constant position.
    quantity: what the hook holds, in words.
    pairwise: the hook holds [batch, head, query_pos, key_pos] (e.g. CoPE's gates), not [batch, head, pos].
    sum: how positions follow from the quantity q: "none" (q is the positions), "inclusive" (Σ_{s≤t} q_s),
        "exclusive" (Σ_{s<t} q_s), "suffix" (pairwise, Σ_{j≤s≤i} q_is), "suffix_exclusive" (Σ_{j<s≤i} q_is).
    """

    hook: str
    integer: float | None
    constant: float
    quantity: str
    pairwise: bool = False
    sum: str = "none"


@dataclass(frozen=True)
class DecayTraits:
    """What a decay is (``ModelConfig.decay``): a bias A_i − A_j added to every layer's q·k/√d, with
    A_t = Σ_{s≤t} log α_s per head, log α ≤ 0 computed once from the token embeddings.

    name: the value of ``ModelConfig.decay`` and of ``repo-lens train --decay``.
    label: the human-readable name.
    learned: whether log α comes from the model's weights (else it is fixed, e.g. ALiBi's slopes).
    bias: the equation, in words.
    module: dotted path of its ``nn.Module`` class (``LensModel.decay``), whose ``log_forget(embedded)``
        gives log α [batch, head, pos].
    hook: the model's hook that holds log α (write it to change the decay; zeros: no decay).
    quantity: what that hook holds, in words.
    settings: trace-meta key -> ``ModelConfig`` attribute, recorded in ``meta["mechanism"]`` beside ``decay``.
    """

    name: str
    label: str
    learned: bool
    bias: str
    module: str
    hook: str
    quantity: str
    settings: Mapping[str, str] = field(default_factory=dict)


_REGISTRY: dict[str, MechanismTraits] = {}
_CLASSES: dict[tuple[str, str], type] = {}  # (kind, attention) -> its module's class, imported on first use
_DECAYS: dict[str, DecayTraits] = {}
NO_DECAY = "none"  # ModelConfig.decay of a model without a decay

ROPE_KIND = "rope"  # integer positions: the kind of every layer of a plain RoPE model
NOPE_KIND = "nope"  # a constant position: the kind of RoPE-free layers
DEFAULT_KIND = "repo"  # the toolkit's first citizen, RePo: the default of training and the CLI


def register(traits: MechanismTraits) -> MechanismTraits:
    """Add (or replace) a mechanism's traits; returns them.

    >>> register(mechanism_traits("rope")).label
    'RoPE'
    """
    if traits.role not in ROLES:
        raise ValueError(f"mechanism {traits.kind!r}: role {traits.role!r} is not one of {ROLES}")
    authors_attentions = set(ATTENTIONS) - {ZOO_ATTENTION}
    unknown = sorted(set(traits.attention_modules) - authors_attentions)
    if unknown:
        raise ValueError(f"mechanism {traits.kind!r}: attention_modules names {unknown}; it names the authors' "
                         f"attentions {sorted(authors_attentions)} (the zoo's attention runs 'module')")
    _check_attentions(traits)
    if set(traits.loaders) - set(LOADERS):
        raise ValueError(f"mechanism {traits.kind!r}: loaders {sorted(set(traits.loaders) - set(LOADERS))} are not "
                         f"loaders of other code's checkpoints {LOADERS}")
    _REGISTRY[traits.kind] = traits
    for attention in ATTENTIONS:
        _CLASSES.pop((traits.kind, attention), None)
    return traits


def _check_attentions(traits: MechanismTraits) -> None:
    """``traits.attentions`` names known attentions, and an authors' attention among them has its module."""
    if not traits.attentions:
        return
    if set(traits.attentions) - set(ATTENTIONS):
        raise ValueError(f"mechanism {traits.kind!r}: attentions {sorted(set(traits.attentions) - set(ATTENTIONS))} "
                         f"are not attentions that run mechanisms {list(ATTENTIONS)}")
    moduleless = sorted(set(traits.attentions) - {ZOO_ATTENTION} - set(traits.attention_modules))
    unlisted = sorted(set(traits.attention_modules) - set(traits.attentions))
    if moduleless or unlisted:
        raise ValueError(f"mechanism {traits.kind!r}: attentions {list(traits.attentions)} and attention_modules "
                         f"{sorted(traits.attention_modules)} disagree; give each authors' attention that runs the "
                         "kind its module in attention_modules, and list every attention_modules entry in attentions")


def _register_builtins() -> None:
    table = read_table()
    for name, entry in table.pop(DECAYS_SECTION, {}).items():
        _DECAYS[name] = DecayTraits(name=name, **entry)
    for kind, entry in table.items():
        register(MechanismTraits(kind=kind, **{**entry, "loaders": tuple(entry.get("loaders", ())),
                                               "attentions": tuple(entry.get("attentions", ()))}))


_register_builtins()


def _unknown(kind: str) -> CheckpointError:
    return CheckpointError(f"unknown position mechanism {kind!r}; supported: {', '.join(_REGISTRY)}")


def mechanism_kinds() -> list[str]:
    """Every registered kind, in registration order.

    >>> mechanism_kinds()[:3]
    ['rope', 'nope', 'repo']
    """
    return list(_REGISTRY)


def mechanism_traits(kind: str) -> MechanismTraits:
    """The traits of ``kind``; unknown kinds raise ``KeyError`` naming the supported ones.

    >>> mechanism_traits("nope").learned
    False
    """
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(str(_unknown(kind))) from None


def is_learned(kind: str) -> bool:
    """Whether a layer of this kind learns its positions (unknown kinds, e.g. from a foreign trace, count as learned).

    >>> is_learned("nope"), is_learned("fox")
    (False, True)
    """
    traits = _REGISTRY.get(kind)
    return True if traits is None else traits.learned


def position_edit(kind: str) -> PositionEdit:
    """Where and how interventions make a layer of ``kind`` integer or constant (its ``edit`` trait);
    a kind that declares none raises KeyError.

    >>> position_edit("repo").hook, position_edit("repo").integer, position_edit("fox").integer
    ('attn.hook_pos', None, 1.0)
    """
    edit: dict[str, Any] = dict(mechanism_traits(kind).edit)
    if not edit:
        raise KeyError(f"position mechanism {kind!r} declares no edit (its traits' 'edit'); interventions cannot "
                       "change its positions")
    integer = edit.pop("integer")
    return PositionEdit(integer=None if integer == "index" else float(integer), **edit)


def learned_layers(kinds: Iterable[str]) -> list[int]:
    """Indices of the layers whose positions are learned.

    >>> learned_layers(["rope", "nope", "fox"])
    [2]
    """
    return [layer for layer, kind in enumerate(kinds) if is_learned(kind)]


def kind_index(kind: str) -> int:
    """A stable slot for ``kind`` (registration order; unknown kinds after all known ones).

    >>> kind_index("rope"), kind_index("no-such-kind") == len(mechanism_kinds())
    (0, True)
    """
    kinds = mechanism_kinds()
    return kinds.index(kind) if kind in kinds else len(kinds)


def default_layer_kinds(kind: str, n_layers: int, first_layer: int | None = None) -> list[str]:
    """Per-layer kinds of a model built around ``kind``: mechanisms whose source keeps RoPE in the lower
    layers start at ``first_layer`` (default ⌈L/3⌉); every other kind takes every layer.

    >>> default_layer_kinds("repo", 4), default_layer_kinds("fox", 2)
    (['rope', 'rope', 'repo', 'repo'], ['fox', 'fox'])
    """
    if kind not in _REGISTRY:
        raise _unknown(kind)
    if not _REGISTRY[kind].upper_layers_only:
        return [kind] * n_layers
    start = repo_start_layer(n_layers) if first_layer is None else first_layer
    return [ROPE_KIND if layer < start else kind for layer in range(n_layers)]


def recorded_settings(cfg: ModelConfig) -> dict[str, object]:
    """The settings of the mechanisms ``cfg``'s layers use, as a trace records them (``traits.settings``),
    and the model's decay with its settings where it has one.

    >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=32, n_layers=2, n_heads=4, d_mlp=8,
    ...                   layer_mechanisms=["rope", "repo"])
    >>> recorded_settings(cfg)
    {'d_position': 4}
    >>> recorded_settings(ModelConfig(**{**cfg.to_dict(), "decay": "forget"}))
    {'d_position': 4, 'decay': 'forget', 'decay_hidden': 8}
    """
    settings: dict[str, object] = {}
    for kind in dict.fromkeys(cfg.layer_mechanisms):
        for key, attribute in mechanism_traits(kind).settings.items():
            settings[key] = getattr(cfg, attribute)
    if cfg.decay != NO_DECAY:
        settings["decay"] = cfg.decay
        for key, attribute in decay_traits(cfg.decay).settings.items():
            settings[key] = getattr(cfg, attribute)
    return settings


def attentions_of(kind: str) -> list[str]:
    """The attentions that run ``kind`` (:data:`ATTENTIONS`; its ``attentions`` trait, by default the zoo's and
    those its ``attention_modules`` names); CheckpointError for an unknown kind.

    >>> attentions_of("fox"), attentions_of("grape-ap-rotated")
    (['zoo', 'authors'], ['authors'])
    """
    if kind not in _REGISTRY:
        raise _unknown(kind)
    traits = _REGISTRY[kind]
    return list(traits.attentions) if traits.attentions else [ZOO_ATTENTION, *traits.attention_modules]


def kinds_in_attention(attention: str) -> list[str]:
    """The kinds that ``attention`` runs (:data:`ATTENTIONS`), in registration order.

    >>> kinds_in_attention("cope")
    ['nope', 'cope', 'rel']
    >>> "grape-ap-rotated" in kinds_in_attention("zoo"), "grape-ap-rotated" in kinds_in_attention("authors")
    (False, True)
    """
    if attention not in ATTENTIONS:
        raise CheckpointError(f"unknown attention {attention!r}; the attentions that run mechanisms: {list(ATTENTIONS)}")
    return [kind for kind in _REGISTRY if attention in attentions_of(kind)]


def family_attention(family: str) -> str:
    """The attention (:data:`ATTENTIONS`) that the models of block family ``family`` (``ModelConfig.family``) run.

    >>> family_attention("llama"), family_attention("authors")
    ('zoo', 'authors')
    """
    for attention, families in ATTENTION_FAMILIES.items():
        if family in families:
            return attention
    raise CheckpointError(f"unknown block family {family!r}; the families of the attentions: {ATTENTION_FAMILIES}")


def block_families(kind: str) -> list[str]:
    """The block families (``ModelConfig.family``) whose models run ``kind``, those of the zoo's attention first.

    >>> block_families("fox"), block_families("grape-ap-rotated")
    (['olmo2', 'llama', 'authors'], ['authors'])
    """
    return [family for attention in attentions_of(kind) for family in ATTENTION_FAMILIES[attention]]


def module_path(kind: str, attention: str = ZOO_ATTENTION) -> str:
    """Dotted path of the class that runs ``kind`` in ``attention``; CheckpointError for an unknown kind, or
    one that attention does not run (naming where the kind runs and the kinds that attention runs).

    >>> module_path("fox"), module_path("fox", attention="authors")
    ('repo_lens.model.additive.ForgetGatePositions', 'repo_lens.model.authors.forget_gates.ForgetGates')
    """
    runs_in = attentions_of(kind)
    if attention not in runs_in:
        kinds_in_attention(attention)  # an unknown attention is refused there
        raise CheckpointError(
            f"layer kind {kind!r} does not run in {ATTENTIONS[attention]}; it runs "
            f"{', '.join(kinds_in_attention(attention))}. {kind!r} runs in "
            f"{' and '.join(ATTENTIONS[name] for name in runs_in)}: build its model of block family "
            f"{block_families(kind)[0]!r}")
    if attention == ZOO_ATTENTION:
        return _REGISTRY[kind].module
    return _REGISTRY[kind].attention_modules[attention]


def mechanism_class(kind: str, attention: str = ZOO_ATTENTION) -> type[nn.Module]:
    """The ``nn.Module`` class that runs ``kind`` in ``attention`` (:data:`ATTENTIONS`; imported on first use);
    an unknown kind, or one the attention does not run, raises CheckpointError.

    >>> mechanism_class("rope").__name__, mechanism_class("grape-m-context", attention="authors").__name__
    ('IntegerPositions', 'ContextPhases')
    """
    key = (kind, attention)
    if key not in _CLASSES:
        module_name, class_name = module_path(kind, attention).rsplit(".", 1)
        _CLASSES[key] = getattr(importlib.import_module(module_name), class_name)
    return _CLASSES[key]


def build_position_mechanism(kind: str, cfg: ModelConfig, attention: str = ZOO_ATTENTION) -> nn.Module:
    """A layer's position mechanism in ``attention`` (the zoo's by default), built from ``cfg``.

    >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=32, n_layers=1, n_heads=4, d_mlp=8,
    ...                   layer_mechanisms=["fox"])
    >>> build_position_mechanism("fox", cfg).role
    'additive'
    """
    return mechanism_class(kind, attention)(cfg)


def recipe_kinds() -> list[str]:
    """The kinds ``repo-lens train --base`` converts a pretrained RoPE model to (those with a ``recipe``
    trait), in registration order.

    >>> recipe_kinds()
    ['rope', 'repo', 'lpi-layer', 'grape-m', 'lpi-resid', 'lpi-graft']
    """
    return [kind for kind, traits in _REGISTRY.items() if traits.recipe is not None]


def loader_kinds(loader: str) -> list[str]:
    """The kinds whose traits say ``loader`` (:data:`LOADERS`) produces them, in registration order.

    >>> loader_kinds("cope")
    ['nope', 'cope', 'rel']
    """
    if loader not in LOADERS:
        raise KeyError(f"unknown loader {loader!r}; the loaders of other code's checkpoints: {LOADERS}")
    return [kind for kind, traits in _REGISTRY.items() if loader in traits.loaders]


def decay_names() -> list[str]:
    """Every declared decay (``ModelConfig.decay`` takes one of them, or "none").

    >>> decay_names()
    ['alibi', 'forget']
    """
    return list(_DECAYS)


def decay_traits(name: str) -> DecayTraits:
    """The traits of decay ``name``; an unknown one is a CheckpointError naming the known ones.

    >>> decay_traits("forget").hook
    'hook_log_forget'
    """
    if name not in _DECAYS:
        raise CheckpointError(f"unknown decay {name!r}; expected {NO_DECAY!r} or one of {decay_names()}")
    return _DECAYS[name]


def build_decay(cfg: ModelConfig) -> nn.Module | None:
    """The model-level module of ``cfg.decay`` (``LensModel.decay``), None for "none".

    >>> cfg = ModelConfig(family="llama", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
    ...                   layer_mechanisms=["rope"], decay="forget")
    >>> type(build_decay(cfg)).__name__, build_decay(ModelConfig(**{**cfg.to_dict(), "decay": "none"}))
    ('ForgetDecay', None)
    """
    if cfg.decay == NO_DECAY:
        return None
    module_name, class_name = decay_traits(cfg.decay).module.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), class_name)(cfg)


class _MechanismClasses(Mapping):
    """kind -> nn.Module class (in the zoo's attention; a kind the zoo does not run: in the first attention that
    runs it), a live view of the registry (a class is imported when first looked up)."""

    def __getitem__(self, kind: str) -> type:
        if kind not in _REGISTRY:
            raise KeyError(kind)
        return mechanism_class(kind, attentions_of(kind)[0])

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __contains__(self, kind: object) -> bool:
        return kind in _REGISTRY


POSITION_MECHANISMS: Mapping[str, type] = _MechanismClasses()
