"""A CoPE authors' training checkpoint's options (their ``argparse.Namespace``, read as inert data) as
a ModelConfig for :class:`repo_lens.model.authors.cope_model.CopeModel`.

``--pos-emb``: ``cope`` (CoPE in every layer, or every ``--cope-layers``-th with ``cope+rel``), ``rel``
(learned relative embeddings), ``cope+rel`` (both), ``abs`` / ``abs+rel`` (learned absolute embeddings
added to the token embeddings), ``none``; ``rope`` is accepted by their parser but no code implements
it, so such a model has no position signal at all (as their forward runs it).
"""

from __future__ import annotations

from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig

POS_EMBS = ("none", "abs", "rel", "abs+rel", "rope", "cope", "cope+rel")


def _positive(options: dict[str, Any], key: str) -> int:
    value = options.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"CoPE checkpoint option {key}={value!r}; expected a positive integer")
    return value


def layer_kinds(options: dict[str, Any], n_layers: int) -> list[str]:
    """The kind of each layer their code builds (``ContextPosSelfAttn.rel_only`` for ``--cope-layers``).

    >>> layer_kinds({"pos_emb": "cope+rel", "cope_layers": 2}, 4)
    ['rel', 'cope', 'rel', 'cope']
    """
    pos_emb = options.get("pos_emb", "abs")
    if pos_emb not in POS_EMBS:
        raise CheckpointError(f"CoPE checkpoint has pos_emb={pos_emb!r}; their code offers {POS_EMBS}")
    every = int(options.get("cope_layers") or 1)
    if pos_emb in ("cope", "cope+rel"):
        if every > 1 and pos_emb != "cope+rel":
            raise CheckpointError("--cope-layers > 1 needs --pos-emb cope+rel (their assertion)")
        return ["cope" if (layer + 1) % every == 0 else "rel" for layer in range(n_layers)]
    return ["rel" if pos_emb in ("rel", "abs+rel") else "nope"] * n_layers


def _gates_from(options: dict[str, Any]) -> str:
    if options.get("cope_val_gates"):
        return "values"
    return "separate keys" if options.get("cope_sep_key") else "keys"


def cope_model_config(options: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The ModelConfig of a CoPE checkpoint with training ``options`` and ``vocab_size`` tokens."""
    n_layers, hidden, n_heads = _positive(options, "nlayers"), _positive(options, "hid_sz"), _positive(options, "nheads")
    head_dim = options.get("head_dim") or hidden // n_heads
    if head_dim * n_heads != hidden:
        raise CheckpointError(f"CoPE checkpoint: nheads={n_heads} × head_dim={head_dim} != hid_sz={hidden}; their "
                              "attention splits hid_sz into the heads")
    block = _positive(options, "block_size")
    pos_emb = options.get("pos_emb", "abs")
    npos = int(options.get("cope_npos") or block + 1)
    authors = {"pos_emb": pos_emb, "post_norm": bool(options.get("post_norm")), "absolute": pos_emb in ("abs", "abs+rel"),
               "relative": pos_emb == "cope+rel", "cope_gates_from": _gates_from(options),
               "cope_nodiv": bool(options.get("cope_nodiv")), "cope_npos": npos,
               "cope_shared": bool(options.get("cope_shared")), "cope_layers": int(options.get("cope_layers") or 1),
               "rel_npos": int(options.get("rel_pos_max") or block), "rel_pos_extend": bool(options.get("rel_pos_extend"))}
    return ModelConfig(family="cope", vocab_size=vocab_size, d_model=hidden, n_layers=n_layers, n_heads=n_heads,
                       head_dim=head_dim, d_mlp=int(options.get("ff_sz") or 4 * hidden),
                       layer_mechanisms=layer_kinds(options, n_layers), max_position_embeddings=block,
                       tie_word_embeddings=bool(options.get("emb_tie")), attention_bias=True, mlp_bias=True,
                       cope_max_position=npos - 1, extra={"authors": authors})
