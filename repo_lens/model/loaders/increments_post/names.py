"""The post's state_dict names -> repo_lens module paths, and its query/key rows moved from adjacent RoPE
pairs to the half-split layout.

Its RoPE rotates channel pairs (2i, 2i+1) of each head by p·θ_i (``torch.view_as_complex`` over the last
dimension); repo_lens' rotary code rotates (i, i + d/2) (the NeoX rotate-half layout). Reordering each head's
rows of wq and wk to (0, 2, 4, …, 1, 3, 5, …) maps one onto the other: the same pairs meet the same
frequencies, and q·k is unchanged by a reordering applied to both.
"""

from __future__ import annotations

import re

import torch

_RULES = [
    (r"^tok_emb\.weight$", "embed.weight"),
    (r"^layers\.(\d+)\.attn_norm\.", r"blocks.\1.input_layernorm."),
    (r"^layers\.(\d+)\.attn\.wq\.", r"blocks.\1.attn.q_proj."),
    (r"^layers\.(\d+)\.attn\.wk\.", r"blocks.\1.attn.k_proj."),
    (r"^layers\.(\d+)\.attn\.wv\.", r"blocks.\1.attn.v_proj."),
    (r"^layers\.(\d+)\.attn\.wo\.", r"blocks.\1.attn.o_proj."),
    (r"^layers\.(\d+)\.ffn_norm\.", r"blocks.\1.post_attention_layernorm."),
    (r"^layers\.(\d+)\.ffn\.w_gate\.", r"blocks.\1.mlp.gate_proj."),
    (r"^layers\.(\d+)\.ffn\.w_up\.", r"blocks.\1.mlp.up_proj."),
    (r"^layers\.(\d+)\.ffn\.w_down\.", r"blocks.\1.mlp.down_proj."),
    (r"^final_norm\.", "final_norm."),
    (r"^delta_mlp\.fc1\.", "shared_delta.fc_in."),
    (r"^delta_mlp\.fc2\.", "shared_delta.fc_out."),
    (r"^frozen_delta\.deltas$", "shared_delta.deltas"),
    (r"^delta_mlps\.(\d+)\.norm\.", r"blocks.\1.attn.mechanism.norm."),
    (r"^delta_mlps\.(\d+)\.fc1\.", r"blocks.\1.attn.mechanism.delta_mlp.fc_in."),
    (r"^delta_mlps\.(\d+)\.fc2\.", r"blocks.\1.attn.mechanism.delta_mlp.fc_out."),
    (r"^forget_mlp\.(fc[12])\.", r"decay.\1."),
]
_COMPILED = [(re.compile(pattern), target) for pattern, target in _RULES]
_INVERSE = [(re.compile(pattern), target) for pattern, target in [
    (r"^embed\.weight$", "tok_emb.weight"),
    (r"^blocks\.(\d+)\.input_layernorm\.", r"layers.\1.attn_norm."),
    (r"^blocks\.(\d+)\.attn\.mechanism\.norm\.", r"delta_mlps.\1.norm."),
    (r"^blocks\.(\d+)\.attn\.mechanism\.delta_mlp\.fc_in\.", r"delta_mlps.\1.fc1."),
    (r"^blocks\.(\d+)\.attn\.mechanism\.delta_mlp\.fc_out\.", r"delta_mlps.\1.fc2."),
    (r"^blocks\.(\d+)\.attn\.([qkvo])_proj\.", r"layers.\1.attn.w\2."),
    (r"^blocks\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ffn_norm."),
    (r"^blocks\.(\d+)\.mlp\.gate_proj\.", r"layers.\1.ffn.w_gate."),
    (r"^blocks\.(\d+)\.mlp\.up_proj\.", r"layers.\1.ffn.w_up."),
    (r"^blocks\.(\d+)\.mlp\.down_proj\.", r"layers.\1.ffn.w_down."),
    (r"^shared_delta\.fc_in\.", "delta_mlp.fc1."),
    (r"^shared_delta\.fc_out\.", "delta_mlp.fc2."),
    (r"^shared_delta\.deltas$", "frozen_delta.deltas"),
    (r"^decay\.(fc[12])\.", r"forget_mlp.\1."),
]]
_ROTATED = re.compile(r"^layers\.\d+\.attn\.w[qk]\.weight$")


def post_to_lens_name(name: str) -> str:
    """The repo_lens module path of the post's weight ``name`` (unknown names are returned unchanged, so the
    strict loader reports them as surplus by their own name).

    >>> post_to_lens_name("layers.2.attn.wq.weight"), post_to_lens_name("delta_mlps.1.norm.weight")
    ('blocks.2.attn.q_proj.weight', 'blocks.1.attn.mechanism.norm.weight')
    >>> post_to_lens_name("forget_mlp.fc2.bias")
    'decay.fc2.bias'
    """
    for pattern, target in _COMPILED:
        if pattern.search(name):
            return pattern.sub(target, name)
    return name


def lens_to_post_name(name: str) -> str:
    """Inverse of :func:`post_to_lens_name` (for naming missing weights in the post's spelling).

    >>> lens_to_post_name("blocks.1.attn.mechanism.delta_mlp.fc_out.bias"), lens_to_post_name("blocks.0.attn.k_proj.weight")
    ('delta_mlps.1.fc2.bias', 'layers.0.attn.wk.weight')
    >>> lens_to_post_name("decay.fc1.weight")
    'forget_mlp.fc1.weight'
    """
    for pattern, target in _INVERSE:
        if pattern.search(name):
            return pattern.sub(target, name)
    return name


class PostNames:
    """``rename`` for the strict loader: the post's names -> module paths, with ``inverse`` for its messages."""

    def __call__(self, name: str) -> str:
        return post_to_lens_name(name)

    @staticmethod
    def inverse(name: str) -> str:
        return lens_to_post_name(name)


def half_split_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """wq or wk [n_heads·d, dim] with each head's rows reordered from adjacent pairs to the half-split layout.

    >>> half_split_rows(torch.arange(8.0)[:, None], 2).flatten().tolist()
    [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]
    """
    d = weight.shape[0] // n_heads
    order = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))
    return weight.view(n_heads, d, -1)[:, order].reshape(weight.shape)


def lens_tensors(state: dict[str, torch.Tensor], n_heads: int, dim: int) -> dict[str, torch.Tensor]:
    """The post's tensors under their own names, wq/wk reordered where their shape is the config's
    (a misshapen one is left for the strict loader to report by name and shape)."""
    out = {}
    for name, tensor in state.items():
        if _ROTATED.search(name) and tensor.dim() == 2 and tensor.shape == (dim, dim) and tensor.is_floating_point():
            tensor = half_split_rows(tensor, n_heads)
        elif name == "frozen_delta.deltas" and tensor.dim() in (1, 2):  # repo_lens holds [V, H] flat
            table = tensor[:, None].expand(-1, n_heads) if tensor.dim() == 1 else tensor  # [V]: one δ for every head
            tensor = table.reshape(-1).clone()
        out[name] = tensor
    return out


def strip_compile_prefix(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], bool]:
    """The state_dict with torch.compile's ``_orig_mod.`` prefix removed (as its save does), and whether any
    key carried it; a name present with and without the prefix is refused."""
    from repo_lens.errors import CheckpointError

    out: dict[str, torch.Tensor] = {}
    stripped = False
    for name, tensor in state.items():
        plain = name.removeprefix("_orig_mod.")
        stripped |= plain != name
        if plain in out:
            raise CheckpointError(f"model_state_dict holds {plain!r} twice (with and without torch.compile's "
                                  "'_orig_mod.' prefix); expected each weight once")
        out[plain] = tensor
    return out, stripped
