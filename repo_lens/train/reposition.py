"""RePo's recipe on a pretrained RoPE language model, at laptop scale: continue training a Hugging
Face-format causal LM (e.g. ``zoo:smollm2-135m``) with RePo's position module in every layer from
⌈L/3⌉, RoPE kept below ("RePo: Language Models with Context Re-Positioning", arXiv 2512.14391, §3-4).

What is trained: each RePo layer's position module f (the authors' SwiGLU sub-layer on the block's
normed hidden state, d_p = d/8, and a linear map to one position per head) and low-rank adapters
(LoRA, rank 8) on the query, key, value and output projections of the same layers; every base weight
stays frozen, so the shipped difference is a few MB. The control (``mechanism="rope"``) trains the
same adapters on the same tokens with RoPE kept, so that what RePo changed can be told apart from
what the extra training on the text changed.

How the module starts: replacing RoPE's integer index by an untrained f (z ≈ 0: NoPE in layers
10-29) takes SmolLM2-135M's held-out loss from 3.32 to 5.05 nats per token. The authors recover from
that over 50B tokens; a laptop has a few million. So the positions are annealed: for the first
``anneal_steps`` steps a layer rotates by z = (1 - λ) · i + λ · f(h), λ rising linearly from 0 to 1,
and from then on by z = f(h) exactly as the authors define it. The model starts as the base (λ = 0)
and ends as RePo (λ = 1); the index i is never an input of f (the authors found that a RoPE-trained
model fed i as a feature falls back to it). During the anneal the shrinking index compresses RoPE's
positions toward 0 (as position interpolation does), while f learns to carry what they carried.

Training runs in bf16 autocast (fp32 master weights; the positions and rotations in fp32), seeded,
with a fixed held-out set (every tenth Brown document, never trained on), a loss log, checkpoints
every few steps and resumption from the last one.

Example (a tiny random Llama, a few steps):
    >>> from repo_lens.train.reposition import RepositionConfig
    >>> RepositionConfig(steps=500, batch_size=4, context=1024).tokens
    2048000
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.config import repo_start_layer
from repo_lens.model.increments import ContentPhasePositions, LayerIncrementPositions
from repo_lens.model.loaders.delta import DELTA_FILE, RECIPE_FILE
from repo_lens.model.registry import DEFAULT_KIND, ROPE_KIND
from repo_lens.model.transformer import LensModel
from repo_lens.run_lock import run_lock
from repo_lens.train.low_rank import add_low_rank, low_rank_factors
from repo_lens.train.schedule import learning_rate
from repo_lens.train.text_tokens import TextTokens

STATE_DIR = "train_state"
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj")
CONTENT_PHASE_KIND = ContentPhasePositions.kind  # GRAPE-M with a content-dependent phase: ω = softplus(W h + b)
LAYER_INCREMENT_KIND = LayerIncrementPositions.kind  # per-layer learned increments: δ = max · sigmoid(MLP(h))
RECIPE_KINDS = (DEFAULT_KIND, ROPE_KIND, CONTENT_PHASE_KIND, LAYER_INCREMENT_KIND)  # RePo, its control, and the two
# mechanisms that start exactly as the base's RoPE


@dataclass
class RepositionConfig:
    """The recipe's settings (``repo-lens train --base``)."""

    base: str = "zoo:smollm2-135m"
    corpus: str = "brown"  # the text trained on: "brown", or a corpus file, folder or saved dataset
    mechanism: str = DEFAULT_KIND  # one of RECIPE_KINDS
    first_layer: int | None = None  # first re-positioned layer; None = ⌈L/3⌉
    context: int = 1024
    batch_size: int = 4
    steps: int = 500
    lr: float = 1e-3  # the adapters'
    position_lr: float = 1e-3  # the position modules'
    warmup: int = 20
    anneal_steps: int = 200  # λ rises from 0 to 1 over these steps (RePo only)
    lora_rank: int = 8
    lora_alpha: float = 16.0
    position_init_std: float = 0.02
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_sequences: int = 8
    checkpoint_every: int = 10
    seed: int = 0
    threads: int | None = None
    autocast: bool = True  # bf16 autocast; the command turns it on where native_bf16() says so

    @property
    def tokens(self) -> int:
        """Tokens trained on: steps × batch × context."""
        return self.steps * self.batch_size * self.context

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def native_bf16(device: str | torch.device = "cpu") -> bool:
    """Whether ``device`` computes bf16 natively: a GPU that supports it, or a CPU with AMX or AVX512-BF16
    (there bf16 autocast made a training step 3-4x faster; on an AVX2-only CPU it is several times slower).

    >>> isinstance(native_bf16("cpu"), bool)
    True
    """
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return " amx_bf16" in flags or " avx512_bf16" in flags


def first_layer_of(cfg: RepositionConfig, n_layers: int) -> int:
    return repo_start_layer(n_layers) if cfg.first_layer is None else int(cfg.first_layer)


def repositioned_model(base: LensModel, cfg: RepositionConfig) -> LensModel:
    """A copy of ``base`` with ``cfg.mechanism`` from the first re-positioned layer on (RoPE below), every
    base weight frozen, new position modules (see :func:`start_position_modules`) and zero-started adapters
    on the attention projections of the re-positioned layers (trainable)."""
    if cfg.mechanism not in RECIPE_KINDS:
        raise InputError(f"mechanism must be one of {', '.join(RECIPE_KINDS)} ('repo': RePo from layer ⌈L/3⌉, "
                         f"'rope': the control), got {cfg.mechanism!r}")
    n_layers = base.cfg.n_layers
    first = first_layer_of(cfg, n_layers)
    if not 0 <= first < n_layers:
        raise InputError(f"first_layer must be in 0..{n_layers - 1} for a {n_layers}-layer model, got {first}")
    if set(base.cfg.layer_mechanisms) != {ROPE_KIND}:
        raise InputError(f"the base must be a RoPE model (every layer 'rope'), got {base.cfg.layer_mechanisms}")
    kinds = [ROPE_KIND] * first + [cfg.mechanism] * (n_layers - first)
    model = LensModel(dataclasses.replace(base.cfg, layer_mechanisms=kinds))
    torch.manual_seed(cfg.seed)
    result = model.load_state_dict(base.state_dict(), strict=False)
    new = [name for name in result.missing_keys if ".attn.positions." not in name]
    if new or result.unexpected_keys:
        raise CheckpointError(f"the base's weights do not fit the re-positioned model: missing {new[:5]}, "
                              f"unexpected {result.unexpected_keys[:5]}")
    for name, param in model.named_parameters():
        param.requires_grad_(".attn.positions." in name)
    start_position_modules(model, cfg)
    add_low_rank(model, [f"blocks.{layer}.attn.{proj}" for layer in range(first, n_layers) for proj in ADAPTED],
                 rank=cfg.lora_rank, alpha=cfg.lora_alpha)
    return model.to(next(base.parameters()).device)


def start_position_modules(model: LensModel, cfg: RepositionConfig) -> None:
    """Initialise every re-positioned layer's position module.

    - RePo: every weight N(0, ``position_init_std``), as the authors start f (z ≈ 0, annealed from the index).
    - GRAPE-M: W = 0 and b = softplus⁻¹(1), so ω = 1 and the phase Σ_{s<t} ω_s is the index t: the layer is
      the base's RoPE exactly.
    - per-layer learned increments: the DeltaMLP's input layer at PyTorch's default initialisation (seeded),
      its output weight 0 and its bias logit(1/max), so δ = 1 and the positions are t + 1 (RoPE shifted by
      one, which q·k cannot see).

    The model starts as the base whenever the mechanism allows (RePo through the anneal).
    """
    torch.manual_seed(cfg.seed)
    for block in model.blocks:
        module = block.attn.positions
        if hasattr(module, "start_at_integers"):  # GRAPE-M, the per-layer increments
            module.start_at_integers()
        elif module.kind == DEFAULT_KIND:
            for param in module.parameters():
                torch.nn.init.normal_(param, std=cfg.position_init_std)


class PositionAnneal:
    """z = (1 - λ) · i + λ · f(h) on every RePo layer's position module (a forward hook), λ settable;
    at λ = 1 the hooks leave f's output untouched."""

    def __init__(self, model: LensModel) -> None:
        self.value = 0.0
        self.handles = [block.attn.positions.register_forward_hook(self._blend)
                        for block in model.blocks if block.attn.kind == DEFAULT_KIND]

    def _blend(self, module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if self.value >= 1.0:
            return None
        h, offset = args[0], (args[1] if len(args) > 1 else 0)
        index = torch.arange(offset, offset + h.shape[1], device=output.device, dtype=torch.float32)
        return (1.0 - self.value) * index + self.value * output.float()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def anneal_value(step: int, anneal_steps: int) -> float:
    """λ at ``step``: linear from 0 to 1 over ``anneal_steps`` steps, then 1.

    >>> [anneal_value(s, 4) for s in (0, 2, 4, 9)]
    [0.0, 0.5, 1.0, 1.0]
    """
    return 1.0 if anneal_steps <= 0 else min(1.0, step / anneal_steps)


def trainable_state(model: LensModel) -> dict[str, torch.Tensor]:
    """What training changed: the position modules' weights and the adapters' factors."""
    out = {name: param.detach() for name, param in model.named_parameters()
           if ".attn.positions." in name}
    out.update(low_rank_factors(model))
    return {name: tensor.contiguous() for name, tensor in out.items()}


def _optimizer(model: LensModel, cfg: RepositionConfig) -> torch.optim.AdamW:
    positions = [p for n, p in model.named_parameters() if p.requires_grad and ".attn.positions." in n]
    adapters = [p for n, p in model.named_parameters() if p.requires_grad and ".attn.positions." not in n]
    groups = [{"params": adapters, "peak": cfg.lr}]
    if positions:
        groups.append({"params": positions, "peak": cfg.position_lr})
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)


def _autocast(cfg: RepositionConfig, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.autocast)


def held_out_bits(model: LensModel, sequences: torch.Tensor, cfg: RepositionConfig,
                  batch_size: int = 4) -> float:
    """Mean bits per predicted token of ``model`` on ``sequences`` [n, context + 1]."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad(), _autocast(cfg, device):
        for start in range(0, len(sequences), batch_size):
            batch = sequences[start:start + batch_size].to(device)
            logits = model(batch[:, :-1]).float()
            total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(),
                                                       reduction="sum").item()
            count += batch[:, 1:].numel()
    return total / count / math.log(2)


def train_repositioned(cfg: RepositionConfig, base: LensModel, text: TextTokens, directory: str | Path, *,
                       progress: bool = True) -> dict[str, Any]:
    """Train the recipe into ``directory`` (resuming from its last checkpoint) and write the shipped
    difference (``delta.safetensors``: the position modules and the adapters' factors, bf16) with
    ``recipe.json``; returns the run's summary (steps, tokens, wall seconds, the loss log)."""
    directory = ensure_dir(Path(directory))
    with run_lock(directory):
        return _train(cfg, base, text, directory, progress)


def _train(cfg: RepositionConfig, base: LensModel, text: TextTokens, directory: Path,
           progress: bool) -> dict[str, Any]:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = repositioned_model(base, cfg)
    device = next(model.parameters()).device
    optimizer = _optimizer(model, cfg)
    step, log, wall = _resume(directory, cfg, model, optimizer)
    anneal = PositionAnneal(model)
    held_out = text.held_out_sequences(cfg.context)[:cfg.eval_sequences]
    if step == 0:
        model.eval()
        anneal.value = 0.0
        log.append({"step": 0, "tokens": 0, "held_out_bits": held_out_bits(model, held_out, cfg)})
    model.train()
    started = time.perf_counter() - wall
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {cfg.mechanism} on {cfg.base}", disable=not progress)
    while step < cfg.steps:
        lr_factor = learning_rate(step, 1.0, cfg.warmup, cfg.steps)
        for group in optimizer.param_groups:
            group["lr"] = group["peak"] * lr_factor
        anneal.value = anneal_value(step, cfg.anneal_steps)
        batch = text.train_batch(step, cfg.batch_size, cfg.context, seed=cfg.seed).to(device)
        with _autocast(cfg, device):
            logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}; lower the learning rate")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        optimizer.step()
        step += 1
        entry: dict[str, Any] = {"step": step, "tokens": step * cfg.batch_size * cfg.context,
                                 "train_bits": loss.item() / math.log(2), "lr_factor": lr_factor,
                                 "anneal": anneal.value, "wall_seconds": round(time.perf_counter() - started, 1)}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            entry["held_out_bits"] = held_out_bits(model, held_out, cfg)
            model.train()
            blend = f" (λ = {anneal.value:.2f})" if anneal.handles else ""
            bar.write(f"step {step}: held-out {entry['held_out_bits']:.4f} bits/token{blend}")
        log.append(entry)
        bar.update(1)
        bar.set_postfix(bits=f"{entry['train_bits']:.3f}", **({"anneal": f"{anneal.value:.2f}"} if anneal.handles else {}))
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            _save_state(directory, cfg, model, optimizer, step, log, time.perf_counter() - started)
    bar.close()
    anneal.remove()
    wall = time.perf_counter() - started
    summary = {"recipe": cfg.to_dict(), "steps": step, "tokens": cfg.tokens, "wall_seconds": round(wall, 1),
               "first_layer": first_layer_of(cfg, base.cfg.n_layers), "log": log}
    ship_delta(model, cfg, directory, summary)
    return summary


def ship_delta(model: LensModel, cfg: RepositionConfig, directory: Path, summary: dict[str, Any]) -> Path:
    """``delta.safetensors`` (what training changed, bf16) and ``recipe.json`` (how to rebuild the model
    from the base, and the run's summary) in ``directory``."""
    tensors = {name: tensor.to(torch.bfloat16) for name, tensor in trainable_state(model).items()}
    atomic_write(directory / DELTA_FILE, lambda temp: save_file(tensors, str(temp)))
    recipe = {"base": cfg.base, "mechanism": cfg.mechanism, "first_layer": summary["first_layer"],
              "lora_rank": cfg.lora_rank, "lora_alpha": cfg.lora_alpha, "adapted": list(ADAPTED), **summary}
    atomic_write_bytes(directory / RECIPE_FILE, json.dumps(recipe, indent=1).encode())
    return directory / DELTA_FILE


def _save_state(directory: Path, cfg: RepositionConfig, model: LensModel, optimizer: torch.optim.Optimizer,
                step: int, log: list, wall: float) -> None:
    state = ensure_dir(directory / STATE_DIR)
    weights = trainable_state(model)
    atomic_write(state / "trainable.safetensors", lambda temp: save_file(weights, str(temp)))
    # the optimizer's own state_dict: tensors, numbers and lists only (read back with weights_only=True)
    atomic_write(state / "optimizer.pt", lambda temp: torch.save(optimizer.state_dict(), temp))
    atomic_write_bytes(state / "progress.json", json.dumps(
        {"step": step, "wall_seconds": wall, "recipe": cfg.to_dict(), "log": log}).encode())


def _resume(directory: Path, cfg: RepositionConfig, model: LensModel,
            optimizer: torch.optim.Optimizer) -> tuple[int, list, float]:
    progress_file = directory / STATE_DIR / "progress.json"
    if not progress_file.exists():
        return 0, [], 0.0
    progress = json.loads(progress_file.read_text())
    defaults = RepositionConfig().to_dict()  # a setting a run saved before it existed had its default
    saved = {key: progress["recipe"].get(key, defaults[key]) for key in defaults if key != "threads"}
    wanted = {key: value for key, value in cfg.to_dict().items() if key != "threads"}
    if saved != wanted:
        changed = sorted(key for key in wanted if saved.get(key) != wanted[key])
        raise InputError(f"{directory} holds a run with other settings ({', '.join(changed)} differ); resume it "
                         "with the same settings, or choose another --out")
    try:
        weights = load_file(str(directory / STATE_DIR / "trainable.safetensors"))
        current = trainable_state(model)
        if set(weights) != set(current):
            raise KeyError(f"{len(set(weights) ^ set(current))} tensor names differ")
        parameters, modules = dict(model.named_parameters()), dict(model.named_modules())
        with torch.no_grad():
            for name, tensor in weights.items():
                if name in parameters:
                    parameters[name].copy_(tensor)
                else:  # an adapter's factor, "<module>.lora_A" / "<module>.lora_B"
                    module, factor = name.rsplit(".", 1)
                    getattr(modules[module].parametrizations.weight[0], factor).copy_(tensor)
        optimizer.load_state_dict(torch.load(directory / STATE_DIR / "optimizer.pt", weights_only=True))
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"cannot resume from {directory / STATE_DIR} ({type(error).__name__}: "
                              f"{str(error)[:200]}); delete it to start over, or choose another --out") from None
    return int(progress["step"]), list(progress["log"]), float(progress["wall_seconds"])
