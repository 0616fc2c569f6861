"""What the learned positions of a SmolLM2-135M conversion (``zoo:smollm2-135m-grape``, ``-lpi``, ``-repo``)
learned on English, per layer and head of its learned layers (10-29), beside its RoPE control:

* **Distance from the index**: mean over tokens of |(z_t − z_0) − t|, on held-out Brown sequences.
* **Gaps by token class**: the gap z_t − z_{t−1} before a token of each class (``subword_categories``:
  whitespace, punctuation, word starts, numbers, continuations), the learned-increments post's table on a
  subword model. For GRAPE-M (z_t = Σ_{s<t} ω_s) the gap before token t is ω_{t−1}; for the increments it is δ_t.
* **Word-boundary ROC-AUC** of those gaps against "token t starts a word" (``boundary_auc``; 0.5 is chance).
* **The entity test** of the learned-increments post: the gap before the second word of a two-word name in real
  order ("New York") against reversed order ("York New"), paired Wilcoxon per head (``entity_grouping_test``).
* **Ranges and chunks**: max z − min z per head (RePo Fig. 2) and the shares of constant / mono / hybrid
  chunks (RePo Fig. 3; Δ = 16, ε = 0.2).

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
            "tokens": int(gap.shape[-1])}


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
    from repo_lens.train.text_tokens import TextTokens

    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for name, source in (item.split("=", 1) for item in args.model):
        lens = repo_lens.load(source, device="cpu", dtype="float32")
        layers = list(range(10, lens.model.cfg.n_layers))
        sequences = TextTokens.brown(lens.tokenizer).held_out_sequences(args.context)[:args.sequences, :-1]
        summary[name] = {"source": source, "layers": layers,
                         "kinds": sorted(set(lens.model.cfg.layer_mechanisms[10:])),
                         **held_out_measures(lens, sequences, layers), "entities": entity_measures(lens, layers)}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        entry = summary[name]
        print(f"{name}: distance from the index {entry['distance_from_index']}, range {entry['range']}, "
              f"word-boundary AUC {entry['word_boundary_auc']['median']:.3f}, chunks {entry['chunks']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
