"""Training settings and the named presets of ``repo-lens train --preset``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from repo_lens.errors import InputError
from repo_lens.model.loaders.increments_post.config import PostVariant, layer_kind
from repo_lens.model.loaders.native.quantized import STORAGE_LEVELS
from repo_lens.model.registry import DEFAULT_KIND

# the post's per-layer equation (selective RoPE, a DeltaMLP per layer reading the residual stream)
POST_PER_LAYER_KIND = layer_kind(PostVariant("selective_rope", per_layer=True, per_head=False, decay="none",
                                             frozen=None))


FLOAT_SHIP_DTYPES = ("float32", "bfloat16", "float16", "float64")
SHIP_DTYPES = (*FLOAT_SHIP_DTYPES, *STORAGE_LEVELS)  # TrainConfig.ship_dtype


@dataclass
class TrainConfig:
    task: str  # "bytes" (bilingual byte LM), "mix" (bytes + retrieval rows), "reversal" (RePo App. C), "flipflop" (CoPE §5.1)
    mechanism: str = DEFAULT_KIND  # a kind of the mechanism registry (repo_lens.model.registry.mechanism_kinds())
    family: str = "olmo2"
    d_model: int = 192
    n_layers: int = 6
    n_heads: int = 6
    d_mlp: int = 512
    context: int = 256
    repo_from: int | None = None  # first re-positioned layer; None = ⌈L/3⌉ (RePo's default)
    batch_size: int = 32
    steps: int = 2000
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8
    checkpoint_every: int = 250
    seed: int = 0
    threads: int | None = None
    # dtype of the saved weights (SHIP_DTYPES); metrics are measured on those rounded weights. "int8", "int7" and
    # "int6" store each 2-D weight as int8 codes in ±127, ±63 or ±31 with a bfloat16 scale per row, the rest bfloat16
    ship_dtype: str = "float32"
    # the learned position modules (each layer's attn.mechanism, e.g. RePo's f): the std of their weights'
    # N(0, std) initialisation (None: 0.02 like every weight, which starts RePo's z at ~0.002, i.e. NoPE)
    # and a factor on their learning rate
    position_init_std: float | None = None
    position_lr_scale: float = 1.0
    task_options: dict[str, Any] = field(default_factory=dict)
    # a decay added to every layer's scores ("none", or a decay of the registry: repo_lens.model.registry.decay_names())
    decay: str = "none"
    tie_embeddings: bool = False  # the unembedding shares the embedding's matrix (the learned-increments post's model)
    # every this many steps a loadable copy of the model goes to snapshots/step_<N>/ (0: none), to follow
    # a finding along training
    snapshot_every: int = 0
    # where the model trains: "cpu", "cuda", "cuda:N" or "auto" (CUDA when present); the saved state, snapshots and
    # model are CPU tensors wherever it trained, so a run resumes on another device
    device: str = "cpu"
    # the forward pass in bf16 autocast (fp32 weights, optimizer and loss): None picks it where the device is a GPU
    # that computes bf16 natively and fp32 elsewhere (the CPU included); True or False forces it
    autocast: bool | None = None

    def __post_init__(self) -> None:
        if self.ship_dtype not in SHIP_DTYPES:
            raise InputError(f"ship_dtype {self.ship_dtype!r} is not a storage of the saved weights; use one of "
                             f"{', '.join(SHIP_DTYPES)} (int8/int7/int6: 2-D weights as int8 codes with a bfloat16 "
                             "scale per row)")
        if not isinstance(self.device, str):
            raise InputError(f"device is {self.device!r}, expected a str: 'cpu', 'cuda', 'cuda:N' or 'auto'")
        if self.autocast is not None and not isinstance(self.autocast, bool):
            raise InputError(f"autocast is {self.autocast!r}, expected True, False or None (bf16 autocast where the "
                             "device is a GPU that computes bf16 natively)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        return cls(**data)


PRESETS: dict[str, dict[str, Any]] = {
    # the zoo's bilingual byte-level language models (English Brown + Chinese People's Daily):
    # ~1.9 M parameters, 256-byte context, 600 steps of 16 x 256 bytes (2.5 M bytes) — sized so
    # the three mechanisms train side by side on 2 CPU cores in well under 45 minutes each
    "bytes-small": dict(task="bytes", d_model=160, n_layers=6, n_heads=4, d_mlp=432, context=256,
                        batch_size=16, steps=600, lr=3e-3, warmup=50, eval_every=150, eval_batches=4,
                        checkpoint_every=50, ship_dtype="bfloat16"),
    # RePo App. C: 4-layer models on text reversal (train lengths 2-20, test 2-30), RePo in every layer
    "reversal": dict(task="reversal", d_model=128, n_layers=4, n_heads=4, d_mlp=256, context=72, repo_from=0,
                     batch_size=32, steps=1500, lr=2e-3, warmup=100, eval_every=250, checkpoint_every=250,
                     ship_dtype="bfloat16"),
    # CoPE §5.1 / App. C: Flip-Flop, 4 layers x 4 heads at d 128 (CoPE Table 7 has this size),
    # 128-token sequences, 1,500 steps of 16 (the paper: 512 tokens, 10,000 steps) to fit 2 CPU cores
    "flipflop": dict(task="flipflop", d_model=128, n_layers=4, n_heads=4, d_mlp=512, context=128,
                     batch_size=16, steps=1500, lr=1e-3, warmup=100, eval_every=250, checkpoint_every=250,
                     ship_dtype="bfloat16"),
    # the retrieval models: 1,024-byte context, rows of 512 or 1,024 bytes so RULER's NIAH prompts fit in
    # distribution (repo_lens/train/mixture.py). The first 1,100 steps are repeat rows only: the copy
    # (induction) circuit forms there as a phase change, which it never did in 4,000 steps of the mix
    # alone. Then a retrieval-heavy mix (70 % NIAH + recall; few-shot, table, text and repeat rows
    # the rest), answers weighted 30x: with 25 % text and 50 % retrieval RoPE retrieved and RePo
    # never did; with this mix both reach NIAH 1.00 at 1,024 bytes by step 1,800 (README). RoPE,
    # NoPE, RePo and learned increments train side by side on 2 CPU cores in ~80 min
    "bytes-1k": dict(task="mix", d_model=128, n_layers=4, n_heads=4, d_mlp=384, context=1024,
                     batch_size=8, steps=2600, lr=2e-3, warmup=100, eval_every=200, eval_batches=4,
                     checkpoint_every=50, ship_dtype="bfloat16",
                     task_options={"lengths": [512, 1024], "length_weights": [0.5, 0.5], "answer_weight": 30.0,
                                   "copy_warmup_steps": 1100,
                                   "row_weights": {"text": 0.15, "repeat": 0.05, "niah": 0.4, "recall": 0.3,
                                                   "fewshot": 0.05, "table": 0.05}}),
    # the learned-increments post's bilingual byte model: 256 wide, 8 heads, 6 layers, SwiGLU 1024, tied
    # embeddings, 512-byte context. The post trains 50,000 steps of 64 x 512 bytes on a GPU (--device cuda
    # --batch-size 64 --steps 50000 --lr 3e-4 --warmup 500); on 2 CPU cores (~1,000 bytes/s a thread) this preset
    # runs 3,000 steps of 16 x 512 bytes (24.6 M bytes), with the learning rate raised to suit the shorter run,
    # and keeps a loadable snapshot every 250 steps
    "bytes-post": dict(task="bytes", family="llama", d_model=256, n_layers=6, n_heads=8, d_mlp=1024, context=512,
                       batch_size=16, steps=3000, lr=1e-3, warmup=200, weight_decay=0.01, eval_every=250,
                       eval_batches=4, checkpoint_every=25, snapshot_every=250, ship_dtype="bfloat16",
                       tie_embeddings=True, mechanism=POST_PER_LAYER_KIND),
    # a few seconds; used by the tests
    "tiny": dict(task="bytes", d_model=32, n_layers=2, n_heads=2, d_mlp=64, context=32, batch_size=8,
                 steps=30, lr=3e-3, warmup=5, eval_every=10, eval_batches=2, checkpoint_every=10),
}


def preset(name: str, **overrides: Any) -> TrainConfig:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}")
    settings = {**PRESETS[name], **{key: value for key, value in overrides.items() if value is not None}}
    return TrainConfig(**settings)
