"""Why a head attends where it does: because of what a token is (the content part of the score) or because of
where its learned position puts it (the position part), with a causal check of each answer.

Per model, by what it was trained on (``attention_sources_cases``; language models: ``attention_sources_lm``):

- **Task models** (retrieval: needle prompts; text reversal; Flip-Flop). The heads that attend to the keys
  the task needs (the needle's value, the mirrored input word, the latest write) are picked on a few inputs
  of their own among the learned layers' heads (:func:`~repo_lens.studies.reproductions.attention_sources_measures.pick_heads`:
  mean actual mass on the targets at least 0.3 and at least half the best head's, at most three; else the
  best head alone). On the measured inputs, their attention on the targets under the four patterns of
  :func:`repo_lens.analysis.score_decomposition` (actual, content only, position only, the same queries and
  keys at the integer positions), the targets' lead in the score split into content and position, and where
  the head's positions place the targets among the keys, each with a bootstrap interval over inputs and a
  paired test of actual against integer. The causal check: the picked heads' layer made integer
  (:func:`repo_lens.interventions.ablate`, ``mode="integer"``: the forward whose pattern in that layer is
  the integer reference), the picked heads alone, and a control head of the same layer (the one that
  attends least to the targets), scored by the task (Wilson intervals, exact McNemar tests against the
  unedited run). One input checks the decomposition's promise: its integer reference pattern against the
  pattern of that edited forward.
- **Language models**: band shares of the position part at the learned positions and at the integers,
  the position part's share of the score, the first token's attention under the four patterns.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.interventions import stats
from repo_lens.studies.reproductions.attention_sources_measures import (PATTERNS, closer_share, pick_heads,
                                                                       score_position_share, target_measures)
from repo_lens.studies.reproductions.common import save_study, stem

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.protocol import LensProtocol

MEASURES = tuple(f"mass_{pattern}" for pattern in PATTERNS) + ("lead_content", "lead_position")


def candidate_layers(lens: Lens) -> list[int]:
    """The layers whose positions are learned (every layer of a model without learned positions)."""
    from repo_lens.interventions import select_sites

    return [site.layer for site in select_sites(lens.model, None)]


def selection_masses(lens: LensProtocol, items: list, layers: list[int]) -> np.ndarray:
    """[item, layer, head]: each head's actual attention mass on the targets (mean over the item's rows)."""
    from repo_lens.analysis import score_decomposition

    out = []
    for item in items:
        row = [target_measures(score_decomposition(lens, item.ids, layer, queries=item.rows, reference=None),
                               item.targets)["mass_actual"] for layer in layers]
        out.append(row)
    return np.asarray(out)


def layer_values(lens: Lens, item: Any, layer: int, heads: list[int], positions: np.ndarray
                 ) -> dict[int, dict[str, float]]:
    """head -> every measure of ``item`` in ``layer``: ``MEASURES``, the targets' lead from the position part at
    the integer positions (the same queries and keys rotated there), the position part's share of the score
    over every key the rows see at the learned and at the integer positions, where the learned and the
    integer positions put the targets (:func:`closer_share`), and the range of the positions the rows see
    (largest less smallest); what needs the integer rotation or the head's positions is NaN in a layer that
    biases its scores instead of rotating."""
    from repo_lens.analysis import score_decomposition
    from repo_lens.studies.reproductions.attention_sources_lm import decomposed_at

    found = score_decomposition(lens, item.ids, layer, heads=heads, queries=item.rows)
    measured = target_measures(found, item.targets)
    rotary = found.frequencies is not None
    integer = decomposed_at(lens, item.ids, layer, item.rows, torch.arange(len(item.ids)), heads) if rotary else None
    at_integers = target_measures(integer, item.targets) if integer is not None else None
    index_closer = closer_share(np.arange(len(item.ids), dtype=float), item.rows, item.targets)
    out = {}
    for index, head in enumerate(heads):
        one = slice(index, index + 1)
        values = {key: float(measured[key][index]) for key in MEASURES}
        values["lead_position_integer"] = (float(at_integers["lead_position"][index]) if at_integers is not None
                                           else float("nan"))
        values["share_learned"] = score_position_share(found.position[one], found.score[one], found.mask)
        values["share_integer"] = (score_position_share(integer.position[one], integer.score[one], integer.mask)
                                   if integer is not None else float("nan"))
        values["closer_learned"] = (closer_share(positions[layer, head], item.rows, item.targets) if rotary
                                    else float("nan"))
        values["closer_integer"] = index_closer
        seen = positions[layer, head, : max(item.rows) + 1]
        values["range_learned"] = float(seen.max() - seen.min()) if rotary else float("nan")
        values["range_integer"] = float(max(item.rows))
        out[head] = values
    return out


def measure_heads(lens: Lens, items: list, picked: list[tuple[int, int]], progress: bool, name: str
                  ) -> dict[str, np.ndarray]:
    """Per measure (see :func:`layer_values`): [item, picked head]."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in picked:
        by_layer.setdefault(layer, []).append(head)
    out: dict[str, list[list[float]]] = {}
    for item in tqdm(items, desc=f"decompositions {name}", disable=not progress):
        positions = lens.trace(item.ids, progress=False).positions
        values = {(layer, head): found for layer, heads in by_layer.items()
                  for head, found in layer_values(lens, item, layer, heads, positions).items()}
        for key in values[picked[0]]:
            out.setdefault(key, []).append([values[pair][key] for pair in picked])
    return {key: np.asarray(value) for key, value in out.items()}


def head_summary(measured: dict[str, np.ndarray], index: int) -> dict[str, Any]:
    """One picked head: every measure's mean with its bootstrap interval over the inputs, and actual against
    the integer reference (paired: difference, interval, sign-flip p)."""
    out: dict[str, Any] = {key: stats.bootstrap_mean(values[:, index]) for key, values in measured.items()
                           if not np.isnan(values[:, index]).all()}
    out["actual_vs_integer"] = stats.paired(measured["mass_actual"][:, index], measured["mass_reference"][:, index],
                                            binary=False)
    out["content_vs_position"] = stats.paired(measured["mass_content"][:, index],
                                              measured["mass_position"][:, index], binary=False)
    return out


def causal_checks(lens: Lens, case: Any, picked: list[tuple[int, int]], masses: np.ndarray, layers: list[int],
                  progress: bool) -> list[dict[str, Any]]:
    """The task's score unedited, with the picked heads' layer made integer, with the picked heads alone, and
    with a control head (the layer's head of least mass on the targets in the selection inputs)."""
    from repo_lens.studies.reproductions.position_interventions import summarise

    from repo_lens.interventions import Interpolate

    base = case.scorer(Interpolate(p=0.0))
    edits: list[dict[str, Any]] = [{"edit": "unedited", "layer": None, "heads": None}]
    for layer in sorted({layer for layer, _ in picked}):
        heads = [head for picked_layer, head in picked if picked_layer == layer]
        control = int(np.argmin(masses.mean(0)[layers.index(layer)]))
        edits.append({"edit": "layer integer", "layer": layer, "heads": None})
        if len(heads) < lens.n_heads:
            edits.append({"edit": "picked heads integer", "layer": layer, "heads": heads})
        if control not in heads:
            edits.append({"edit": "control head integer", "layer": layer, "heads": [control]})
    for entry in tqdm(edits, desc="causal checks", disable=not progress):
        hits, logprobs = base if entry["layer"] is None else case.scorer("integer", entry["layer"], entry["heads"])
        entry.update(summarise(hits, logprobs, case.families, None if entry["layer"] is None else base))
    return edits


def reference_check(lens: Lens, item: Any, layer: int, heads: list[int]) -> float:
    """The largest difference between the decomposition's integer reference pattern and the pattern of the
    forward in which ``interventions.ablate`` made ``layer``'s positions integer (rows of ``item``)."""
    from repo_lens import interventions
    from repo_lens.analysis import score_decomposition

    found = score_decomposition(lens, item.ids, layer, heads=heads, queries=item.rows)
    seen: dict[str, torch.Tensor] = {}

    def keep(pattern: torch.Tensor, hook: Any) -> None:
        seen["pattern"] = pattern[0].detach().double().cpu()

    with lens.model.hooks(fwd_hooks=[(f"blocks.{layer}.attn.hook_pattern", keep)]):
        interventions.ablate(lens, [item.ids], mode="integer", layers=[layer])
    edited = seen["pattern"][heads][:, item.rows, : found.patterns["reference"].shape[-1]].numpy()
    return float(np.abs(edited - found.patterns["reference"]).max())


def case_result(lens: Lens, case: Any, progress: bool, name: str) -> dict[str, Any]:
    """The heads picked, what makes their attention on the targets, and the causal checks (module description)."""
    layers = candidate_layers(lens)
    masses = selection_masses(lens, case.selection, layers)
    picked, reached = pick_heads(masses, layers)
    measured = measure_heads(lens, case.items, picked, progress, name)
    first = picked[0]
    return {"protocol": case.task, "target": case.target, "score": case.score,
            "layer_kinds": [str(kind) for kind in lens.model.cfg.layer_mechanisms], "context": lens.context_length,
            "candidate_layers": layers, "selection_inputs": len(case.selection),
            "selection_mass": {f"L{layer}H{head}": float(masses.mean(0)[index, head])
                               for index, layer in enumerate(layers) for head in range(masses.shape[2])},
            "picked": [f"L{layer}H{head}" for layer, head in picked], "picked_by_threshold": reached,
            "inputs": len(case.items),
            "heads": {f"L{layer}H{head}": head_summary(measured, index) for index, (layer, head) in enumerate(picked)},
            "per_input": {key: np.round(values, 4) for key, values in measured.items()},
            "reference_vs_ablated_max_abs": reference_check(lens, case.items[0], first[0], [first[1]]),
            "causal": causal_checks(lens, case, picked, masses, layers, progress)}


def attention_sources_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                            progress: bool = True, batch_size: int = 8) -> dict[str, Any]:
    """Each model by what it was trained on (see the module description); writes results.json (after each
    model), table.md and the figures into ``out``."""
    from repo_lens.loading import load
    from repo_lens.studies.reproductions import attention_sources_report as report
    from repo_lens.studies.reproductions.attention_sources_cases import CASES
    from repo_lens.studies.reproductions.attention_sources_lm import language_model
    from repo_lens.studies.reproductions.position_interventions_tasks import trained_task

    started = time.perf_counter()
    results: dict[str, Any] = {}
    settings = {"quick": quick, "batch_size": batch_size}

    def document() -> dict[str, Any]:
        return {"study": "attention_sources", "settings": settings, "results": results,
                "seconds": round(time.perf_counter() - started, 1), "markdown": report.markdown(results)}

    for model in models:
        model_started = time.perf_counter()
        lens = load(model, device="cpu")
        build = CASES.get(trained_task(lens) or "")
        result = (case_result(lens, build(lens, quick, batch_size), progress, stem(model)) if build is not None
                  else language_model(lens, quick, progress, stem(model)))
        result["seconds"] = round(time.perf_counter() - model_started, 1)
        results[model] = result
        del lens
        if model != models[-1]:
            save_study(out, document())
    return save_study(out, document(), report.figures(results) if figures else None)
