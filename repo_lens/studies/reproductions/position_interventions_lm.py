"""The edits of ``position_interventions`` on language models with a short context: held-out bits per
byte on windows of running text, per window, with the change against the unedited run (bootstrap
interval and sign-flip test over windows)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.interventions import stats

if TYPE_CHECKING:
    from repo_lens.lens import Lens

LM_MODES = ("integer", "constant", "affine", "rank", "scaled", "random", "window")
LM_LAYER_MODES = ("integer", "constant", "affine", "random")


def text_windows(text: str, length: int, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` windows of ``length`` bytes from ``text`` at evenly spread offsets (a seeded jitter).

    >>> [len(w) for w in text_windows("abcdefghij" * 10, 8, 3)]
    [8, 8, 8]
    """
    data = text.encode("utf-8")
    rng = np.random.default_rng(seed)
    span = max(1, (len(data) - length) // count)
    starts = [min(len(data) - length, index * span + int(rng.integers(0, span))) for index in range(count)]
    return [list(data[start:start + length]) for start in starts]


def bits_per_byte(lens: Lens, windows: list[list[int]], mode: Any, layers: Any, batch_size: int) -> np.ndarray:
    """Per window: the mean next-byte cross-entropy in bits under the edit."""
    from repo_lens import interventions

    out = []
    for first in range(0, len(windows), batch_size):
        chunk = windows[first:first + batch_size]
        logits = interventions.ablate(lens, chunk, mode=mode, layers=layers)
        assert isinstance(logits, torch.Tensor)  # no metric: the logits
        ids = torch.as_tensor(chunk, device=logits.device)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")
        out += (loss.mean(-1) / math.log(2)).tolist()
    return np.asarray(out)


def language_model(lens: Lens, quick: bool, text: str | None, batch_size: int, progress: bool,
                   name: str) -> dict[str, Any]:
    """Every learned layer at once under each of ``LM_MODES``, each layer alone under ``LM_LAYER_MODES``:
    held-out bits per byte."""
    from repo_lens import interventions
    from repo_lens.data.niah import NOISE

    windows = text_windows(text or NOISE * 40, lens.context_length, 4 if quick else 32)
    base = bits_per_byte(lens, windows, interventions.Interpolate(p=0.0), None, batch_size)
    layers = [site.layer for site in interventions.select_sites(lens.model, None)]
    result: dict[str, Any] = {"protocol": "language model", "layer_kinds": list(lens.model.cfg.layer_mechanisms),
                              "context": lens.context_length, "windows": len(windows),
                              "unedited": stats.bootstrap_mean(base), "conditions": {}}
    plan: list[tuple[str, Any, Any]] = [("all", None, mode) for mode in LM_MODES]
    plan += [("layer", layer, mode) for layer in layers for mode in LM_LAYER_MODES]
    for group, layer, mode in tqdm(plan, desc=f"edits {name}", disable=not progress):
        bits = bits_per_byte(lens, windows, mode, layer, batch_size)
        change = stats.paired(bits, base, binary=False)
        key = f"{'all' if group == 'all' else f'layer {layer}'} {mode}"
        result["conditions"][key] = {"group": group, "layer": layer, "mode": mode,
                                     "bits": stats.bootstrap_mean(bits), "change": change["difference"],
                                     "p": change["p"]}
    return result
