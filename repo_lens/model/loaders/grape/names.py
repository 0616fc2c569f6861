"""The GRAPE authors' weight names as repo_lens module paths."""

from __future__ import annotations

import re

from repo_lens.model.loaders.renames import compile_rules, rename_by_rules

_L = r"transformer\.h\.(\d+)\."
# (their name's prefix, ours), tried in order; \1 is the layer
_RULES = compile_rules((
    (r"transformer\.wte\.", "embed."),
    (r"lm_head\.", "unembed."),
    (r"ln_f\.", "final_norm."),
    (_L + r"ln_1\.", r"blocks.\1.input_layernorm."),
    (_L + r"ln_2\.", r"blocks.\1.post_attention_layernorm."),
    (_L + r"mlp\.c_fc1\.", r"blocks.\1.mlp.gate_proj."),
    (_L + r"mlp\.c_fc2\.", r"blocks.\1.mlp.up_proj."),
    (_L + r"mlp\.c_proj\.", r"blocks.\1.mlp.down_proj."),
    (_L + r"attn\.(?:core\.)?(?:c_q|q_proj)\.", r"blocks.\1.attn.q_proj."),
    (_L + r"attn\.(?:core\.)?(?:c_k|k_proj)\.", r"blocks.\1.attn.k_proj."),
    (_L + r"attn\.(?:core\.)?(?:c_v|v_proj)\.", r"blocks.\1.attn.v_proj."),
    (_L + r"attn\.(?:core\.)?c_proj\.", r"blocks.\1.attn.o_proj."),
    (_L + r"attn\.(?:q_rms|core\.q_norm)\.", r"blocks.\1.attn.q_norm."),
    (_L + r"attn\.(?:k_rms|core\.k_norm)\.", r"blocks.\1.attn.k_norm."),
    (_L + r"attn\.(?:subln|core\.output_norm)\.", r"blocks.\1.attn.out_norm."),
    (_L + r"attn\.core\.ogate_proj\.", r"blocks.\1.attn.ogate_proj."),
    (_L + r"attn\.grape\.", r"blocks.\1.attn.rotary."),
    (_L + r"attn\.core\.fgate_", r"blocks.\1.attn.mechanism.fgate_"),
    (_L + r"attn\.(?:query|key|querykey)gated_bias\.", r"blocks.\1.attn.mechanism."),
    (_L + r"attn\.(omega_proj|c_p)\.", r"blocks.\1.attn.mechanism.\2."),
))


def grape_to_lens_name(name: str) -> str:
    """Our module path of a GRAPE weight name (unknown names come back unchanged).

    >>> grape_to_lens_name("transformer.h.3.attn.c_k.shift_proj.weight")
    'blocks.3.attn.k_proj.shift_proj.weight'
    >>> grape_to_lens_name("transformer.h.0.attn.core.fgate_proj.bias")
    'blocks.0.attn.mechanism.fgate_proj.bias'
    >>> grape_to_lens_name("transformer.h.1.attn.keygated_bias.u")
    'blocks.1.attn.mechanism.u'
    """
    return rename_by_rules(name, _RULES)


def _theirs(variant: str) -> list[tuple[re.Pattern, str]]:
    """(our prefix, their prefix) rules of ``variant``, the inverse of :data:`_RULES`."""
    fox = variant == "llama-mha-fox"
    gated = variant.removeprefix("llama-mha-grape-a-") + "_bias." if variant.startswith("llama-mha-grape-a-") else ""
    attention = {"q_proj": "core.q_proj" if fox else "c_q", "k_proj": "core.k_proj" if fox else "c_k",
                 "v_proj": "core.v_proj" if fox else "c_v", "o_proj": "core.c_proj" if fox else "c_proj",
                 "q_norm": "core.q_norm" if fox else "q_rms", "k_norm": "core.k_norm" if fox else "k_rms",
                 "out_norm": "core.output_norm" if fox else "subln", "ogate_proj": "core.ogate_proj",
                 "rotary": "grape", "mechanism.fgate_": "core.fgate_", "mechanism.omega_proj": "omega_proj",
                 "mechanism.c_p": "c_p", "mechanism.": gated}
    rules = [(r"embed\.", "transformer.wte."), (r"unembed\.", "lm_head."), (r"final_norm\.", "ln_f."),
             (r"blocks\.(\d+)\.input_layernorm\.", r"transformer.h.\1.ln_1."),
             (r"blocks\.(\d+)\.post_attention_layernorm\.", r"transformer.h.\1.ln_2."),
             (r"blocks\.(\d+)\.mlp\.gate_proj\.", r"transformer.h.\1.mlp.c_fc1."),
             (r"blocks\.(\d+)\.mlp\.up_proj\.", r"transformer.h.\1.mlp.c_fc2."),
             (r"blocks\.(\d+)\.mlp\.down_proj\.", r"transformer.h.\1.mlp.c_proj.")]
    rules += [(rf"blocks\.(\d+)\.attn\.{re.escape(ours)}", rf"transformer.h.\1.attn.{theirs}")
              for ours, theirs in attention.items()]
    return compile_rules(rules)


def lens_to_grape_name(name: str, variant: str) -> str:
    """The GRAPE weight name of one of our module paths, for ``variant`` (to name missing weights).

    >>> lens_to_grape_name("blocks.2.attn.mechanism.u", "llama-mha-grape-a-keygated")
    'transformer.h.2.attn.keygated_bias.u'
    >>> lens_to_grape_name("blocks.0.attn.q_norm.weight", "llama-mha-fox")
    'transformer.h.0.attn.core.q_norm.weight'
    """
    return rename_by_rules(name, _theirs(variant))
