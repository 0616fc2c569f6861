"""Build the LoadedModel of one of the post's checkpoints (already unpickled by ``torch.load(weights_only=True)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders.increments_post.config import PostVariant, model_config, read_fields
from repo_lens.model.loaders.increments_post.files import checked_parts
from repo_lens.model.loaders.increments_post.names import PostNames, lens_tensors, strip_compile_prefix
from repo_lens.model.loaders.increments_post.notes import CODE, post_notes
from repo_lens.model.loaders.loaded import LoadedModel, build_strict, dtype_name

GPT2_VOCAB = 50257
FROZEN = "frozen_delta.deltas"


def _tensors(state: dict[Any, Any], path: Path) -> dict[str, torch.Tensor]:
    bad = [str(key) for key, value in state.items() if not isinstance(key, str) or not isinstance(value, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: model_state_dict entries {bad[:5]} are not weight name -> tensor")
    return dict(state)


def _variant(fields: dict[str, Any], state: dict[str, torch.Tensor]) -> PostVariant:
    """The variant the config and a frozen δ table (``frozen_delta.deltas`` [V] or [V, H]) describe."""
    frozen = None
    if FROZEN in state:
        table, vocab, heads = state[FROZEN], fields["vocab_size"], fields["n_heads"]
        if not fields["pos_encoding"].startswith("selective"):
            raise CheckpointError(f"{FROZEN} is present but pos_encoding={fields['pos_encoding']!r} uses no δ; "
                                  "expected a selective_rope or selective_pope checkpoint")
        if fields["per_layer_delta"]:
            raise CheckpointError(f"{FROZEN} is present with per_layer_delta=true, a combination the post's code "
                                  "cannot run (its frozen lookup is read only for shared δ)")
        if tuple(table.shape) == (vocab,):
            frozen = "shared"
        elif tuple(table.shape) == (vocab, heads):
            frozen = "per_head"
        else:
            raise CheckpointError(f"{FROZEN} has shape {tuple(table.shape)}; expected [{vocab}] or [{vocab}, {heads}] "
                                  "(vocab_size, n_heads from model_config)")
    return PostVariant(fields["pos_encoding"], fields["per_layer_delta"], fields["per_head_delta"], fields["decay"],
                       frozen)


def _tokenizer(vocab_size: int) -> tuple[Any, list[str]]:
    """The byte tokenizer for the byte vocabulary; GPT-2's from the Hugging Face cache for GPT-2's vocabulary."""
    if vocab_size == 257:
        return ByteTokenizer(), []
    if vocab_size != GPT2_VOCAB:
        return None, []
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained("gpt2", local_files_only=True), []
    except Exception:  # noqa: BLE001 - any failure means: not in the cache
        return None, ["GPT-2's tokenizer is not in the Hugging Face cache: pass token ids, or put 'gpt2' in the "
                      "cache (huggingface-cli download gpt2) to trace text"]


def load_post(path: Path, loaded: Any, device: torch.device, dtype: torch.dtype, picked: str | None = None) -> LoadedModel:
    """The LoadedModel of the post's checkpoint ``loaded`` (unpickled from ``path``)."""
    step, raw_state, config = checked_parts(loaded, path)
    state, stripped = strip_compile_prefix(_tensors(raw_state, path))
    fields = read_fields(config)
    variant = _variant(fields, state)
    cfg = model_config(fields, variant)
    tensors = lens_tensors(state, fields["n_heads"], fields["dim"])
    model = build_strict(cfg, tensors, rename=PostNames(), dtype=dtype, device=device)
    tokenizer, tokenizer_notes = _tokenizer(fields["vocab_size"])
    notes = post_notes(fields, cfg.layer_mechanisms[0], stripped, picked) + tokenizer_notes
    options = {key: value for key, value in fields.items() if isinstance(value, (str, int, float, bool)) or value is None}
    name = path.parent.name if path.parent.name else path.stem
    meta: dict[str, Any] = {
        "source": str(path.resolve()), "format": "increments-post", "name": f"{name}/{path.stem}", "dtype": dtype_name(dtype),
        "device": str(device), "pe_config": None, "pe_config_notes": [], "info": {},
        "authors": {"code": CODE, "variant": variant.name, "step": step, "notes": notes, "options": options}}
    return LoadedModel(model=model, tokenizer=tokenizer, meta=meta)
