"""Every hook point of a ``LensModel``: its name, the shape of the tensor it holds, and what it holds.

This table is the one place a hook's shape is declared: the documentation's hook-points page is written
from it (:func:`markdown_section`), and the tests run a model of every mechanism kind with every hook cached
and compare each tensor with its row. A name is the hook's path in the model with ``{l}`` for the
layer index and ``{mechanism}`` for the attention submodule that holds the layer's position mechanism
(:func:`mechanism_submodule` reads its name from a model). A shape names dimensions, whose sizes come from
the model's config and the input (:func:`dimension_sizes`). The module imports no torch.

Example:
    >>> HOOK_SHAPES["blocks.{l}.attn.hook_pos"]
    ('batch', 'head', 'pos')
    >>> key = table_key("blocks.3.attn.mechanism.hook_delta", mechanism="mechanism")
    >>> key, HOOK_SHAPES[key]
    ('blocks.{l}.attn.{mechanism}.hook_delta', ('batch', 'head', 'pos'))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repo_lens.errors import InputError

# dimension name -> what it counts (the documentation's key to the shapes)
DIMENSIONS: dict[str, str] = {
    "batch": "sequences in the batch",
    "pos": "tokens of the input (with a KV cache, the new tokens)",
    "query_pos": "query tokens (as pos)",
    "key_pos": "key tokens (without a KV cache, as pos)",
    "head": "query heads",
    "kv_head": "key/value heads (fewer with grouped-query attention, else as head)",
    "d_head": "the width of one head",
    "d_model": "the width of the residual stream",
    "d_mlp": "the MLP's hidden width",
    "q_width": "head × d_head",
    "kv_width": "kv_head × d_head",
    "one": "a dimension of size 1",
}


@dataclass(frozen=True, kw_only=True)
class Hook:
    """One row of the table: ``name`` (``{l}`` the layer, ``{mechanism}`` the position mechanism's submodule),
    ``shape`` (dimension names of :data:`DIMENSIONS`), ``also`` (a second shape the hook takes in some models;
    ``what`` says where), what it holds, and how it compares with TransformerLens' hook of that name ("same",
    or "ours" where TransformerLens has none)."""

    name: str
    shape: tuple[str, ...]
    what: str
    transformer_lens: str = "same"
    also: tuple[str, ...] = ()


_RESID = ("batch", "pos", "d_model")
_SCALE = ("batch", "pos", "one")
_PER_HEAD = ("batch", "head", "pos")
_QUERY_KEY = ("batch", "head", "query_pos", "key_pos")
_QUERIES = ("batch", "pos", "head", "d_head")
_KEYS = ("batch", "pos", "kv_head", "d_head")
_MLP = ("batch", "pos", "d_mlp")


def _norm(path: str, what: str, normalized: str = "its input divided by that scale, before the weight (fp32)",
          width: str = "d_model") -> tuple[Hook, Hook]:
    """The two hooks of an RMSNorm at ``path``: its scale and its input divided by that scale."""
    return (Hook(name=f"{path}.hook_scale", shape=_SCALE, what=what),
            Hook(name=f"{path}.hook_normalized", shape=("batch", "pos", width), what=normalized))


HOOKS: tuple[Hook, ...] = (
    Hook(name="hook_embed", shape=_RESID, what="token embeddings"),
    Hook(name="hook_pos_embed", shape=_RESID, what="the CoPE authors' models with learned absolute position "
         "embeddings (`--pos-emb abs`): the embeddings added to the token embeddings"),
    Hook(name="hook_delta", shape=("batch", "pos"), transformer_lens="ours",
         what="`lpi` and `lpi-graft` models: the shared increments δ from the embeddings"),
    Hook(name="hook_head_delta", shape=_PER_HEAD, transformer_lens="ours",
         what="`lpi-head` and `lpi-table` models (and their PoPE kinds): the shared increments δ of each head, from "
         "the embeddings or the frozen table"),
    Hook(name="hook_log_forget", shape=_PER_HEAD, transformer_lens="ours",
         what="models with a decay (`ModelConfig.decay`): log α of each head and token, from the embeddings "
         "(`forget`) or ALiBi's −m_h (`alibi`), whose running sums A give every layer's bias A_i − A_j — **write it "
         "to intervene** (zeros: no decay)"),
    Hook(name="blocks.{l}.hook_resid_pre", shape=_RESID, what="residual stream entering block l"),
    *_norm("blocks.{l}.ln1", "Llama-family (pre-norm) blocks: √(mean(x²)+ε) of `input_layernorm`, only when asked "
           "for", "x divided by that scale, before the weight (fp32)"),
    *_norm("blocks.{l}.ln2", "Llama-family blocks: the same for `post_attention_layernorm` (before the MLP)"),
    *_norm("blocks.{l}.ln1_post", "OLMo-2 blocks: the same for `post_attention_layernorm` (on the attention output)"),
    *_norm("blocks.{l}.ln2_post", "OLMo-2 blocks: the same for `post_feedforward_layernorm` (on the MLP output)"),
    Hook(name="blocks.{l}.attn.hook_q", shape=_QUERIES,
         what="queries: `q_proj`'s output split into heads, before OLMo-2's `q_norm` and the rotation (the GRAPE and "
         "FoX authors' models: their token shift included)"),
    Hook(name="blocks.{l}.attn.hook_k", shape=_KEYS,
         what="keys: `k_proj`'s output, before `k_norm` and the rotation; GQA: one per key head"),
    Hook(name="blocks.{l}.attn.hook_v", shape=_KEYS, what="values: `v_proj`'s output; GQA: one per key head"),
    Hook(name="blocks.{l}.attn.hook_pos", shape=_PER_HEAD, transformer_lens="ours",
         what="the positions layer l rotates by (FoX / ALiBi: whose differences are its bias) — **write it to "
         "intervene**; CoPE / GRAPE-AP: the last token's view, a read-out"),
    Hook(name="blocks.{l}.attn.{mechanism}.hook_delta", shape=_PER_HEAD, transformer_lens="ours",
         what="the increments layer l sums, for the kinds whose registry entry has an `increments` trait (what "
         "they hold is that trait); write it to intervene where it is the kind's edit hook; for the kinds that "
         "also publish `hook_query_delta` (CoPE, GRAPE-AP): the last query's increments over the keys, a read-out"),
    Hook(name="blocks.{l}.attn.hook_decay", shape=_PER_HEAD, transformer_lens="ours",
         what="models with a decay: the levels A = Σ_{s≤t} log α_s layer l adds as A_i − A_j to its scores (with a KV "
         "cache, the new tokens'; they continue from the cached keys' levels) — write it to change this layer's "
         "decay alone"),
    Hook(name="blocks.{l}.attn.{mechanism}.hook_query_delta", shape=_QUERY_KEY, transformer_lens="ours",
         what="CoPE / GRAPE-AP: every query's increments over the keys (`hook_delta` is the last row), a read-out"),
    Hook(name="blocks.{l}.attn.{mechanism}.hook_gates", shape=_QUERY_KEY, transformer_lens="ours",
         what="CoPE gates g_ij (keys after the query are zeroed after the hook) — write to intervene"),
    Hook(name="blocks.{l}.attn.{mechanism}.hook_potential", shape=_QUERY_KEY, transformer_lens="ours",
         what="GRAPE-AP edge potentials ψ(t, l)"),
    Hook(name="blocks.{l}.attn.hook_rot_q", shape=_QUERIES,
         transformer_lens="TransformerLens has it in rotary models only",
         what="the queries q·k uses: after `q_norm` and the rotation by `hook_pos`; in layers that add a bias instead "
         "of rotating (FoX, ALiBi, CoPE, GRAPE-AP), after `q_norm` only"),
    Hook(name="blocks.{l}.attn.hook_rot_k", shape=_KEYS, also=_QUERIES,
         transformer_lens="same, except the per-query-head keys of learned GQA layers, and TransformerLens passes "
         "every cached key",
         what="the keys q·k uses, likewise: one per key head where the query heads of a GQA group share their "
         "positions (RoPE, NoPE, and every layer without GQA); **one per query head** (the second shape) in GQA "
         "layers whose positions differ between the heads of a group (learned positions); with a KV cache, the new "
         "tokens only"),
    Hook(name="blocks.{l}.attn.hook_attn_scores", shape=_QUERY_KEY,
         what="q·k/√d_head plus the layer's bias (a mechanism's, or the model's decay), −inf where masked (fp32), "
         "computed **only when asked for**"),
    Hook(name="blocks.{l}.attn.hook_pattern", shape=_QUERY_KEY,
         what="attention probabilities (fp32), computed **only when asked for**"),
    *_norm("blocks.{l}.attn.q_norm", "OLMo-2: √(mean(q²)+ε) of `q_norm` over the whole projection, only when asked "
           "for", "OLMo-2: q divided by that scale, before the weight (fp32)", width="q_width"),
    *_norm("blocks.{l}.attn.k_norm", "OLMo-2: the same for `k_norm`", "OLMo-2: k divided by that scale",
           width="kv_width"),
    Hook(name="blocks.{l}.attn.hook_z", shape=_QUERIES, what="attention output per head, before `o_proj`"),
    Hook(name="blocks.{l}.attn.hook_result", shape=("batch", "pos", "head", "d_model"),
         what="each head's share of `o_proj`'s output (their sum plus the bias is the output), computed **only when "
         "asked for**"),
    Hook(name="blocks.{l}.hook_attn_out", shape=_RESID, what="attention sublayer output (OLMo-2: after its post-norm)"),
    Hook(name="blocks.{l}.hook_resid_mid", shape=_RESID, what="residual after attention"),
    Hook(name="blocks.{l}.mlp.hook_pre", shape=_MLP,
         what="the MLP gate `gate_proj(x)` before its activation (a GELU MLP: `up_proj(x)`)"),
    Hook(name="blocks.{l}.mlp.hook_pre_linear", shape=_MLP, what="the gated MLP's linear branch `up_proj(x)`"),
    Hook(name="blocks.{l}.mlp.hook_post", shape=_MLP,
         what="activation(gate) × linear branch (a GELU MLP: the activation), what `down_proj` reads"),
    Hook(name="blocks.{l}.hook_mlp_out", shape=_RESID, what="MLP sublayer output (OLMo-2: after its post-norm)"),
    Hook(name="blocks.{l}.hook_resid_post", shape=_RESID, what="residual leaving block l"),
    *_norm("ln_final", "the final norm's scale, only when asked for", "the final norm's input divided by it"),
)

HOOK_SHAPES: dict[str, tuple[str, ...]] = {hook.name: hook.shape for hook in HOOKS}


def mechanism_submodule(attention: Any) -> str:
    """The name under which an attention module holds its layer's position mechanism: the child with a
    ``kind`` and a ``role``, as every registered mechanism has.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> mechanism_submodule(tiny_model("repo").blocks[0].attn)
        'mechanism'
    """
    names = [name for name, child in attention.named_children() if hasattr(child, "kind") and hasattr(child, "role")]
    if len(names) != 1:
        raise InputError(f"{type(attention).__name__} holds {len(names)} position mechanisms ({names}); expected one "
                         "child module with a kind and a role")
    return names[0]


def table_key(name: str, mechanism: str) -> str:
    """The table's name for the hook called ``name`` in a model whose attention holds its position mechanism
    under ``mechanism`` (see :func:`mechanism_submodule`).

    Example:
        >>> table_key("blocks.12.ln1.hook_scale", mechanism="mechanism")
        'blocks.{l}.ln1.hook_scale'
    """
    key = re.sub(r"^blocks\.\d+\.", "blocks.{l}.", name)
    return key.replace(f"blocks.{{l}}.attn.{mechanism}.", "blocks.{l}.attn.{mechanism}.", 1)


def hook_name(key: str, mechanism: str) -> str:
    """The name a model's hooks take for the table's ``key`` (``{l}`` kept), the inverse of :func:`table_key`.

    Example:
        >>> hook_name("blocks.{l}.attn.{mechanism}.hook_gates", mechanism="mechanism")
        'blocks.{l}.attn.mechanism.hook_gates'
    """
    return key.replace("{mechanism}", mechanism)


def dimension_sizes(cfg: Any, batch: int, n_tokens: int) -> dict[str, int]:
    """The size of each dimension of :data:`DIMENSIONS` for a model of config ``cfg`` (a ``ModelConfig``)
    run on ``batch`` sequences of ``n_tokens`` tokens without a KV cache.

    Example:
        >>> from repo_lens.model.config import ModelConfig
        >>> cfg = ModelConfig(family="llama", vocab_size=8, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_mlp=48,
        ...                   layer_mechanisms=["rope"])
        >>> sizes = dimension_sizes(cfg, batch=2, n_tokens=5)
        >>> sizes["kv_head"], sizes["d_head"], sizes["kv_width"], sizes["key_pos"]
        (2, 8, 16, 5)
    """
    head, kv_head, d_head = int(cfg.n_heads), int(cfg.n_kv_heads), int(cfg.d_head)
    return {"batch": batch, "pos": n_tokens, "query_pos": n_tokens, "key_pos": n_tokens, "head": head,
            "kv_head": kv_head, "d_head": d_head, "d_model": int(cfg.d_model), "d_mlp": int(cfg.d_mlp),
            "q_width": head * d_head, "kv_width": kv_head * d_head, "one": 1}


def expected_shapes(key: str, sizes: Mapping[str, int]) -> list[tuple[int, ...]]:
    """The shapes the hook ``key`` of the table may take (its shape, then ``also`` where given), in sizes.

    Example:
        >>> expected_shapes("blocks.{l}.attn.hook_rot_k", {"batch": 1, "pos": 3, "head": 4, "kv_head": 2, "d_head": 8})
        [(1, 3, 2, 8), (1, 3, 4, 8)]
    """
    if key not in HOOK_SHAPES:
        raise InputError(f"hook {key!r} is not in the hook-shape table (repo_lens.model.hook_shapes.HOOKS); add a row")
    row = next(hook for hook in HOOKS if hook.name == key)
    return [tuple(sizes[dim] for dim in shape) for shape in (row.shape, row.also) if shape]


def markdown_section(mechanism: str) -> str:
    """The hook-points page's table, after a line that says what each dimension counts: one row per hook, its
    name as a model calls it (``mechanism``: see :func:`mechanism_submodule`), its shape, what it holds and how
    it compares with TransformerLens.

    Example:
        >>> markdown_section("mechanism").splitlines()[4]
        '| `hook_embed` | [batch, pos, d_model] | token embeddings | same |'
    """
    dims = "; ".join(f"`{name}`: {meaning}" for name, meaning in DIMENSIONS.items())
    lines = [f"Dimensions: {dims}.", "", "| name | shape | what | vs TransformerLens |", "|---|---|---|---|"]
    for hook in HOOKS:
        shape = " or ".join(f"[{', '.join(dims)}]" for dims in (hook.shape, hook.also) if dims)
        lines.append(f"| `{hook_name(hook.name, mechanism)}` | {shape} | {hook.what} | {hook.transformer_lens} |")
    return "\n".join(lines) + "\n"
