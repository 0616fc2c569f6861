"""A small, readable training loop: AdamW, warm-up + cosine, clipping, periodic validation,
progress bar, seeded, resumable, on the CPU or a GPU (bf16 autocast where the GPU computes bf16 natively).
Checkpoints are safetensors + JSON; the resumable state adds the optimizer's state_dict, read back with
``torch.load(weights_only=True)`` (no objects unpickled). Every saved tensor is a CPU tensor, so a run
started on one device resumes on another."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from repo_lens.model.config import ModelConfig
from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError, InputError, TrainingDivergedError
from repo_lens.model.loaders.device import resolve_device
from repo_lens.model.loaders.native.format import save_checkpoint
from repo_lens.model.loaders.native.quantized import STORAGE_LEVELS, stored_values
from repo_lens.model.registry import default_layer_kinds
from repo_lens.model.transformer import LensModel
from repo_lens.run_lock import run_lock
from repo_lens.train.config import TrainConfig
from repo_lens.train.reposition import native_bf16
from repo_lens.train.schedule import learning_rate
from repo_lens.train.tasks import IGNORE

STATE_DIR = "train_state"
OPTIMIZER_FILE = "optimizer.pt"  # AdamW's state_dict (torch.save; loaded with weights_only=True)
CONFIG_FILE = "train_config.json"  # the run's TrainConfig, compared with the asked one when the run resumes
# the settings that say where and how a run computes, not what it trains: a resumed run may change them
RUN_SETTINGS = ("device", "autocast", "threads")


@dataclass
class TrainResult:
    directory: Path
    steps: int
    wall_seconds: float
    metrics: dict[str, float]
    history: list[dict[str, Any]] = field(default_factory=list)


def layer_mechanisms(cfg: TrainConfig) -> list[str]:
    """A mechanism whose source keeps RoPE in the lower layers (RePo) starts at ``repo_from`` (default
    ⌈L/3⌉, RePo §3.2); every other mechanism replaces the position encoding of every layer, as its
    source does (the learned-increments post and the GRAPE and CoPE papers). The registry says which is which."""
    return default_layer_kinds(cfg.mechanism, cfg.n_layers, first_layer=cfg.repo_from)


def build_model(cfg: TrainConfig, vocab_size: int) -> LensModel:
    """The architecture a TrainConfig describes, initialised N(0, 0.02) (norms at 1; a decay's forget gate keeps
    its output bias, α ≈ 0.999 at the start), seeded."""
    mechanisms = layer_mechanisms(cfg)
    model_cfg = ModelConfig(family=cfg.family, vocab_size=vocab_size, d_model=cfg.d_model, n_layers=cfg.n_layers,
                            n_heads=cfg.n_heads, d_mlp=cfg.d_mlp, max_position_embeddings=cfg.context,
                            layer_mechanisms=mechanisms, decay=cfg.decay, tie_word_embeddings=cfg.tie_embeddings)
    torch.manual_seed(cfg.seed)
    model = LensModel(model_cfg)
    position_std = 0.02 if cfg.position_init_std is None else cfg.position_init_std
    for name, param in model.named_parameters():
        if param.ndim >= 2:
            torch.nn.init.normal_(param, std=position_std if is_position_parameter(name) else 0.02)
    return model


def is_position_parameter(name: str) -> bool:
    """A parameter of a layer's learned position module (``blocks.N.attn.mechanism.*``, e.g. RePo's f)."""
    return ".attn.mechanism." in f".{name}"


def _optimizer(model: LensModel, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only; the position modules' learning rate × ``position_lr_scale``
    (each group's ``lr_scale``, applied by the schedule)."""
    groups = []
    for position in (False, True):
        named = [(n, p) for n, p in model.named_parameters() if is_position_parameter(n) == position]
        scale = cfg.position_lr_scale if position else 1.0
        groups += [{"params": [p for _, p in named if p.ndim >= 2], "weight_decay": cfg.weight_decay,
                    "lr_scale": scale},
                   {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0, "lr_scale": scale}]
    return torch.optim.AdamW([group for group in groups if group["params"]], lr=cfg.lr, betas=(0.9, 0.95))


def training_device_of(cfg: TrainConfig) -> torch.device:
    """The device ``cfg.device`` names ("auto": CUDA where present, else the CPU), refused with an InputError
    naming it and the fix when this machine does not have it.

    >>> training_device_of(TrainConfig(task="bytes"))
    device(type='cpu')
    """
    try:
        return resolve_device(cfg.device)
    except InputError as error:
        raise InputError(f"cannot train on device {cfg.device!r}: {error} (on the command line: --device cpu or "
                         "auto)") from None


def uses_autocast(cfg: TrainConfig, device: torch.device) -> bool:
    """Whether the forward pass runs in bf16 autocast on ``device``: ``cfg.autocast`` where set, else only on a
    GPU that computes bf16 natively (fp32 on the CPU).

    >>> uses_autocast(TrainConfig(task="bytes"), torch.device("cpu"))
    False
    """
    if cfg.autocast is not None:
        return cfg.autocast
    return device.type == "cuda" and native_bf16(device)


def _save_state(directory: Path, model, optimizer, step: int, history, wall: float) -> None:
    state_dir = ensure_dir(directory / STATE_DIR)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        tensors.pop("model.unembed.weight", None)
    atomic_write(state_dir / "state.safetensors", lambda temp: save_file(tensors, str(temp)))
    # the optimizer's own state_dict, its tensors on the CPU: tensors, numbers and lists only (read back with
    # weights_only=True)
    atomic_write(state_dir / OPTIMIZER_FILE, lambda temp: torch.save(_on_cpu(optimizer.state_dict()), temp))
    atomic_write_bytes(state_dir / "progress.json",
                       json.dumps({"step": step, "history": history, "wall_seconds": wall}).encode())


def _on_cpu(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state_dict with its per-parameter tensors on the CPU (the groups' settings as they are)."""
    return {**state, "state": {index: {key: value.cpu() if isinstance(value, torch.Tensor) else value
                                       for key, value in entry.items()}
                               for index, entry in state["state"].items()}}


def _load_state(directory: Path, model, optimizer) -> tuple[int, list, float]:
    """Load the saved state (CPU tensors) into ``model`` and ``optimizer``, which move it to their device."""
    state_dir = directory / STATE_DIR
    tensors = load_file(str(state_dir / "state.safetensors"), device="cpu")
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")},
                          strict=not model.cfg.tie_word_embeddings)
    optimizer.load_state_dict(torch.load(state_dir / OPTIMIZER_FILE, weights_only=True, map_location="cpu"))
    progress = json.loads((state_dir / "progress.json").read_text())
    return int(progress["step"]), progress["history"], float(progress["wall_seconds"])


def train(cfg: TrainConfig, task, directory: str | Path, progress: bool = True,
          info: dict[str, Any] | None = None) -> TrainResult:
    """Train a model on ``task`` into ``directory``; resumes from its train_state if present.

    The model trains on ``cfg.device`` (refused before anything is written when this machine lacks it); the
    final model is written as a repo_lens checkpoint (loadable by ``repo_lens.load``), its tensors on the CPU.
    A run resumes only with the settings it started with (the device, autocast and threads may change).
    One process trains into ``directory`` at a time: a second is refused with
    :class:`repo_lens.RunInUseError` naming the first.
    """
    training_device_of(cfg)
    with run_lock(directory):
        return _train(cfg, task, Path(directory), progress, info)


def _train(cfg: TrainConfig, task, directory: Path, progress: bool, info: dict[str, Any] | None) -> TrainResult:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = training_device_of(cfg)
    autocast = uses_autocast(cfg, device)
    model = build_model(cfg, task.vocab_size).to(device)  # built on the CPU: the same start on every device
    optimizer = _optimizer(model, cfg)
    step, history, wall = _resume(directory, model, optimizer)
    if step:
        _check_same_recipe(directory, cfg)
    atomic_write_bytes(directory / CONFIG_FILE, json.dumps(cfg.to_dict(), indent=2).encode())
    model.train()
    started = time.perf_counter() - wall
    what = cfg.mechanism if cfg.decay == "none" else f"{cfg.mechanism}+{cfg.decay}"
    where = "" if device.type == "cpu" else f" on {device}" + (" (bf16 autocast)" if autocast else "")
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {cfg.task}/{what}{where}", disable=not progress)
    while step < cfg.steps:
        loss, lr = _train_step(cfg, task, model, optimizer, step, autocast)
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            metrics = task.progress_metrics(model)
            model.train()
            history.append({"step": step, "train_loss": loss, **metrics})
            bar.write(f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in history[-1].items() if k != "step"))
        if cfg.snapshot_every and step % cfg.snapshot_every == 0 and step < cfg.steps:
            _snapshot(cfg, task, model, directory, step)
        if step % cfg.checkpoint_every == 0 and step < cfg.steps:
            _save_state(directory, model, optimizer, step, history, time.perf_counter() - started)
    bar.close()
    wall = time.perf_counter() - started
    final = _ship(cfg, task, model, directory, info, steps=step, wall=wall, history=history)
    _save_state(directory, model, optimizer, step, history, wall)
    return TrainResult(directory, step, wall, final, history)


def shipped_precision(cfg: TrainConfig) -> tuple[torch.dtype, str | None]:
    """(float dtype of the saved tensors, quantized storage or None) of ``cfg.ship_dtype``: a float dtype is
    itself with no storage; "int8", "int7" and "int6" store the 2-D weights quantized, the rest in bfloat16.

    >>> shipped_precision(TrainConfig(task="bytes", ship_dtype="int6"))
    (torch.bfloat16, 'int6')
    """
    if cfg.ship_dtype in STORAGE_LEVELS:
        return torch.bfloat16, cfg.ship_dtype
    return getattr(torch, cfg.ship_dtype), None


def _snapshot(cfg: TrainConfig, task, model: LensModel, directory: Path, step: int) -> None:
    """A loadable copy of the model at ``step`` in ``snapshots/step_<step>/`` (weights in the shipped dtype
    or storage; the training weights themselves stay unrounded)."""
    dtype, storage = shipped_precision(cfg)
    save_checkpoint(model, directory / "snapshots" / f"step_{step}", tokenizer=task.tokenizer_kind,
                    info={"step": step, "train_config": cfg.to_dict()}, dtype=dtype, storage=storage)


def _resume(directory: Path, model: LensModel, optimizer) -> tuple[int, list, float]:
    """(step, history, wall seconds) of the training state saved in ``directory``, loaded into
    ``model`` and ``optimizer``; (0, [], 0.0) for a fresh directory. Refuses a damaged state and a
    directory that holds a model but no state."""
    if (directory / STATE_DIR / "progress.json").exists():
        try:
            return _load_state(directory, model, optimizer)
        # a damaged state, or one of another preset or mechanism
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, SafetensorError,
                pickle.UnpicklingError) as error:
            cause = (f"{OPTIMIZER_FILE} holds more than tensors and numbers, and is never unpickled"
                     if isinstance(error, pickle.UnpicklingError) else f"{type(error).__name__}: {str(error)[:200]}")
            raise CheckpointError(f"cannot resume from {directory / STATE_DIR} ({cause}); it is damaged or from "
                                  "another preset or mechanism: delete it to start over, or choose another --out"
                                  ) from None
    if (directory / "model.safetensors").exists() and not (directory / CONFIG_FILE).exists():
        raise InputError(f"{directory} already holds a model but no {STATE_DIR}/ to resume from; training would "
                         "overwrite it: choose a new or empty output directory")
    return 0, [], 0.0


def _check_same_recipe(directory: Path, cfg: TrainConfig) -> None:
    """Refuse to resume a run that started with other settings than ``cfg`` (every field but
    :data:`RUN_SETTINGS`); a field its train_config.json lacks (saved before the field existed) counts as its
    default."""
    path = directory / CONFIG_FILE
    if not path.exists():
        return
    try:
        saved = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        saved = error
    if not isinstance(saved, dict):
        held = (f"is not readable JSON ({type(saved).__name__})" if isinstance(saved, Exception)
                else f"holds a {type(saved).__name__}")
        raise CheckpointError(f"cannot resume from {directory / STATE_DIR}: {path} {held}, not the run's settings; "
                              f"delete {directory} to start over, or choose another --out")
    defaults = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(TrainConfig)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    wanted = json.loads(json.dumps(cfg.to_dict()))  # as saved: tuples as lists
    changed = [f"{key} {saved.get(key, defaults.get(key))!r} there, {wanted.get(key)!r} asked"
               for key in sorted(set(wanted) | set(saved))
               if key not in RUN_SETTINGS and saved.get(key, defaults.get(key)) != wanted.get(key)]
    if changed:
        raise InputError(f"{directory} holds a run that started with other settings ({'; '.join(changed)}); resume "
                         "it with the settings it started with (only --device, --no-autocast and --threads may "
                         "change), or choose another --out")


def _train_step(cfg: TrainConfig, task, model: LensModel, optimizer, step: int,
                autocast: bool = False) -> tuple[float, float]:
    """One optimizer step at ``step`` on the model's device, the forward in bf16 autocast when ``autocast`` (the
    loss in fp32): (the batch's loss, the learning rate)."""
    lr = learning_rate(step, cfg.lr, cfg.warmup, cfg.steps)
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]
    device = next(model.parameters()).device
    # a task may weigh each target (mixture.py)
    inputs, targets, *weights = (tensor.to(device) for tensor in task.train_batch(step))
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(inputs)
    logits = logits.float()
    if weights:
        per_token = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        loss = (per_token * weights[0].flatten()).sum() / weights[0].sum()
    else:
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    if not math.isfinite(loss.item()):
        raise TrainingDivergedError(f"the training loss became {loss.item()} at step {step}; lower the learning "
                                    "rate (lr=; on the command line --position-lr-scale for the position module) "
                                    "or try another --seed")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    return loss.item(), lr


def _ship(cfg: TrainConfig, task, model: LensModel, directory: Path, info: dict[str, Any] | None, *,
          steps: int, wall: float, history: list) -> dict[str, Any]:
    """Round the weights to the shipped dtype (or storage), measure the final metrics on them and save the
    checkpoint with its card (the run's steps, wall seconds and history, then ``info``); returns the final
    metrics. A float dtype rounds the model's weights in place; a quantized storage measures the weights a
    load of the checkpoint gives back and then puts the unrounded training weights back."""
    model.eval()
    ship_dtype, storage = shipped_precision(cfg)
    training_weights = None
    with torch.no_grad():  # measure what is shipped: weights rounded to the saved dtype
        if storage is None:
            for param in model.parameters():
                param.copy_(param.to(ship_dtype).float())
        else:
            training_weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
            model.load_state_dict(stored_values(model.state_dict(), STORAGE_LEVELS[storage], ship_dtype))
    final = task.final_metrics(model)
    card = {"train_config": cfg.to_dict(), "steps": steps, "wall_seconds": round(wall, 1),
            "parameters": sum(p.numel() for p in model.parameters()), "metrics": final, "history": history,
            **(info or {})}
    save_checkpoint(model, directory, tokenizer=task.tokenizer_kind, info=card, dtype=ship_dtype, storage=storage)
    if training_weights is not None:
        model.load_state_dict(training_weights)
    if task.tokenizer_kind == "hf":
        task.save_tokenizer(directory)
    return final
