"""Causal studies of positions on the 1,024-byte retrieval models.

On the held-out NIAH prompts of the model cards (RULER noise haystack at the training context, needle
depths spread over 0–1, the same seeds as ``niah_accuracy``), each layer's and each head's positions
are made integer (RoPE's, one unit per token) or constant (NoPE-like), and every learned layer's are
mean-ablated, shuffled, and interpolated toward the integers by the RePo authors' ``dynamic_pe_pdrop``
(z' = (1 − p)·z + p·t) and toward a constant; scored by exact match (greedy decoding, teacher forced)
and the answer's log-probability. Then the per-head patching map: a clean prompt and one whose needle
moved (same key and value, depth 0.25 → 0.75, equal length), the clean positions written into the
corrupted run one head at a time, the change of the answer's log-probability averaged over pairs
(and the attribution estimate of the same map). ``bytes1k-rope`` is the control: its positions are the
integers, so only "constant" changes them, and patching (the same integers) changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from repo_lens.studies.reproductions import position_interventions_report as report
from repo_lens.studies.reproductions.common import save_study, stem

SWEEP = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
QUICK_SWEEP = (0.0, 0.5, 1.0)
DEPTHS = (0.25, 0.75)  # the clean needle's depth, and where the corrupted prompt moves it


def niah_eval_prompts(tokenizer: Any, length: int, count: int) -> list:
    """The model cards' held-out NIAH prompts (RetrievalMixTask.niah_prompts with the noise haystack).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> prompts = niah_eval_prompts(ByteTokenizer(), 512, 2)
    >>> [len(p) <= 512 for p in prompts], prompts[0].answer != prompts[1].answer
    ([True, True], True)
    """
    from repo_lens.data.niah import niah_prompt
    from repo_lens.train.mixture import EVAL_SEED_OFFSET

    return [niah_prompt(tokenizer, length, depth=index / max(1, count - 1), seed=EVAL_SEED_OFFSET + index,
                        add_special_tokens=False) for index in range(count)]


def needle_moved_pairs(tokenizer: Any, length: int, count: int, seed: int = 0) -> list[tuple[Any, Any]]:
    """``count`` (clean, corrupted) NIAH prompts of equal length: the same key and value, the needle at
    depth 0.25 in the clean prompt and 0.75 in the corrupted one.

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> [(clean.answer == moved.answer, len(clean) == len(moved)) for clean, moved in needle_moved_pairs(ByteTokenizer(), 512, 2)]
    [(True, True), (True, True)]
    """
    from repo_lens.data.niah import niah_prompt

    pairs, candidate = [], seed
    while len(pairs) < count:
        clean, moved = (niah_prompt(tokenizer, length, depth=depth, seed=candidate, add_special_tokens=False)
                        for depth in DEPTHS)
        if len(clean) == len(moved):
            pairs.append((clean, moved))
        candidate += 1
    return pairs


def scores(lens: Any, prompts: list, mode: Any, layers: Any = None, heads: Any = None, batch_size: int = 8,
           reference: list | None = None) -> dict[str, float]:
    """Exact-match accuracy and mean answer log-probability of ``prompts`` under the ablation."""
    from repo_lens import interventions

    hits, logprobs = [], []
    for first in range(0, len(prompts), batch_size):
        chunk = prompts[first:first + batch_size]
        logits = interventions.ablate(lens, chunk, mode=mode, layers=layers, heads=heads, reference=reference)
        hits += interventions.niah_exact_match(chunk)(logits).tolist()
        logprobs += interventions.answer_logprob(chunk)(logits).tolist()
    return {"accuracy": float(np.mean(hits)), "logprob": float(np.mean(logprobs))}


def ablation_conditions(lens: Any, sweep: tuple[float, ...]) -> list[tuple[str, Any, Any, Any]]:
    """(group, layers, heads, mode) of every ablation: all edited layers, each layer, each head, the sweeps."""
    from repo_lens import interventions

    layers = [site.layer for site in interventions.select_sites(lens.model, None)]
    conditions = [("all", None, None, mode) for mode in ("integer", "constant", "mean", "shuffle")]
    conditions += [("layer", layer, None, mode) for layer in layers for mode in ("integer", "constant")]
    conditions += [("head", layer, head, mode) for layer in layers for head in range(lens.n_heads)
                   for mode in ("integer", "constant")]
    conditions += [("sweep", None, None, ("interpolate", p, toward)) for toward in ("integer", "constant")
                   for p in sweep]
    return conditions


def changes_positions(lens: Any, prompt: Any, mode: Any, layers: Any, heads: Any, unchanged: np.ndarray) -> bool:
    """Whether the ablation moves any position of ``prompt`` (e.g. "integer" leaves RoPE's as they are)."""
    from repo_lens import interventions

    ablated = interventions.ablated_positions(lens, prompt, mode=mode, layers=layers, heads=heads,
                                              reference=[prompt])
    return not np.allclose(ablated, unchanged, atol=1e-5)


def ablation_study(lens: Any, prompts: list, sweep: tuple[float, ...], batch_size: int, progress: bool,
                   name: str) -> dict[str, Any]:
    """Every condition of :func:`ablation_conditions`, scored on ``prompts``; a condition that moves no
    position (checked on the first prompt) is recorded as ``None`` and not run."""
    from repo_lens import interventions

    baseline = scores(lens, prompts, ("interpolate", 0.0), batch_size=batch_size)
    result: dict[str, Any] = {"baseline": baseline, "all": {}, "layer": {}, "head": {},
                              "sweep": {"integer": {}, "constant": {}}}
    unchanged = lens.trace(prompts[0].ids, progress=False).positions
    for group, layer, head, mode in tqdm(ablation_conditions(lens, sweep), desc=f"ablations {name}",
                                         disable=not progress):
        label = interventions.parse_mode(mode).name
        score = None
        if label != "mean" and changes_positions(lens, prompts[0], mode, layer, head, unchanged):
            score = scores(lens, prompts, mode, layer, head, batch_size)
        elif label == "mean":  # the check needs the reference set; the mean of the index is the index
            score = scores(lens, prompts, mode, layer, head, batch_size, reference=prompts[:16])
        if group == "all":
            result["all"][label] = score
        elif group == "layer":
            result["layer"].setdefault(str(layer), {})[label] = score
        elif group == "head":
            result["head"].setdefault(f"{layer}.{head}", {})[label] = score
        else:
            result["sweep"][mode[2]][f"{mode[1]:g}"] = score
    return result


def patching_study(lens: Any, pairs: list[tuple[Any, Any]], progress: bool, name: str) -> dict[str, Any]:
    """The per-head patching map (answer log-probability) of the needle-moved pairs, exact and attributed."""
    from repo_lens import interventions

    exact, estimate, baselines, cleans = [], [], [], []
    for clean, moved in tqdm(pairs, desc=f"patching {name}", disable=not progress):
        metric = interventions.answer_logprob(moved)
        grid = interventions.patch(lens, clean, moved, metric, progress=False)
        exact.append(grid.effects)
        estimate.append(interventions.attribute(lens, clean, moved, metric).effects)
        baselines.append(grid.baseline)
        cleans.append(grid.clean)
    exact_mean, estimate_mean = np.mean(exact, axis=0), np.mean(estimate, axis=0)
    cells = np.isfinite(exact_mean)
    moved_cells = np.abs(np.asarray(exact)[:, cells]).sum() > 0
    pearson = float(np.corrcoef(np.asarray(exact)[:, cells].ravel(), np.asarray(estimate)[:, cells].ravel())[0, 1]) \
        if moved_cells else None
    return {"pairs": len(pairs), "depths": list(DEPTHS), "effects": exact_mean, "attribution": estimate_mean,
            "baseline_logprob": float(np.mean(baselines)), "clean_logprob": float(np.mean(cleans)),
            "attribution_pearson": pearson, "max_abs_effect": float(np.nanmax(np.abs(exact_mean)))}


def position_interventions_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                                 progress: bool = True, batch_size: int = 8) -> dict[str, Any]:
    """Ablations, sweeps and patching maps of each model (see the module docstring); writes results.json,
    the tables and the figures into ``out``."""
    from repo_lens.loading import load

    count, n_pairs, sweep = (8, 2, QUICK_SWEEP) if quick else (32, 8, SWEEP)
    results: dict[str, Any] = {}
    for model in models:
        lens = load(model, device="cpu")
        prompts = niah_eval_prompts(lens.tokenizer, lens.context_length, count)
        results[model] = {"layer_kinds": list(lens.model.cfg.layer_mechanisms), "context": lens.context_length,
                          "ablations": ablation_study(lens, prompts, sweep, batch_size, progress, stem(model)),
                          "patching": patching_study(lens, needle_moved_pairs(lens.tokenizer, lens.context_length,
                                                                              n_pairs), progress, stem(model))}
    document = {"study": "position_interventions", "settings": {"prompts": count, "pairs": n_pairs,
                                                                "sweep": list(sweep)},
                "results": results, "markdown": report.markdown(results)}
    return save_study(out, document, report.figures(results) if figures else None)
