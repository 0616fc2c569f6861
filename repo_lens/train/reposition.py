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
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError, InputError, TrainingDivergedError
from repo_lens.model.config import repo_start_layer
from repo_lens.model.former_names import current_state_key
from repo_lens.model.grafted_increments import GraftIncrementPositions
from repo_lens.model.increments import ContentPhasePositions, LayerIncrementPositions, is_position_weight
from repo_lens.model.loaders.native.delta import DELTA_FILE, RECIPE_FILE
from repo_lens.model.registry import DEFAULT_KIND, ROPE_KIND, mechanism_traits, recipe_kinds
from repo_lens.model.transformer import LensModel
from repo_lens.run_lock import run_lock
from repo_lens.train.low_rank import add_low_rank, low_rank_factors
from repo_lens.train.schedule import learning_rate
from repo_lens.train.text_tokens import TextTokens

STATE_DIR = "train_state"
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj")
CONTENT_PHASE_KIND = ContentPhasePositions.kind  # GRAPE-M with a content-dependent phase: ω = softplus(W h + b)
LAYER_INCREMENT_KIND = LayerIncrementPositions.kind  # per-layer learned increments: δ = max · sigmoid(MLP(h))
GRAFT_KIND = GraftIncrementPositions.kind  # the learned-increments post's graft: exclusive Σ softplus(MLP(embedding))
# the kinds the recipe trains (the registry's ``recipe`` trait), RePo first: its default, then RoPE (the control) and
# the mechanisms that start as the base's RoPE, in registration order
RECIPE_KINDS: tuple[str, ...] = tuple(sorted(recipe_kinds(), key=lambda kind: kind != DEFAULT_KIND))
# the graft's own default: its δ reaches every layer, as the post's position_ids do, so every layer is re-positioned;
# the adapters are the control's (rank, scale, learning rates and layers ⌈L/3⌉+: see adapters_from_of), so that the
# graft and its control differ in δ alone (the post's experiments/delta_graft used LoRA r 16, alpha 32 on every layer
# and one learning rate 2e-4 on SmolLM2-1.7B: recipe_config(GRAFT_KIND, adapters_from=0, lora_rank=16,
# lora_alpha=32.0, lr=2e-4, position_lr=2e-4))
GRAFT_SETTINGS: dict[str, Any] = {"first_layer": 0}
GRAFT_FAMILIES = ("llama", "olmo2")  # Llama-family blocks: one rotary, fed by the positions
SHARED_PREFIX = "shared_delta."  # the weights of the increments every layer shares (LensModel.shared_delta)


@dataclass
class RepositionConfig:
    """The recipe's settings (``repo-lens train --base``)."""

    base: str = "zoo:smollm2-135m"
    corpus: str = "brown"  # the text trained on: "brown", or a corpus file, folder or saved dataset
    mechanism: str = DEFAULT_KIND  # one of RECIPE_KINDS
    first_layer: int | None = None  # first re-positioned layer; None = ⌈L/3⌉
    adapters_from: int | None = None  # first adapted layer; None = the control's (see adapters_from_of)
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


_WHOLE = {"steps": (1, None), "context": (1, None), "batch_size": (1, None), "warmup": (0, None),
          "anneal_steps": (0, None), "lora_rank": (1, None), "eval_every": (1, None), "eval_sequences": (1, None),
          "checkpoint_every": (1, None), "seed": (0, 2**32 - 1)}
_OPTIONAL_WHOLE = {"first_layer": 0, "adapters_from": 0, "threads": 1}  # None or a whole number ≥ this
_POSITIVE = ("lr", "position_lr", "lora_alpha", "position_init_std", "grad_clip")
_NOT_NEGATIVE = ("weight_decay",)
_TEXT = ("base", "corpus", "mechanism")


def recipe_choices() -> str:
    """The mechanisms the recipe trains, each with what it is (its ``recipe`` trait), for messages.

    >>> recipe_choices().split(", ")[:2]
    ["RePo ('--mechanism repo')", "the RoPE control ('--mechanism rope')"]
    """
    described = [f"{mechanism_traits(kind).recipe} ('--mechanism {kind}')" for kind in RECIPE_KINDS]
    return ", ".join(described[:-1]) + (" or " if len(described) > 1 else "") + described[-1]


def recipe_config(mechanism: str = DEFAULT_KIND, **settings: Any) -> RepositionConfig:
    """The recipe's settings for ``mechanism``: its own defaults (the post's graft: :data:`GRAFT_SETTINGS`), then
    ``settings``.

    >>> cfg = recipe_config(GRAFT_KIND, steps=10)
    >>> cfg.lora_rank, cfg.lora_alpha, cfg.first_layer, adapters_from_of(cfg, 30), cfg.steps
    (8, 16.0, 0, 10, 10)
    """
    defaults = GRAFT_SETTINGS if mechanism == GRAFT_KIND else {}
    return RepositionConfig(**{**defaults, **settings, "mechanism": mechanism})


def setting_problems(settings: dict[str, Any]) -> list[str]:
    """What is wrong with each recipe setting in ``settings`` (a :meth:`RepositionConfig.to_dict`), as
    "NAME is VALUE, expected WHAT"; empty when every setting has its type and range.

    >>> setting_problems({**RepositionConfig().to_dict(), "steps": -5, "lr": float("nan")})
    ['steps is -5, expected a whole number ≥ 1', 'lr is nan, expected a finite number > 0']
    """
    problems = []
    for key, value in settings.items():
        whole = isinstance(value, int) and not isinstance(value, bool)
        number = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and math.isfinite(value))
        if key in _WHOLE:
            low, high = _WHOLE[key]
            bounds = f"≥ {low}" if high is None else f"within [{low}, {high}]"
            if not whole or value < low or (high is not None and value > high):
                problems.append(f"{key} is {value!r}, expected a whole number {bounds}")
        elif key in _OPTIONAL_WHOLE:
            if value is not None and (not whole or value < _OPTIONAL_WHOLE[key]):
                problems.append(f"{key} is {value!r}, expected null or a whole number ≥ {_OPTIONAL_WHOLE[key]}")
        elif key in _POSITIVE:
            if not number or value <= 0:
                problems.append(f"{key} is {value!r}, expected a finite number > 0")
        elif key in _NOT_NEGATIVE:
            if not number or value < 0:
                problems.append(f"{key} is {value!r}, expected a finite number ≥ 0")
        elif key in _TEXT:
            if not isinstance(value, str) or not value:
                problems.append(f"{key} is {value!r}, expected a non-empty string")
        elif key == "autocast" and not isinstance(value, bool):
            problems.append(f"autocast is {value!r}, expected true or false")
    return problems


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
    """The first re-positioned layer: ``cfg.first_layer``, else 0 for the post's graft (its positions reach every
    layer) and ⌈L/3⌉ for the other mechanisms."""
    if cfg.first_layer is not None:
        return int(cfg.first_layer)
    return 0 if cfg.mechanism == GRAFT_KIND else repo_start_layer(n_layers)


def adapters_from_of(cfg: RepositionConfig, n_layers: int) -> int:
    """The first layer whose attention gets adapters: ``cfg.adapters_from``, else the control's, ⌈L/3⌉, for the
    post's graft (which re-positions every layer, so that it and the control differ in δ alone) and the first
    re-positioned layer for the other mechanisms."""
    if cfg.adapters_from is not None:
        return int(cfg.adapters_from)
    return repo_start_layer(n_layers) if cfg.mechanism == GRAFT_KIND else first_layer_of(cfg, n_layers)


def check_recipe(cfg: RepositionConfig, base: LensModel) -> None:
    """Refuse settings out of type or range, a mechanism the recipe does not train, a first layer the base does
    not have and a base that is not a RoPE model (every layer ``rope``), before anything is written."""
    problems = setting_problems(cfg.to_dict())
    if problems:
        raise InputError(f"the recipe's settings are out of range: {'; '.join(problems)}")
    if cfg.mechanism not in RECIPE_KINDS:
        choices = ", ".join(f"{kind!r} ({mechanism_traits(kind).recipe})" for kind in RECIPE_KINDS)
        raise InputError(f"mechanism must be one of {choices}, got {cfg.mechanism!r}")
    n_layers = base.cfg.n_layers
    first = first_layer_of(cfg, n_layers)
    if not 0 <= first < n_layers:
        raise InputError(f"first_layer must be in 0..{n_layers - 1} for a {n_layers}-layer model, got {first}")
    adapted = adapters_from_of(cfg, n_layers)
    if not 0 <= adapted < n_layers:
        raise InputError(f"adapters_from (--adapters-from) must be in 0..{n_layers - 1} for a {n_layers}-layer "
                         f"model, got {adapted}; name one of the base's layers")
    if set(base.cfg.layer_mechanisms) != {ROPE_KIND}:
        raise InputError(f"the base must be a RoPE model (every layer 'rope'), got {base.cfg.layer_mechanisms}; "
                         "the recipe puts the learned mechanism into a RoPE model, so start from one (e.g. a "
                         "`repo-lens tiny --mechanism rope` checkpoint, zoo:bytes-rope or zoo:smollm2-135m)")
    if cfg.mechanism == GRAFT_KIND and base.cfg.family not in GRAFT_FAMILIES:
        raise InputError(f"the post's graft goes onto a Llama-family model (block family {' or '.join(GRAFT_FAMILIES)}"
                         f"), got family {base.cfg.family!r}; start from e.g. zoo:smollm2-135m")


CHECKPOINT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def check_out_directory(directory: str | Path) -> None:
    """Refuse an output folder the recipe must not write into: one that holds a model (writing the delta
    beside it would leave the folder loading as the old model) or a finished delta without the training state
    a rerun would resume from (training again would replace it)."""
    directory = Path(directory)
    held = [name for name in CHECKPOINT_FILES if (directory / name).exists()]
    if held:
        raise InputError(f"--out {directory} holds a model ({', '.join(held)}), so a delta written beside it "
                         "would never load (the folder loads as that model); choose another --out (a new folder, "
                         "or the folder of an earlier `repo-lens train --base` run to resume it)")
    finished = [name for name in (DELTA_FILE, RECIPE_FILE) if (directory / name).exists()]
    if finished and not (directory / STATE_DIR / "progress.json").is_file():
        raise InputError(f"--out {directory} holds {' and '.join(finished)} but no {STATE_DIR}/progress.json to "
                         "resume from, and training again would replace them; choose another --out, or delete "
                         f"{directory} to train anew")


def repositioned_model(base: LensModel, cfg: RepositionConfig) -> LensModel:
    """A copy of ``base`` with ``cfg.mechanism`` from the first re-positioned layer on (RoPE below), every
    base weight frozen, new position modules (see :func:`start_position_modules`) and zero-started adapters
    on the attention projections from layer :func:`adapters_from_of` on (trainable)."""
    check_recipe(cfg, base)
    n_layers = base.cfg.n_layers
    first = first_layer_of(cfg, n_layers)
    kinds = [ROPE_KIND] * first + [cfg.mechanism] * (n_layers - first)
    model = LensModel(dataclasses.replace(base.cfg, layer_mechanisms=kinds))
    torch.manual_seed(cfg.seed)
    result = model.load_state_dict(base.state_dict(), strict=False)
    new = [name for name in result.missing_keys if not is_position_weight(name)]
    if new or result.unexpected_keys:
        raise CheckpointError(f"the base's weights do not fit the re-positioned model: missing {new[:5]}, "
                              f"unexpected {result.unexpected_keys[:5]}")
    for name, param in model.named_parameters():
        param.requires_grad_(is_position_weight(name))
    start_position_modules(model, cfg)
    adapted = adapters_from_of(cfg, n_layers)
    add_low_rank(model, [f"blocks.{layer}.attn.{proj}" for layer in range(adapted, n_layers) for proj in ADAPTED],
                 rank=cfg.lora_rank, alpha=cfg.lora_alpha)
    return model.to(next(base.parameters()).device)


def start_position_modules(model: LensModel, cfg: RepositionConfig) -> None:
    """Initialise every re-positioned layer's position module.

    - RePo: every weight N(0, ``position_init_std``), as the authors start f (z ≈ 0, annealed from the index).
    - GRAPE-M: W = 0 and b = softplus⁻¹(1), so ω = 1 and the phase Σ_{s<t} ω_s is the index t: the layer is
      the base's RoPE exactly.
    - per-layer learned increments: the DeltaMLP's input layer at PyTorch's default initialisation (seeded),
      its output weight 0 and its bias logit(1/max), so δ = 1 and the positions are t + 1 (RoPE shifted by
      one, which q·k cannot see); where the DeltaMLP reads the residual stream through a norm of its own
      (the learned-increments post's per-layer δ), that norm starts at weight 1.
    - the learned-increments post's graft (the DeltaMLP the layers share): as the post starts it, fc1 at
      PyTorch's default initialisation (seeded), fc2's weight 0 and its bias 0.5413, so δ = softplus(0.5413) ≈
      0.999984 and the positions are 0.999984·t.

    The model starts as the base whenever the mechanism allows (RePo through the anneal).
    """
    torch.manual_seed(cfg.seed)
    start_shared = getattr(getattr(model, "shared_delta", None), "start_as_post", None)
    if start_shared is not None:  # the post's graft: the DeltaMLP every layer shares
        start_shared()
    for block in model.blocks:
        module = block.attn.mechanism
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
        self.handles = [block.attn.mechanism.register_forward_hook(self._blend)
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
           if is_position_weight(name)}
    out.update(low_rank_factors(model))
    return {name: tensor.contiguous() for name, tensor in out.items()}


def _optimizer(model: LensModel, cfg: RepositionConfig) -> torch.optim.AdamW:
    positions = [p for n, p in model.named_parameters() if p.requires_grad and is_position_weight(n)]
    adapters = [p for n, p in model.named_parameters() if p.requires_grad and not is_position_weight(n)]
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
    ``recipe.json``; returns the run's summary (steps, tokens, wall seconds, the loss log).

    The settings, the base, the text and the folder are checked before anything is written
    (:func:`check_recipe`, :func:`check_out_directory`), and a saved state field by field before it is
    resumed; what is refused raises :class:`repo_lens.errors.InputError` or ``CheckpointError``."""
    check_recipe(cfg, base)
    check_out_directory(directory)
    _check_text(text, cfg)
    directory = ensure_dir(Path(directory))
    with run_lock(directory):
        return _train(cfg, base, text, directory, progress)


def _check_text(text: TextTokens, cfg: RepositionConfig) -> None:
    for part, stream in (("training", text.train), ("held-out", text.held_out)):
        if len(stream) - 1 < cfg.context:
            raise InputError(f"the corpus' {part} documents hold {len(stream)} tokens, too few for one sequence "
                             f"of {cfg.context} tokens (context) and the next; give a larger corpus or a smaller "
                             "--context")


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
            raise TrainingDivergedError(f"the training loss became {loss.item()} at step {step}; the state saved "
                                        "before it is kept: lower the learning rate (lr=; on the command line "
                                        "--position-lr-scale for the position module), try another --seed, or "
                                        "turn bf16 autocast off (--no-autocast)")
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
               "first_layer": first_layer_of(cfg, base.cfg.n_layers),
               "adapters_from": adapters_from_of(cfg, base.cfg.n_layers), "log": log}
    ship_delta(model, cfg, directory, summary)
    return summary


def ship_delta(model: LensModel, cfg: RepositionConfig, directory: Path, summary: dict[str, Any]) -> Path:
    """``delta.safetensors`` (what training changed, bf16; in fp32 the increments the layers share, since every
    position is their running sum, and the position modules' vectors of a mechanism whose ``recipe_fp32_vectors``
    trait says so) and ``recipe.json`` (how to rebuild the model from the base, and the run's summary) in
    ``directory``."""
    vectors = mechanism_traits(cfg.mechanism).recipe_fp32_vectors
    tensors = {name: tensor.float() if name.startswith(SHARED_PREFIX)
               or (vectors and is_position_weight(name) and tensor.dim() == 1)
               else tensor.to(torch.bfloat16) for name, tensor in trainable_state(model).items()}
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
    """(step, loss log, wall seconds) of the state saved in ``directory``, its tensors loaded into ``model`` and
    ``optimizer``; (0, [], 0) when there is none. Every field is checked first (:class:`_StateCheck`)."""
    state = directory / STATE_DIR
    if not (state / "progress.json").exists():
        return 0, [], 0.0
    check = _StateCheck(directory, cfg)
    step, log, wall = check.progress()
    weights = check.trainable(trainable_state(model))
    check.optimizer(optimizer, step)
    parameters, modules = dict(model.named_parameters()), dict(model.named_modules())
    with torch.no_grad():
        for name, tensor in weights.items():
            if name in parameters:
                parameters[name].copy_(tensor)
            else:  # an adapter's factor, "<module>.lora_A" / "<module>.lora_B"
                module, factor = name.rsplit(".", 1)
                getattr(modules[module].parametrizations.weight[0], factor).copy_(tensor)
    return step, log, wall


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _StateCheck:
    """The checks of a saved training state (``OUT/train_state``): each refusal is a CheckpointError naming the
    file and the field, what it holds and what a state holds there, and how to start over."""

    def __init__(self, directory: Path, cfg: RepositionConfig) -> None:
        self.directory, self.state, self.cfg = directory, directory / STATE_DIR, cfg

    def fail(self, file: str, problem: str) -> CheckpointError:
        return CheckpointError(f"cannot resume from {self.state / file}: {problem}. The saved training state is "
                               f"damaged; delete {self.directory} to start the training over, or choose another --out")

    def progress(self) -> tuple[int, list, float]:
        """(step, log, wall seconds) of ``progress.json``, after checking its settings against the recipe's."""
        file = "progress.json"
        try:
            progress = json.loads((self.state / file).read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise self.fail(file, f"it is not readable JSON ({type(error).__name__}: {str(error)[:120]})") from None
        if not isinstance(progress, dict):
            raise self.fail(file, f"it holds a {type(progress).__name__}, not an object with step, wall_seconds, "
                                  "recipe and log")
        missing = [key for key in ("step", "wall_seconds", "recipe", "log") if key not in progress]
        if missing:
            raise self.fail(file, f"it lacks {', '.join(missing)}")
        step, wall, recipe, log = (progress[key] for key in ("step", "wall_seconds", "recipe", "log"))
        if not isinstance(step, int) or isinstance(step, bool) or not 1 <= step <= self.cfg.steps:
            raise self.fail(file, f"step is {step!r}, expected a whole number in 1..{self.cfg.steps} (the recipe's "
                                  "steps)")
        if not _finite_number(wall) or wall < 0:
            raise self.fail(file, f"wall_seconds is {wall!r}, expected a finite number ≥ 0")
        self._settings(file, recipe)
        self._log(file, log, step)
        return step, list(log), float(wall)

    def _settings(self, file: str, recipe: Any) -> None:
        if not isinstance(recipe, dict):
            raise self.fail(file, f"recipe is a {type(recipe).__name__}, expected an object of settings")
        defaults = RepositionConfig().to_dict()  # a setting a run saved before it existed had its default
        saved = {key: recipe.get(key, defaults[key]) for key in defaults if key != "threads"}
        problems = setting_problems(saved)
        if problems:
            raise self.fail(file, "recipe." + "; recipe.".join(problems))
        wanted = {key: value for key, value in self.cfg.to_dict().items() if key != "threads"}
        if saved != wanted:
            changed = sorted(key for key in wanted if saved.get(key) != wanted[key])
            raise InputError(f"{self.directory} holds a run with other settings ({', '.join(changed)} differ); "
                             "resume it with the same settings, or choose another --out")

    def _log(self, file: str, log: Any, step: int) -> None:
        if not isinstance(log, list) or len(log) != step + 1:
            held = f"a list of {len(log)} entries" if isinstance(log, list) else f"a {type(log).__name__}"
            raise self.fail(file, f"log is {held}, expected a list of {step + 1} entries (steps 0..{step})")
        for index, entry in enumerate(log):
            if not isinstance(entry, dict) or entry.get("step") != index or isinstance(entry.get("step"), bool):
                raise self.fail(file, f"log[{index}] is {str(entry)[:80]}, expected an object with step {index}")
            wrong = [key for key, value in entry.items() if not _finite_number(value)]
            if wrong:
                raise self.fail(file, f"log[{index}].{wrong[0]} is {entry[wrong[0]]!r}, expected a finite number")

    def trainable(self, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors of ``trainable.safetensors``, each named, shaped and typed as ``expected`` and finite."""
        file = "trainable.safetensors"
        try:
            weights = {current_state_key(name): tensor for name, tensor in load_file(str(self.state / file)).items()}
        except (OSError, SafetensorError, ValueError, RuntimeError) as error:
            raise self.fail(file, f"it is not a readable safetensors file ({type(error).__name__}: "
                                  f"{str(error)[:120]})") from None
        missing, surplus = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        if missing or surplus:
            raise self.fail(file, f"its tensors do not fit the recipe's model (missing {missing[:3]}, "
                                  f"unexpected {surplus[:3]})")
        for name, tensor in weights.items():
            if not tensor.dtype.is_floating_point:
                raise self.fail(file, f"tensor {name} is {tensor.dtype}, expected a floating-point tensor")
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise self.fail(file, f"tensor {name} has shape {list(tensor.shape)}, the model's is "
                                      f"{list(expected[name].shape)}")
            if not torch.isfinite(tensor).all():
                raise self.fail(file, f"tensor {name} holds NaN or infinite values")
        return weights

    def optimizer(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        """Load ``optimizer.pt`` (tensors, numbers and lists only: never unpickled as objects) into
        ``optimizer`` once its groups' settings and every parameter's AdamW state fit."""
        file = "optimizer.pt"
        fresh = [{key: value for key, value in group.items() if key not in ("params", "lr", "initial_lr")}
                 for group in optimizer.param_groups]
        try:
            saved = torch.load(self.state / file, weights_only=True, map_location="cpu")
        except (OSError, RuntimeError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                pickle.UnpicklingError) as error:
            cause = ("damaged, or holding objects other than tensors, numbers and lists, which are never loaded"
                     if isinstance(error, pickle.UnpicklingError) else f"{type(error).__name__}: {str(error)[:120]}")
            raise self.fail(file, f"it is not a readable optimizer state ({cause})") from None
        if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict) or \
                not isinstance(saved.get("param_groups"), list):
            raise self.fail(file, "it is not an optimizer state_dict (an object with state and param_groups)")
        groups = saved["param_groups"]
        if len(groups) != len(fresh) or not all(isinstance(group, dict) for group in groups):
            raise self.fail(file, f"param_groups holds {len(groups)} entries, the recipe's optimizer {len(fresh)}")
        for index, (group, want) in enumerate(zip(groups, fresh)):
            for key in sorted(set(group) & set(want)):
                have = list(group[key]) if isinstance(group[key], tuple) else group[key]
                if have != (list(want[key]) if isinstance(want[key], tuple) else want[key]):
                    raise self.fail(file, f"param_groups[{index}].{key} is {group[key]!r}, the recipe's is "
                                          f"{want[key]!r}")
        try:
            optimizer.load_state_dict(saved)
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as error:
            raise self.fail(file, f"it does not fit the recipe's optimizer ({type(error).__name__}: "
                                  f"{str(error)[:120]})") from None
        for index, param in enumerate(p for group in optimizer.param_groups for p in group["params"]):
            entry = optimizer.state.get(param, {})
            missing = [key for key in ("step", "exp_avg", "exp_avg_sq") if not isinstance(entry.get(key), torch.Tensor)]
            if missing:
                raise self.fail(file, f"state[{index}] lacks {', '.join(missing)} (AdamW's moments of every "
                                      "trained tensor)")
            count = entry["step"]
            if count.numel() != 1 or not torch.isfinite(count).all() or not 1 <= float(count) <= step \
                    or float(count) != int(float(count)):
                raise self.fail(file, f"state[{index}].step is {count.tolist()}, expected a whole number in 1..{step} "
                                      "(progress.json's step)")
            for key in ("exp_avg", "exp_avg_sq"):
                moment = entry[key]
                if tuple(moment.shape) != tuple(param.shape):
                    raise self.fail(file, f"state[{index}].{key} has shape {list(moment.shape)}, its tensor's is "
                                          f"{list(param.shape)}")
                if not torch.isfinite(moment).all() or (key == "exp_avg_sq" and (moment < 0).any()):
                    raise self.fail(file, f"state[{index}].{key} holds NaN, infinite"
                                          + (" or negative" if key == "exp_avg_sq" else "") + " values")
