"""Strict weight loading: every checkpoint tensor lands in exactly one model parameter, or we fail."""

from __future__ import annotations

import re

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.former_names import current_state_key
from repo_lens.model.loaders.renames import rename_by_rules
from repo_lens.model.transformer import LensModel

# HF names -> repo_lens module paths, applied in order
_HF_RENAMES = [
    (re.compile(r"^model\.embed_tokens\."), "embed."),
    (re.compile(r"^model\.norm\."), "final_norm."),
    (re.compile(r"^lm_head\."), "unembed."),
    (re.compile(r"^model\.layers\.(\d+)\.self_attn\.(gate_map|content_map|final_map|dynamic_map)\."),
     r"blocks.\1.attn.mechanism.\2."),
    (re.compile(r"^model\.layers\.(\d+)\.self_attn\."), r"blocks.\1.attn."),
    (re.compile(r"^model\.layers\.(\d+)\."), r"blocks.\1."),
]
# floating dtypes a checkpoint's weights may be stored in; others (float8 variants) are refused, not upcast
WEIGHT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# buffers some exporters write that carry no learned state
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


def hf_to_lens_name(name: str) -> str:
    """The repo_lens module path of an HF weight name.

    >>> hf_to_lens_name("model.layers.5.self_attn.gate_map.weight")
    'blocks.5.attn.mechanism.gate_map.weight'
    """
    return rename_by_rules(name, _HF_RENAMES)


def load_weights_strict(
    model: LensModel,
    tensors: dict[str, torch.Tensor],
    rename=hf_to_lens_name,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> None:
    """Copy ``tensors`` into ``model`` (built on the meta device). Missing, surplus or misshapen
    weights raise a CheckpointError naming them in the checkpoint's own key names."""
    renamed = _match_names(model, tensors, rename)
    state = {target: tensors[source].to(device=device, dtype=dtype) for target, source in renamed.items()}
    _check_finite(state, renamed, dtype)
    tied = model.cfg.tie_word_embeddings
    if tied and "unembed.weight" in state:
        if not torch.equal(state["unembed.weight"], state["embed.weight"]):
            raise CheckpointError("tie_word_embeddings is true but lm_head.weight differs from the embeddings")
        del state["unembed.weight"]
    model.load_state_dict(state, strict=False, assign=True)
    if tied:
        model.unembed.weight = model.embed.weight
    for module in model.modules():
        if hasattr(module, "inv_freq"):
            module.inv_freq = module.inv_freq.to(device)


def _match_names(model: LensModel, tensors: dict[str, torch.Tensor], rename) -> dict[str, str]:
    """{model parameter: checkpoint name} covering every parameter of ``model`` once; any missing,
    surplus, misshapen or wrongly typed weight raises one CheckpointError listing them all."""
    expected = dict(model.named_parameters())
    tied = model.cfg.tie_word_embeddings
    renamed: dict[str, str] = {}
    surplus: list[str] = []
    # weights the checkpoint's own model declares but never reads (ModelConfig.extra, from pe_config)
    unread = model.cfg.extra.get("unread_weights", {})
    for name in tensors:
        if _IGNORED.search(name) or name in unread:
            continue
        target = current_state_key(rename(name))  # a key saved under a former name (attn.positions.*) loads too
        if target in expected or (tied and target == "unembed.weight"):
            renamed[target] = name
        else:
            surplus.append(name)
    missing = sorted(target for target in expected if target not in renamed)
    problems = []
    if missing:
        problems.append(f"missing weights (the config needs them): {_describe(missing, rename)}")
    if surplus:
        problems.append(f"surplus weights (no layer of the config uses them): {sorted(surplus)}")
    problems += _shape_and_dtype_problems(expected, tensors, renamed, unread)
    if problems:
        raise CheckpointError(
            "checkpoint does not match its config, refusing to load it partially — "
            + " | ".join(problems)
            + f". Layer mechanisms from the config: {_mechanism_summary(model)}"
        )
    return renamed


def _shape_and_dtype_problems(expected: dict[str, torch.nn.Parameter], tensors: dict[str, torch.Tensor],
                              renamed: dict[str, str], unread: dict[str, list[int]]) -> list[str]:
    """What is wrong with the matched weights' shapes (and the declared unread ones') and dtypes."""
    problems = []
    shapes = [
        f"{renamed[target]}: checkpoint {tuple(tensors[renamed[target]].shape)} vs model {tuple(param.shape)}"
        for target, param in expected.items()
        if target in renamed and tensors[renamed[target]].shape != param.shape
    ]
    shapes += [f"{name}: checkpoint {tuple(tensors[name].shape)} vs declared {tuple(shape)}"
               for name, shape in unread.items()
               if name in tensors and tuple(tensors[name].shape) != tuple(shape)]
    if shapes:
        problems.append("shape mismatches: " + "; ".join(shapes))
    not_floats = [f"{name}: {str(tensors[name].dtype).replace('torch.', '')}" for name in renamed.values()
                  if not tensors[name].is_floating_point()]
    if not_floats:
        problems.append(f"non-floating tensors where weights must be floats (never cast silently): {not_floats[:5]}")
    unsupported = [f"{name}: {str(tensors[name].dtype).replace('torch.', '')}" for name in renamed.values()
                   if tensors[name].is_floating_point() and tensors[name].dtype not in WEIGHT_DTYPES]
    if unsupported:
        supported = ", ".join(str(kind).replace("torch.", "") for kind in WEIGHT_DTYPES)
        problems.append(f"weights in an unsupported floating dtype (never upcast silently): {unsupported[:5]}; "
                        f"store them as {supported} (dequantize float8 checkpoints first)")
    return problems


def _check_finite(state: dict[str, torch.Tensor], renamed: dict[str, str], dtype: torch.dtype) -> None:
    """Refuse NaN or infinite weights (stored so, or overflowing ``dtype``), naming the tensors."""
    if not state:
        return
    # one sum per tensor screens them all at once: a NaN or inf makes its tensor's sum non-finite (an
    # overflowing sum of finite values only sends that tensor to the exact check below)
    if bool(torch.isfinite(torch.stack([tensor.sum() for tensor in state.values()])).all()):
        return
    bad = [target for target, tensor in state.items() if not bool(torch.isfinite(tensor).all())]
    if not bad:
        return
    counts = []
    for target in bad[:5]:
        tensor = state[target]
        counts.append(f"{renamed[target]}: {int(torch.isnan(tensor).sum())} NaN, {int(torch.isinf(tensor).sum())} inf")
    raise CheckpointError(
        f"{len(bad)} weight tensor(s) hold NaN or infinite values once loaded as {str(dtype).replace('torch.', '')} "
        f"({'; '.join(counts)}); a model with them gives NaN positions. Use a checkpoint whose weights are "
        "finite (re-export it, or load in a wider dtype if float16 overflowed)"
    )


def _describe(lens_names: list[str], rename) -> list[str]:
    """Missing parameters in the checkpoint's own spelling, so the user can grep for them (a ``rename`` with an
    ``inverse`` spells them itself)."""
    inverse = getattr(rename, "inverse", None)
    if inverse is not None:
        return [inverse(name) for name in lens_names]
    if rename is not hf_to_lens_name:
        return lens_names
    return [lens_to_hf_name(name) for name in lens_names]


def lens_to_hf_name(name: str) -> str:
    """Inverse of :func:`hf_to_lens_name`.

    >>> lens_to_hf_name("blocks.3.attn.mechanism.final_map.weight")
    'model.layers.3.self_attn.final_map.weight'
    """
    fixed = {"embed.weight": "model.embed_tokens.weight", "final_norm.weight": "model.norm.weight",
             "unembed.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    name = re.sub(r"^blocks\.(\d+)\.attn\.mechanism\.", r"model.layers.\1.self_attn.", name)
    name = re.sub(r"^blocks\.(\d+)\.attn\.", r"model.layers.\1.self_attn.", name)
    return re.sub(r"^blocks\.(\d+)\.", r"model.layers.\1.", name)


def _mechanism_summary(model: LensModel) -> str:
    kinds = model.cfg.layer_mechanisms
    return ", ".join(f"{layer}:{kind}" for layer, kind in enumerate(kinds))
