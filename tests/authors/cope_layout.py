"""CoPE checkpoints laid out exactly as the CoPE authors' code writes them (github facebookresearch/RAM,
projects/cope): ``src/utils/checkpoint.py``'s ``save`` torch.saves {"cfg": the argparse Namespace of the
training options (their parsers' defaults, ``preprocess_config``'s ff_sz/head_dim, ``nvocab`` and the
runtime fields), "model": the state_dict of their TransformerDecoder inside ``DummyWrapper`` (``module.``
names; shared embeddings saved under every layer that holds them), "logger": {"log", "metrics": Metric
objects}, "optimizer": AdamW's state_dict, "tokenizer": {"word2ind", "ind2word"}} to checkpoints/<name>.pt
and the Namespace alone to <name>.pt.cfg."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from .authors_pickles import authors_logger

# their parsers' defaults (src/models, src/cope/context_position.py, src/utils/checkpoint.py), as saved
DEFAULTS = {"model": "simpledec", "tokenizer": "simple", "gpt2_add_special_tokens": None, "untrained": False, "drop": 0.1,
            "block_size": 16, "nlayers": 3, "hid_sz": 32, "ff_sz": None, "nheads": 4, "head_dim": None, "emb_tie": False,
            "pos_emb": "cope", "rel_pos_max": None, "rel_pos_extend": False, "post_norm": False, "memory_len": None,
            "cope_sep_key": False, "cope_val_gates": False, "cope_npos": None, "cope_nodiv": False, "cope_layers": 1,
            "cope_shared": False, "checkpoint": None, "checkpoint_freq": 1, "checkpoint_keep": None,
            "init_model_from": None, "init_model_no_strict": False, "log_name": "test", "log_plot": False,
            "distributed": False, "rank": 0, "fsdp": False, "valid_metric": None}
WORDS = ["<pad>", "<sta>", "x", "=", "1", ".", "y", "2", ",", "what", "is", "?", "count", "the", "apples", "and", "pears",
         "in", "basket", "please", "now"]
# the options of each case: their run.sh's four --pos-emb values and every --cope-* / --rel-pos-* option
CASES = {
    "cope": {}, "cope-postnorm-tied": {"post_norm": True, "emb_tie": True}, "cope-sep-key": {"cope_sep_key": True},
    "cope-val-gates": {"cope_val_gates": True}, "cope-nodiv-npos5": {"cope_nodiv": True, "cope_npos": 5},
    "cope+rel": {"pos_emb": "cope+rel"}, "cope+rel-every2-shared": {"pos_emb": "cope+rel", "cope_layers": 2, "cope_shared": True},
    "abs": {"pos_emb": "abs"}, "rel": {"pos_emb": "rel"}, "abs+rel-postnorm": {"pos_emb": "abs+rel", "post_norm": True},
    "none": {"pos_emb": "none"}, "rope": {"pos_emb": "rope"},
    "rel-max6-extend": {"pos_emb": "rel", "rel_pos_max": 6, "rel_pos_extend": True},
}


def options(name: str) -> dict:
    """The saved options of a case (after their preprocess_config and data setup)."""
    opts = {**DEFAULTS, **CASES[name]}
    opts["ff_sz"] = opts["ff_sz"] or 4 * opts["hid_sz"]
    opts["head_dim"] = opts["head_dim"] or opts["hid_sz"] // opts["nheads"]
    return {**opts, "nvocab": len(WORDS), "device": torch.device("cpu"), "checkpoint": f"checkpoints/{name}.pt"}


def _attention(sd: dict, prefix: str, opts: dict, layer: int, shared: dict) -> None:
    """One layer's attention weights, in their registration order (attn.attn's own, then proj_*)."""
    C, D, every = opts["hid_sz"], opts["head_dim"], opts["cope_layers"]
    cope = opts["pos_emb"] in ("cope", "cope+rel") and (layer + 1) % every == 0
    if cope:
        npos = opts["cope_npos"] or opts["block_size"] + 1
        source = every - 1 if opts["cope_shared"] else layer
        sd[prefix + ".attn.pos_emb"] = shared.setdefault(f"pos{source}", torch.empty(1, D, npos))
    if opts["pos_emb"] in ("rel", "abs+rel", "cope+rel"):
        sd[prefix + ".attn.rel_pos_emb.emb"] = shared.setdefault("rel", torch.empty(1, D, opts["rel_pos_max"] or opts["block_size"]))
    names = (["proj_key_cope"] if cope and opts["cope_sep_key"] else []) + ["proj_query", "proj_key", "proj_val", "proj_out"]
    for name in names:
        sd[f"{prefix}.{name}.weight"], sd[f"{prefix}.{name}.bias"] = torch.empty(C, C), torch.empty(C)


def state_dict_layout(opts: dict) -> dict[str, torch.Tensor]:
    C, F, V = opts["hid_sz"], opts["ff_sz"], opts["nvocab"]
    sd, shared = {}, {}
    if opts["pos_emb"] in ("abs", "abs+rel"):  # a parameter of the decoder itself: saved before its submodules
        sd["module.abs_pos_emb"] = torch.empty(1, opts["block_size"], C)
    sd["module.embed_toks.weight"] = torch.empty(V, C)
    for layer in range(opts["nlayers"]):
        prefix = f"module.core.layers.{layer}"
        _attention(sd, prefix + ".attn", opts, layer, shared)
        for name, shape in (("attn_norm", (C,)), ("ff.fc1", (F, C)), ("ff.fc2", (C, F)), ("ff_norm", (C,))):
            sd[f"{prefix}.{name}.weight"], sd[f"{prefix}.{name}.bias"] = torch.empty(shape), torch.empty(shape[0])
    if not opts["post_norm"]:
        sd["module.out_norm.weight"], sd["module.out_norm.bias"] = torch.empty(C), torch.empty(C)
    sd["module.out_mod.weight"] = sd["module.embed_toks.weight"] if opts["emb_tie"] else torch.empty(V, C)
    return sd


def randomised(sd: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Random weights (LayerNorm weights around 1), shared tensors kept shared."""
    generator, filled, out = torch.Generator().manual_seed(seed), {}, {}
    for name, tensor in sd.items():
        if id(tensor) not in filled:
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
            scale = 0.3 if tensor.dim() == 1 else 1.0 / tensor.shape[-2 if name.endswith(("pos_emb", ".emb")) else -1] ** 0.5
            filled[id(tensor)] = (noise * scale + (1.0 if name.endswith("norm.weight") else 0.0)).float()
        out[name] = filled[id(tensor)]
    return out


def write_cope_checkpoint(root: Path, name: str, seed: int = 0) -> tuple[Path, dict, dict[str, torch.Tensor]]:
    """checkpoints/<name>.pt (and .pt.cfg) under ``root`` as their checkpoint.save writes them."""
    opts = options(name)
    weights = randomised(state_dict_layout(opts), seed)
    path = root / "checkpoints" / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = argparse.Namespace(**opts)
    with authors_logger(root) as Metric:
        metrics = {name: Metric(name) for name in ("nepochs", "loss/train", "loss/val", "loss/test")}
        torch.save({"cfg": cfg, "model": weights, "logger": {"log": [{"nepochs": 1, "loss/val": 0.7}], "metrics": metrics},
                    "optimizer": {"state": {}, "param_groups": [{"lr": 7e-5, "params": list(range(len(weights)))}]},
                    "tokenizer": {"word2ind": {word: index for index, word in enumerate(WORDS)}, "ind2word": WORDS}}, path)
    torch.save(cfg, Path(str(path) + ".cfg"))
    return path, opts, weights
