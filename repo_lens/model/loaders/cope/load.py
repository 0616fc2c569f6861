"""Load a CoPE authors' training checkpoint (github ``facebookresearch/RAM``, ``projects/cope``): the
``checkpoints/<name>.pt`` file (or ``.pt.best``, ``.pt.<epoch>``) ``src/utils/checkpoint.py`` writes,
holding ``cfg`` (the training options, an ``argparse.Namespace``), ``model`` (the state_dict of their
model in ``DummyWrapper``), ``logger``, ``optimizer`` and ``tokenizer`` (their word list).

Read by the restricted unpickler (the Namespace and the logger's metrics as inert data), the weights
matched strictly and run by :class:`repo_lens.model.authors.cope_model.CopeModel`; its logits' log_softmax
is their forward's output.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.authors.cope_model import CopeModel
from repo_lens.model.loaders.cope.names import cope_to_lens_name, lens_tensor
from repo_lens.model.loaders.cope.options import cope_model_config
from repo_lens.model.loaders.inert import InertNamespace
from repo_lens.model.loaders.loaded import LoadedModel, dtype_name
from repo_lens.model.loaders.hf.pickled_weights import read_state_dict
from repo_lens.model.loaders.unpickler import read_pickled
from repo_lens.model.loaders.weights import load_weights_strict
from repo_lens.model.loaders.cope.word_tokenizer import WordTokenizer

CODE = "github facebookresearch/RAM, projects/cope"
FORMAT = ("a CoPE training checkpoint (a dict with 'cfg', an argparse Namespace of options, and 'model', a "
          "state_dict, as their checkpoint.save writes it)")
_FILE = re.compile(r"\.pt(\.(best|\d+))?$")


def is_cope_file(path: Path) -> bool:
    """A file named as their checkpoint code names them (``*.pt``, ``*.pt.best``, ``*.pt.<epoch>``)."""
    return bool(_FILE.search(path.name)) and not path.is_dir()


def _parts(checkpoint: Any, path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """(training options, state_dict, tokenizer state) of their checkpoint dict, checked."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("cfg"), InertNamespace) or "model" not in checkpoint:
        raise CheckpointError(f"{path} is not a CoPE training checkpoint: expected a dict with 'cfg' (an argparse "
                              "Namespace of options) and 'model' (a state_dict), as their checkpoint.save writes")
    return checkpoint["cfg"].attributes(), read_state_dict(path, "model state_dict", checkpoint["model"]), \
        checkpoint.get("tokenizer")


def _vocab_size(options: dict[str, Any], state: dict[str, torch.Tensor]) -> int:
    embeddings = next((tensor for name, tensor in state.items() if name.endswith("embed_toks.weight")), None)
    if embeddings is None:
        raise CheckpointError("the CoPE checkpoint has no embed_toks.weight; expected their TransformerDecoder's weights")
    return int(options.get("nvocab") or embeddings.shape[0])


def load_cope(path: Path, device: torch.device, dtype: torch.dtype, loaded: Any = None) -> LoadedModel:
    """The LoadedModel of their checkpoint file ``path`` (``loaded``: its content, when already unpickled)."""
    options, state, tokenizer_state = _parts(read_pickled(path, "CoPE checkpoint") if loaded is None else loaded, path)
    cfg = cope_model_config(options, _vocab_size(options, state))
    kinds, authors = cfg.layer_mechanisms, cfg.extra["authors"]

    def rename(name: str) -> str:
        return cope_to_lens_name(name, kinds)

    tensors = {name: lens_tensor(rename(name), tensor, cfg.d_head, authors["cope_nodiv"]) for name, tensor in state.items()}
    with torch.device("meta"):
        model = CopeModel(cfg)
    load_weights_strict(model, tensors, rename=rename, dtype=dtype, device=device)
    words = tokenizer_state.get("ind2word") if isinstance(tokenizer_state, dict) else None
    meta: dict[str, Any] = {"source": str(path.resolve()), "format": "cope", "name": str(options.get("log_name") or path.name),
            "dtype": dtype_name(dtype), "device": str(device), "pe_config": None, "pe_config_notes": [], "info": {},
            "authors": {"code": CODE, "variant": f"pos_emb={authors['pos_emb']}", "notes": cope_notes(authors),
                        "options": {key: value for key, value in options.items()
                                    if isinstance(value, (str, int, float, bool)) or value is None}}}
    return LoadedModel(model=model.eval(), tokenizer=None if words is None else WordTokenizer(words), meta=meta)


def cope_notes(authors: dict[str, Any]) -> list[str]:
    """Where repo_lens' reading of their checkpoint needs saying (recorded in ``meta["authors"]["notes"]``)."""
    notes = ["the model returns logits; their forward returns log_softmax of the same logits",
             "CoPE's and the relative embeddings' logits are divided by √d_head with q·k in their attention "
             "(CoPE's not with --cope-nodiv): that division is folded into the loaded embeddings"]
    if authors["pos_emb"] == "rope":
        notes.append("--pos-emb rope is accepted by their parser but implemented nowhere: no position signal at all")
    if authors["absolute"]:
        notes.append("learned absolute position embeddings are added to the token embeddings (hook_pos_embed); the "
                     "attention layers themselves carry no position term")
    if authors["pos_emb"] in ("rel", "abs+rel", "cope+rel"):
        notes.append("relative embeddings beyond their last distance give 0 (or the last embedding with "
                     "--rel-pos-extend) at every length; their code asserts for lengths between it and block_size")
    return notes
