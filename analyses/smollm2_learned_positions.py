"""What the learned positions of a SmolLM2-135M conversion (``zoo:smollm2-135m-grape``, ``-lpi``, ``-repo``, the
graft) learned on English, per layer and head of its learned layers (10-29; every layer for the graft), beside
its RoPE control (layers 10-29):

* **Distance from the index**: mean over tokens of |(z_t − z_0) − t|, on held-out Brown sequences.
* **Gaps by token class**: the gap z_t − z_{t−1} before a token of each class (``subword_categories``:
  whitespace, punctuation, word starts, numbers, continuations), the learned-increments post's table on a
  subword model. For GRAPE-M (z_t = Σ_{s<t} ω_s) the gap before token t is ω_{t−1}; for the increments it is δ_t.
* **Word-boundary ROC-AUC** of those gaps against "token t starts a word" (``boundary_auc``; 0.5 is chance).
* **The entity test** of the learned-increments post: the gap before the second word of a two-word name in real
  order ("New York") against reversed order ("York New"), paired Wilcoxon per head (``entity_grouping_test``).
* **Ranges and chunks**: max z − min z per head (RePo Fig. 2) and the shares of constant / mono / hybrid
  chunks (RePo Fig. 3; Δ = 16, ε = 0.2).
* **Relative drift by token class** (the post's "compare relative drift, not absolute δ"): per learned unit
  (a head; a layer where its heads are copies, as for the per-layer increments) the gap before each token
  minus the unit's mean gap, by class, with bootstrap intervals, raw and in units of the unit's standard
  deviation (``unit_relative_drift``); per unit a label-permutation test of any class effect
  (Kruskal-Wallis H) and of the post's order (Cuzick's trend), Benjamini-Hochberg over units, and pooled
  tests of the summed statistic with the labels shuffled inside each unit (``unit_category_test``), so a
  unit's speed never reads as a class effect. The post's order on our classes (``SUBWORD_EXPECTED_ORDER``),
  highest first: whitespace (newlines, runs of spaces: the post's line boundaries, newline 2.12 in its byte
  table) > punctuation (its punctuation, 1.18) > word starts (the tokens carrying the leading space: its
  word starts and function words, space 1.05) > continuations (its word-internal pieces: lowercase bytes
  0.79, the graft's subword continuations); numbers have no place in the post's order and are left out of
  the trend (they stay in the drift and the spread test). The same again for the gap *after* a token of
  each class, which for GRAPE-M (an exclusive sum) is the token's own ω. Written to ``summary.json``
  (``relative_drift``) and ``relative_drift.md``.

    python analyses/smollm2_learned_positions.py --out build/smollm2_positions \\
        --model grape=zoo:smollm2-135m-grape --model control=zoo:smollm2-135m-rope-ct [--sequences 16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _gaps(positions: np.ndarray) -> np.ndarray:
    from repo_lens.analysis import position_increments

    return position_increments(positions.astype(np.float64), origin=np.nan)  # [L, H, T]; the first is NaN


N_BOOT = 1000  # bootstrap resamples per unit and class, and of the units
N_PERMUTATIONS = 999  # label shuffles per unit (the p-values' floor is 1/1000)


def _learned_units(gap: np.ndarray, layers: list[int]) -> tuple[np.ndarray, list[str], str]:
    """(U, n) gaps: one row where every layer and head has the same gaps (one δ shared by the whole model, as the
    learned-increments post's graft), one per layer where every layer's heads are copies (one increment per
    layer), else one per head."""
    if np.array_equal(gap, np.broadcast_to(gap[:1, :1], gap.shape)):
        return gap[:1, 0], ["shared"], "shared δ"
    if np.array_equal(gap, np.broadcast_to(gap[:, :1], gap.shape)):
        return gap[:, 0], [f"L{layer}" for layer in layers], "layer"
    names = [f"L{layer}H{head}" for layer in layers for head in range(gap.shape[1])]
    return gap.reshape(-1, gap.shape[-1]), names, "head"


def _drift_of(rows: np.ndarray, labels: np.ndarray, names: list[str]) -> dict[str, Any]:
    """The relative drift by class over the units ``rows``, and the spread and trend tests."""
    from repo_lens.analysis import SUBWORD_EXPECTED_ORDER, unit_category_test, unit_relative_drift

    drift = unit_relative_drift(rows, labels, n_boot=N_BOOT)
    spread = unit_category_test(rows, labels, n_permutations=N_PERMUTATIONS)
    trend = unit_category_test(rows, labels, SUBWORD_EXPECTED_ORDER, n_permutations=N_PERMUTATIONS)
    # over units; with one unit (a shared δ) the interval is its own, over tokens
    interval, interval_sd = drift.across_ci, drift.across_standardized_ci
    if len(names) == 1:
        interval, interval_sd = drift.mean_ci[0], drift.mean_ci[0] / drift.scale[0]
    by_class = {label: {"tokens": int(drift.count[0, k]), "median_drift": float(drift.across_median[k]),
                        "interval": interval[k].tolist(), "median_drift_sd": float(drift.across_standardized[k]),
                        "interval_sd": interval_sd[k].tolist(),
                        "median_abs_drift_sd": float(np.median(np.abs(drift.standardized[:, k]))),
                        "share_units_up": float(drift.share_positive[k])} for k, label in enumerate(drift.labels)}
    units = {name: {"mean": float(drift.center[u]), "sd": float(drift.scale[u]), "H": float(spread.value[u]),
                    "p_spread": float(spread.p_value[u]), "rho": float(trend.value[u]), "p_trend": float(trend.p_value[u]),
                    "drift": {label: {"mean": float(drift.mean[u, k]), "mean_ci": drift.mean_ci[u, k].tolist(),
                                      "median": float(drift.median[u, k]), "median_ci": drift.median_ci[u, k].tolist(),
                                      "sd_units": float(drift.standardized[u, k])} for k, label in enumerate(drift.labels)}}
             for u, name in enumerate(names)}
    return {"by_class": by_class,
            "spread": {"H_sum": spread.pooled_value, "p_value": spread.pooled_p_value,
                       "units_significant_bh": int(spread.significant.sum()),
                       "epsilon_squared": _spread(spread.effect)},
            "trend": {"order": list(trend.labels), "mean_rho": trend.pooled_value, "p_value": trend.pooled_p_value,
                      "units_significant_bh": int(trend.significant.sum()),
                      "following": int((trend.significant & (trend.value > 0)).sum()),
                      "reversing": int((trend.significant & (trend.value < 0)).sum()), "rho": _spread(trend.value)},
            "units": units}


def drift_measures(gap: np.ndarray, category: np.ndarray, layers: list[int]) -> dict[str, Any]:
    """Relative drift of the gap before (and after) a token of each class, per learned unit and pooled."""
    keep = ~np.isnan(gap[0, 0])  # the first token of each sequence has no gap
    rows, names, unit = _learned_units(gap[..., keep], layers)
    return {"unit": unit, "units": len(names), "tokens": int(keep.sum()),
            "n_boot": N_BOOT, "n_permutations": N_PERMUTATIONS,
            "before": _drift_of(rows, category[keep], names),
            "after": _drift_of(rows, np.roll(category, 1)[keep], names)}  # the class of token t − 1 for gap t


def held_out_measures(lens: Any, sequences: torch.Tensor, layers: list[int]) -> dict[str, Any]:
    """Distances, gaps by class, boundary AUC, ranges and chunk shares on ``sequences`` [n, T]."""
    from repo_lens.analysis import (boundary_auc, chunk_patterns, increments_by_category, pattern_fractions,
                                    range_stats, subword_categories)

    distances, ranges, gaps, classes, patterns = [], [], [], [], []
    for row in tqdm(sequences, desc="held-out sequences", leave=False):
        trace = lens.trace(row.tolist(), progress=False)
        z = trace.positions[layers].astype(np.float64)  # [L, H, T]
        index = np.arange(z.shape[-1])
        distances.append(np.abs((z - z[..., :1]) - index).mean(axis=-1))
        ranges.append(range_stats(z))
        gaps.append(_gaps(z))
        classes.append(subword_categories(trace.tokens))
        patterns.append(chunk_patterns(z))
    gap, category = np.concatenate(gaps, axis=-1), np.concatenate(classes)
    by_class = increments_by_category(gap, category)
    starts_word = (category == "word_initial").astype(float)
    starts_word[np.isnan(gap[0, 0])] = np.nan  # the first token of each sequence has no gap
    auc = boundary_auc(np.nan_to_num(gap), starts_word)
    fractions = pattern_fractions(np.concatenate(patterns, axis=-1))
    return {"distance_from_index": _spread(np.mean(distances, axis=0)), "range": _spread(np.mean(ranges, axis=0)),
            "gap_by_class": {label: {"mean": float(by_class.overall_mean[i]),
                                     "median_head": _spread(by_class.mean[..., i]), "tokens": int(by_class.count[0, 0, i])}
                             for i, label in enumerate(by_class.labels)},
            "word_boundary_auc": {**_spread(auc), "share_above_0.6": float((auc > 0.6).mean()),
                                  "share_below_0.4": float((auc < 0.4).mean()),
                                  "by_layer": {str(layer): auc[i].round(4).tolist() for i, layer in enumerate(layers)}},
            "chunks": dict(zip(fractions.labels, fractions.overall.round(4).tolist())),
            "tokens": int(gap.shape[-1]), "relative_drift": drift_measures(gap, category, layers)}


def entity_measures(lens: Any, layers: list[int]) -> dict[str, Any]:
    """The gap before the second word, real against reversed order, every entity and carrier sentence."""
    from repo_lens.analysis.entities import entity_grouping_test, entity_prompts, token_at_char

    real, reversed_ = entity_prompts()
    gaps = {True: [], False: []}
    for prompt in [*real, *reversed_]:
        encoded = lens.tokenizer(prompt.text, add_special_tokens=False, return_offsets_mapping=True)
        second = token_at_char(encoded["offset_mapping"], prompt.boundary)  # the token holding the space
        z = lens.trace(encoded["input_ids"], progress=False).positions[layers].astype(np.float64)
        gaps[prompt.reversed].append(z[..., second] - z[..., second - 1])
    test = entity_grouping_test(np.array(gaps[False]), np.array(gaps[True]))
    significant = (test.p_value < 0.05) & (test.share_smaller > 0.5)
    return {"prompts": test.n, "mean_real": _spread(test.mean_real), "mean_reversed": _spread(test.mean_reversed),
            "share_smaller": _spread(test.share_smaller), "heads_smaller_p05": int(significant.sum()),
            "heads_larger_p05": int(((test.p_value < 0.05) & (test.share_smaller < 0.5)).sum()),
            "heads": int(test.p_value.size)}


def _spread(values: np.ndarray) -> dict[str, float]:
    values = np.asarray(values, dtype=float)
    return {"median": float(np.nanmedian(values)), "min": float(np.nanmin(values)), "max": float(np.nanmax(values))}


def _interval(value: float, interval: list[float], digits: int) -> str:
    return f"{value:+.{digits}f} [{interval[0]:+.{digits}f}, {interval[1]:+.{digits}f}]"


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def drift_markdown(summary: dict[str, Any]) -> str:
    """The relative-drift tables of every model in ``summary``."""
    lines = ["# Relative drift of the learned gaps by token class", ""]
    for name, entry in summary.items():
        drift = entry["relative_drift"]
        lines += [f"## {name} ({entry['source']}): {_count(drift['units'], drift['unit'])}, {drift['tokens']} tokens", ""]
        for side, words in (("before", "the gap before a token of the class"),
                            ("after", "the gap after a token of the class")):
            result = drift[side]
            over = (f"the median over {drift['unit']}s of the class's mean drift from the {drift['unit']}'s mean gap "
                    f"[95% bootstrap interval over {drift['unit']}s]" if drift["units"] > 1 else
                    f"the class's mean drift from the {drift['unit']}'s mean gap [95% bootstrap interval over tokens]")
            lines += [f"**{words}** — per class, {over}:", "",
                      f"| class | tokens | median drift | in {drift['unit']} SDs | median abs. drift in SDs | "
                      f"share of {drift['unit']}s up |", "|---|---|---|---|---|---|"]
            lines += [f"| {label} | {row['tokens']} | {_interval(row['median_drift'], row['interval'], 4)} | "
                      f"{_interval(row['median_drift_sd'], row['interval_sd'], 3)} | {row['median_abs_drift_sd']:.3f} | "
                      f"{row['share_units_up']:.2f} |" for label, row in result["by_class"].items()]
            spread, trend = result["spread"], result["trend"]
            lines += ["", f"Any class effect (Kruskal-Wallis H, labels shuffled inside each {drift['unit']}): "
                      f"pooled ΣH = {spread['H_sum']:.1f}, p = {spread['p_value']:.3g}; "
                      f"{spread['units_significant_bh']} of {_count(drift['units'], drift['unit'])} significant after "
                      f"Benjamini-Hochberg at 0.05; ε² = H/(n−1) median {spread['epsilon_squared']['median']:.4f} "
                      f"(max {spread['epsilon_squared']['max']:.4f}).",
                      f"The post's order ({' > '.join(trend['order'])}; Cuzick's trend): mean ρ = "
                      f"{trend['mean_rho']:+.4f}, pooled p = {trend['p_value']:.3g}; "
                      f"{_count(trend['units_significant_bh'], drift['unit'])} significant after Benjamini-Hochberg "
                      f"({trend['following']} following the "
                      f"order, {trend['reversing']} reversing it); ρ from {trend['rho']['min']:+.3f} to "
                      f"{trend['rho']['max']:+.3f}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=SOURCE (grape=zoo:smollm2-135m-grape)")
    parser.add_argument("--sequences", type=int, default=16, help="held-out Brown sequences of --context tokens")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import repo_lens
    from repo_lens.model.config import repo_start_layer
    from repo_lens.model.registry import ROPE_KIND
    from repo_lens.train.text_tokens import TextTokens

    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for name, source in (item.split("=", 1) for item in args.model):
        lens = repo_lens.load(source, device="cpu", dtype="float32")
        kinds = lens.model.cfg.layer_mechanisms
        layers = [layer for layer, kind in enumerate(kinds) if kind != ROPE_KIND] \
            or list(range(repo_start_layer(len(kinds)), len(kinds)))  # the control: the layers the others learn
        sequences = TextTokens.brown(lens.tokenizer).held_out_sequences(args.context)[:args.sequences, :-1]
        summary[name] = {"source": source, "layers": layers,
                         "kinds": sorted({kinds[layer] for layer in layers}),
                         **held_out_measures(lens, sequences, layers), "entities": entity_measures(lens, layers)}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        (args.out / "relative_drift.md").write_text(drift_markdown(summary))
        entry = summary[name]
        print(f"{name}: distance from the index {entry['distance_from_index']}, range {entry['range']}, "
              f"word-boundary AUC {entry['word_boundary_auc']['median']:.3f}, chunks {entry['chunks']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
