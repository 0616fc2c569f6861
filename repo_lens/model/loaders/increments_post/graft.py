"""Load the learned-increments post's graft (``delta_mlp.pt``) onto the pretrained model it was trained on.

"Learned position increments" (Brendan Long; github.com/brendanlong/learned-position-increments-experiment,
``experiments/delta_graft``) grafts one DeltaMLP onto a pretrained Llama-family model (SmolLM2, OLMo 2): δ =
softplus(fc2(gelu(fc1(e)))) of the base's input embeddings, positions = Σ_{s<t} δ_s fed to the base's RoPE
(layer kind ``lpi-graft``). Its training saves only that DeltaMLP: ``torch.save({"step", "delta_mlp_state_dict",
"model_config", "final_metrics"})`` with fc1 [d/4, d], fc2 [1, d/4] and its ``DeltaGraftConfig`` as a dict. The
LoRA adapters (or the fully fine-tuned weights) it trained beside δ are not in the file, so the grafted model is
the base with the post's δ and nothing else; ``meta["authors"]["notes"]`` says so.

repo_lens reads the file with ``torch.load(weights_only=True)`` onto the CPU, checks every key, shape and field
against the base, and keeps the DeltaMLP in fp32 whatever the base's dtype (as the post does).

Example:
    >>> is_graft_checkpoint({"step": 2000, "delta_mlp_state_dict": {}, "model_config": {}}), is_graft_checkpoint({})
    (True, False)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.grafted_increments import GraftIncrementPositions
from repo_lens.model.loaders.loaded import LoadedModel, build_strict
from repo_lens.model.loaders.unpickler import read_pickled
from repo_lens.model.registry import ROPE_KIND

CODE = ("\"Learned position increments\" (Brendan Long), github.com/brendanlong/learned-position-increments-experiment, "
        "experiments/delta_graft")
FORMAT = ("the learned-increments post's graft (delta_mlp.pt: a dict with 'delta_mlp_state_dict' holding fc1.weight, "
          "fc1.bias, fc2.weight and fc2.bias, and 'model_config', as its delta_graft training saves it)")
TOP_KEYS = ("step", "delta_mlp_state_dict", "model_config", "final_metrics")
# the DeltaMLP's weights (its state_dict) -> the grafted LensModel's
NAMES = {"fc1.weight": "shared_delta.fc_in.weight", "fc1.bias": "shared_delta.fc_in.bias",
         "fc2.weight": "shared_delta.fc_out.weight", "fc2.bias": "shared_delta.fc_out.bias"}
# DeltaGraftConfig's fields and defaults (experiments/delta_graft/config.py)
FIELDS: dict[str, Any] = {
    "base_model": "HuggingFaceTB/SmolLM2-1.7B", "delta_hidden_dim": None, "delta_enabled": True, "adapt": "lora",
    "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
}
ADAPT_MODES = ("lora", "full")
BASE_FAMILIES = ("llama", "olmo2")  # Llama-family blocks: one rotary (HF's half-split) fed by the position ids


@dataclass(frozen=True)
class Graft:
    """A checked graft file: the DeltaMLP's tensors (fp32, under the LensModel's names), its config's fields
    (defaults filled in), the training step and the final metrics it recorded."""

    path: Path
    tensors: dict[str, torch.Tensor]
    fields: dict[str, Any]
    step: int | None
    final_metrics: dict[str, float]

    @property
    def d_model(self) -> int:
        return int(self.tensors["shared_delta.fc_in.weight"].shape[1])

    @property
    def hidden(self) -> int:
        return int(self.tensors["shared_delta.fc_in.weight"].shape[0])


def is_graft_checkpoint(loaded: Any) -> bool:
    """Whether an unpickled object is (meant to be) the post's graft: a dict naming ``delta_mlp_state_dict``."""
    return isinstance(loaded, dict) and "delta_mlp_state_dict" in loaded


def graft_only_error(path: Path, loaded: dict) -> CheckpointError:
    """The error for a graft file loaded as if it were a model: it needs its base."""
    config = loaded.get("model_config")
    base = config.get("base_model") if isinstance(config, dict) else None
    trained = f", trained on {base}" if isinstance(base, str) and base else ""
    return CheckpointError(
        f"{path} is the learned-increments post's graft (the DeltaMLP its delta_graft training adds to a pretrained "
        f"model{trained}), not a model of its own: load it onto its base with repo_lens.load(BASE, graft={str(path)!r}) "
        f"or, on the command line, --model BASE --graft {path}")


def read_graft(path: Path) -> Graft:
    """The graft file ``path``, read with ``torch.load(weights_only=True)`` and checked key by key; anything else
    (no such file, a truncated file, pickled objects, wrong keys, shapes or fields) raises CheckpointError."""
    loaded = read_pickled(path, "the learned-increments post's graft file")
    if not is_graft_checkpoint(loaded):
        found = f"a dict with keys {sorted(map(str, loaded))[:8]}" if isinstance(loaded, dict) else type(loaded).__name__
        raise CheckpointError(f"{path} is not {FORMAT}; found {found}")
    surplus = sorted(str(key) for key in loaded if key not in TOP_KEYS)
    if surplus or "model_config" not in loaded:
        problem = f"unexpected entries {surplus}" if surplus else "no 'model_config'"
        raise CheckpointError(f"{path}: the graft dict holds {problem}; expected {list(TOP_KEYS)} as its training "
                              "saves them")
    tensors = _tensors(loaded["delta_mlp_state_dict"], path)
    fields = _fields(loaded["model_config"], path, tensors)
    step = loaded.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise CheckpointError(f"{path}: step is {step!r}; expected a non-negative integer")
    return Graft(path, tensors, fields, step, _metrics(loaded.get("final_metrics"), path))


def _tensors(state: Any, path: Path) -> dict[str, torch.Tensor]:
    """delta_mlp_state_dict checked (exactly fc1/fc2 weight and bias, shapes [h, d], [h], [1, h], [1], finite)
    and renamed, in fp32."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: delta_mlp_state_dict is {type(state).__name__}, not the DeltaMLP's state_dict")
    missing = sorted(key for key in NAMES if key not in state)
    surplus = sorted(str(key) for key in state if key not in NAMES)
    if missing or surplus:
        raise CheckpointError(f"{path}: delta_mlp_state_dict lacks {missing} and holds unexpected {surplus}; the "
                              f"graft's DeltaMLP has exactly {list(NAMES)} (no norm: its δ is the unbounded softplus)")
    for key in NAMES:
        if not isinstance(state[key], torch.Tensor) or not state[key].dtype.is_floating_point:
            raise CheckpointError(f"{path}: delta_mlp_state_dict[{key!r}] is not a floating-point tensor")
    hidden, d_model = state["fc1.weight"].shape if state["fc1.weight"].dim() == 2 else (0, 0)
    expected = {"fc1.weight": (hidden, d_model), "fc1.bias": (hidden,), "fc2.weight": (1, hidden), "fc2.bias": (1,)}
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape or not hidden or not d_model:
            raise CheckpointError(f"{path}: delta_mlp_state_dict[{key!r}] has shape {list(state[key].shape)}; the "
                                  f"graft's DeltaMLP (one δ per token) has fc1.weight [hidden, d_model], fc1.bias "
                                  f"[hidden], fc2.weight [1, hidden], fc2.bias [1]")
        if not torch.isfinite(state[key]).all():
            raise CheckpointError(f"{path}: delta_mlp_state_dict[{key!r}] holds NaN or infinite values")
    return {NAMES[key]: state[key].detach().to(torch.float32) for key in NAMES}


def _fields(config: Any, path: Path, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """model_config (DeltaGraftConfig.model_dump()) with its defaults filled in; unknown fields, wrong types and
    a delta_hidden_dim the weights do not have are refused by name."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: model_config is {type(config).__name__}, not the dict of DeltaGraftConfig "
                              "fields its training saves")
    unknown = sorted(str(key) for key in config if key not in FIELDS)
    if unknown:
        raise CheckpointError(f"{path}: model_config has unknown fields {unknown}; the post's DeltaGraftConfig has "
                              f"{sorted(FIELDS)}")
    fields = {key: config.get(key, default) for key, default in FIELDS.items()}
    checks = {
        "base_model": (isinstance(fields["base_model"], str) and bool(fields["base_model"]), "a model name"),
        "delta_hidden_dim": (fields["delta_hidden_dim"] is None or _whole(fields["delta_hidden_dim"], 1),
                             "null or a positive integer"),
        "delta_enabled": (isinstance(fields["delta_enabled"], bool), "true or false"),
        "adapt": (fields["adapt"] in ADAPT_MODES, f"one of {list(ADAPT_MODES)}"),
        "lora_r": (_whole(fields["lora_r"], 1), "a positive integer"),
        "lora_alpha": (_number(fields["lora_alpha"]) and fields["lora_alpha"] > 0, "a positive number"),
        "lora_dropout": (_number(fields["lora_dropout"]) and 0 <= fields["lora_dropout"] < 1, "a number in [0, 1)"),
        "lora_target_modules": (isinstance(fields["lora_target_modules"], (list, tuple))
                                and all(isinstance(name, str) and name for name in fields["lora_target_modules"]),
                                "a list of module names"),
    }
    for key, (valid, expected) in checks.items():
        if not valid:
            raise CheckpointError(f"{path}: model_config field {key}={fields[key]!r}; expected {expected}")
    d_model, hidden = tensors["shared_delta.fc_in.weight"].shape[1], tensors["shared_delta.fc_in.weight"].shape[0]
    if (fields["delta_hidden_dim"] or d_model // 4) != hidden:
        raise CheckpointError(f"{path}: model_config field delta_hidden_dim={fields['delta_hidden_dim']!r} says the "
                              f"DeltaMLP is {fields['delta_hidden_dim'] or d_model // 4} wide (null: d_model // 4), but "
                              f"fc1.weight has {hidden} rows")
    fields["lora_target_modules"] = list(fields["lora_target_modules"])
    return fields


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _metrics(metrics: Any, path: Path) -> dict[str, float]:
    if metrics is None:
        return {}
    if not isinstance(metrics, dict) or not all(isinstance(key, str) and _number(value)
                                                for key, value in metrics.items()):
        raise CheckpointError(f"{path}: final_metrics is {str(metrics)[:80]}; expected a dict of metric name -> "
                              "finite number (e.g. 'val/loss')")
    return {key: float(value) for key, value in metrics.items()}


def check_base(base: LoadedModel, graft: Graft) -> None:
    """Refuse a base the graft cannot go onto: not a Llama-family RoPE model, or of another width."""
    cfg, name = base.model.cfg, base.meta.get("name", "the base")
    if cfg.family not in BASE_FAMILIES or set(cfg.layer_mechanisms) != {ROPE_KIND}:
        raise CheckpointError(
            f"{graft.path} grafts learned positions onto a Llama-family RoPE model (family 'llama' or 'olmo2', every "
            f"layer RoPE), as the post grafts SmolLM2 and OLMo 2; the base {name} is family {cfg.family!r} with layer "
            f"kinds {sorted(set(cfg.layer_mechanisms))}: load it onto the model it was trained on "
            f"({graft.fields['base_model']})")
    if cfg.d_model != graft.d_model:
        raise CheckpointError(
            f"{graft.path}: delta_mlp_state_dict['fc1.weight'] reads {graft.d_model}-wide embeddings, but the base "
            f"{name} has d_model {cfg.d_model}; load it onto the model it was trained on ({graft.fields['base_model']})")


def graft_onto(base: LoadedModel, graft: Graft) -> LoadedModel:
    """``base`` with the graft's DeltaMLP: every layer ``lpi-graft``, the base's weights, dtype and device, the
    DeltaMLP in fp32; ``meta["authors"]`` records the file's config, step, metrics and notes."""
    check_base(base, graft)
    weight = base.model.embed.weight
    cfg = dataclasses.replace(base.model.cfg, layer_mechanisms=[GraftIncrementPositions.kind] * base.model.cfg.n_layers,
                              lpi_hidden=graft.hidden)
    tensors = {**base.model.state_dict(), **graft.tensors}
    model = build_strict(cfg, tensors, rename=str, dtype=weight.dtype, device=weight.device)
    model.shared_delta.float()  # fp32 whatever the base's dtype, as the post keeps its DeltaMLP
    with torch.no_grad():
        for name, parameter in model.shared_delta.named_parameters():
            parameter.copy_(graft.tensors[f"shared_delta.{name}"])
    name = base.meta.get("name") or "base"
    authors = {"code": CODE, "variant": f"delta graft ({graft.fields['adapt']})", "step": graft.step,
               "notes": graft_notes(graft, str(name), str(base.meta.get("dtype", ""))), "options": dict(graft.fields),
               "final_metrics": graft.final_metrics}
    meta = {**base.meta, "format": "increments-post-graft", "name": f"{name} + {graft.path.name}",
            "base": name, "graft": str(graft.path.resolve()), "authors": authors}
    return LoadedModel(model=model.eval(), tokenizer=base.tokenizer, meta=meta)


def graft_notes(graft: Graft, base_name: str, dtype: str) -> list[str]:
    """Where the grafted model differs from what the post evaluated, or needs saying."""
    fields = graft.fields
    notes = [f"positions are the exclusive running sum of δ (the first token at 0), δ = softplus(DeltaMLP(e)) of "
             f"{base_name}'s input embeddings, in fp32; the trace's increments are δ",
             f"its DeltaMLP was trained on {fields['base_model']}; here it reads the embeddings of {base_name}"]
    if fields["adapt"] == "lora":
        notes.append(f"the post trained LoRA adapters (rank {fields['lora_r']}, alpha {fields['lora_alpha']}, on "
                     f"{', '.join(fields['lora_target_modules'])}) together with δ; the file holds only the DeltaMLP, "
                     "so this is the base with the post's δ and without those adapters")
    else:
        notes.append("the post fine-tuned every base weight together with δ, embeddings included; the file holds only "
                     "the DeltaMLP, so δ reads the base's original embeddings (the post calls its own analysis of "
                     "such a run approximate) and the fine-tuned weights are absent")
    if not fields["delta_enabled"]:
        notes.append("delta_enabled is false: the post's run used integer positions and never trained this DeltaMLP")
    if dtype and dtype != "float32":
        notes.append(f"the DeltaMLP and the positions run in fp32 (as the post keeps them); the base runs in {dtype}")
    return notes
