"""Training: a small loop, tasks (bilingual bytes, text reversal) and presets."""

from typing import Any

from repo_lens.train.config import PRESETS, TrainConfig, preset
from repo_lens.train.loop import TrainResult, build_model, train
from repo_lens.train.tasks import ByteLMTask, ReversalTask

__all__ = ["PRESETS", "ByteLMTask", "ReversalTask", "TrainConfig", "TrainResult", "build_model", "preset", "train"]


def build_task(cfg: TrainConfig):
    """The task a config names, with its data (the byte task fetches and caches its corpora)."""
    if cfg.task == "bytes":
        from repo_lens.data.bilingual import bilingual_splits

        return ByteLMTask(bilingual_splits(), cfg.context, cfg.batch_size, seed=cfg.seed,
                          eval_batches=cfg.eval_batches)
    if cfg.task == "mix":
        from repo_lens.data.bilingual import bilingual_splits
        from repo_lens.train.mixture import RetrievalMixTask

        options: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value for key, value in cfg.task_options.items()}
        return RetrievalMixTask(bilingual_splits(), cfg.context, cfg.batch_size, seed=cfg.seed,
                                eval_batches=cfg.eval_batches, **options)
    if cfg.task == "reversal":
        return ReversalTask(cfg.batch_size, seed=cfg.seed)
    if cfg.task == "flipflop":
        from repo_lens.train.flipflop import FlipFlopTask

        return FlipFlopTask(cfg.batch_size, length=cfg.context, seed=cfg.seed)
    from repo_lens.errors import InputError

    raise InputError(f"unknown task {cfg.task!r}; available: bytes, mix, reversal, flipflop")
