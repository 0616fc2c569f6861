"""The delta-graft vocabulary table of "Learned position increments" (Brendan Long;
``experiments/delta_graft/analyze_deltas.py``) and the relative drift it asks for ("compare relative drift,
not absolute δ"), on subword models with learned increments (default: the zoo's SmolLM2-135M graft and its
per-layer conversion).

For every layer that sums learned increments (once for a model whose layers share one DeltaMLP, as the
graft's do): δ of every vocabulary id as the first token of a document, the ids with δ > 2 set aside as
unused, the script's categories with their (lower) medians, the 20 highest and lowest ids and EOS; then each
category's drift from the layer's mean δ with bootstrap intervals, and two label-permutation tests: any class
effect (Kruskal-Wallis H) and agreement with the script's expected order sentence punctuation > word start >
function word > subword (Cuzick's trend). The table puts the post's own medians (its SmolLM2-1.7B graft,
LoRA and full fine-tune) beside ours. Writes ``results.json``, ``vocabulary.md`` and figures.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens.studies.reproductions.common import save_study, stem
from repo_lens.studies.reproductions.post_analyses import learned_increment_rows

if TYPE_CHECKING:
    from repo_lens.protocol import LensProtocol

QUICK_IDS = 2048  # --quick: the first ids of the vocabulary (a BPE's most frequent merges come first)
# The post's category medians of its SmolLM2-1.7B graft (experiments/delta_graft/RESULTS.md: 2,000 LoRA steps,
# mean δ 1.033; 800 full fine-tune steps, mean δ 1.002), in the script's categories; EOS apart.
POST_GRAFT_MEDIANS: dict[str, dict[str, float]] = {
    "the post, LoRA": {"sentence_punct": 1.042, "other_punct": 1.044, "function_word": 1.028,
                       "subword_continuation": 1.034, "word_start": 1.032, "EOS": 1.053},
    "the post, full fine-tune": {"sentence_punct": 1.007, "other_punct": 1.011, "function_word": 1.008,
                                 "subword_continuation": 1.0017, "word_start": 1.0024, "EOS": 1.014},
}


def token_strings(lens: LensProtocol, n_ids: int) -> list[str]:
    """The tokenizer's strings of ids 0..n_ids−1 (``convert_ids_to_tokens``, as the script reads them)."""
    from repo_lens.errors import InputError

    convert = getattr(lens.tokenizer, "convert_ids_to_tokens", None)
    if convert is None:
        raise InputError("the vocabulary table needs a subword tokenizer (one with convert_ids_to_tokens); for a "
                         "byte-level model use increment_post_scripts")
    return [str(token) for token in convert(list(range(n_ids)))]


def layer_result(deltas: np.ndarray, tokens: list[str], eos_id: int | None, quick: bool) -> dict[str, Any]:
    """The script's table of one layer's δ, and the drift and order tests of the ids it keeps."""
    from repo_lens.analysis import POST_EXPECTED_ORDER, category_order_test, relative_drift, vocabulary_table

    table = vocabulary_table(deltas, tokens, eos_id=eos_id if eos_id is not None and eos_id < len(tokens) else None)
    kept = np.setdiff1d(np.arange(len(tokens)), table.unused)
    n_boot, n_permutations = (200, 199) if quick else (1000, 999)
    drift = relative_drift(deltas[kept], table.labels[kept], n_boot=n_boot)
    tests = {}
    for name, order in (("spread", None), ("trend", POST_EXPECTED_ORDER)):
        test = category_order_test(deltas[kept], table.labels[kept], order, n_permutations=n_permutations)
        tests[name] = {"value": test.value, "p_value": test.p_value, "categories": list(test.labels), "n": test.n}
    return {"table": table.as_dict(tokens), "drift": {"center": drift.center, "categories": drift.as_dict()},
            "tests": tests}


def analyse(model: str, quick: bool, progress: bool) -> dict[str, Any]:
    from repo_lens.analysis import vocabulary_increments
    from repo_lens.loading import load

    lens = load(model, device="cpu")
    rows = learned_increment_rows(lens)
    shared = hasattr(lens.model, "shared_delta")  # one DeltaMLP for every layer: the same δ in each, shown once
    n_ids = min(lens.vocab_size, QUICK_IDS) if quick else lens.vocab_size
    tokens = token_strings(lens, n_ids)
    deltas = vocabulary_increments(lens, np.arange(n_ids), batch_size=256, progress=progress)
    eos_id = getattr(lens.tokenizer, "eos_token_id", None)
    return {"layer_kinds": list(lens.layer_kinds), "rows": rows, "shared_delta": shared, "n_ids": n_ids,
            "vocab_size": lens.vocab_size, "eos_id": eos_id,
            "layers": {str(layer): layer_result(deltas[layer], tokens, eos_id, quick)
                       for layer in (rows[:1] if shared else rows)}}


def _row_name(layer: str, result: dict[str, Any]) -> str:
    return "shared" if result.get("shared_delta") else f"L{layer}"


def _layer_line(name: str, result: dict[str, Any], categories: list[str]) -> str:
    table, tests = result["table"], result["tests"]
    medians = [f"{table['categories'][c]['median']:.4f}" if c in table["categories"] else "–" for c in categories]
    eos = f"{table['eos']['delta']:.4f}" if table["eos"]["delta"] is not None else "–"
    return (f"| {name} | " + " | ".join(medians) + f" | {eos} | {table['unused']['count']} | "
            f"{tests['trend']['value']:+.3f} | {tests['trend']['p_value']:.3g} | {tests['spread']['value']:.1f} | "
            f"{tests['spread']['p_value']:.3g} |")


def _post_lines(categories: list[str]) -> list[str]:
    return [f"| {source} | " + " | ".join(f"{medians[c]:.4f}" if c in medians else "–" for c in categories)
            + f" | {medians['EOS']:.4f} | – | – | – | – | – |" for source, medians in POST_GRAFT_MEDIANS.items()]


def _first_layer_lines(name: str, result: dict[str, Any]) -> list[str]:
    drift, table = result["drift"], result["table"]
    what = "The shared δ" if name == "shared" else f"Layer {name[1:]}"
    lines = [f"{what}: drift from the mean δ ({drift['center']:.4f}), median [95% bootstrap interval]:", "",
             "| category | n | median drift | mean drift |", "|---|---|---|---|"]
    for name, row in drift["categories"].items():
        low, high = row["median_ci"]
        lines.append(f"| {name} | {row['count']} | {row['median']:+.4f} [{low:+.4f}, {high:+.4f}] | "
                     f"{row['mean']:+.4f} |")
    for which in ("top", "bottom"):
        listed = " ".join(f"`{entry['token']}` ({entry['delta']:.3f})" for entry in table[which])
        lines += ["", f"{'Highest' if which == 'top' else 'Lowest'} δ: {listed}"]
    return lines


def vocabulary_markdown(results: dict[str, Any]) -> str:
    from repo_lens.analysis import VOCABULARY_CATEGORIES

    categories = list(VOCABULARY_CATEGORIES)
    lines = ["# The delta-graft vocabulary table and relative drift on our models", ""]
    for model, result in results.items():
        shared = " (one DeltaMLP shared by every layer: the same δ in each)" if result.get("shared_delta") else ""
        lines += [f"## {model}{shared} ({result['n_ids']} of {result['vocab_size']} ids)", "",
                  "Median δ per category (ids with δ > 2 set aside), EOS, and the label-permutation tests "
                  "(trend: ρ with sentence punct > word start > function word > subword; spread: Kruskal-Wallis H); "
                  "the post's SmolLM2-1.7B graft below:",
                  "", "| layer | " + " | ".join(categories) + " | EOS | unused | trend ρ | p | H | p |",
                  "|---|" + "---|" * (len(categories) + 6)]
        lines += [_layer_line(_row_name(layer, result), row, categories) for layer, row in result["layers"].items()]
        lines += _post_lines(categories)
        first = next(iter(result["layers"]))
        lines += ["", *_first_layer_lines(_row_name(first, result), result["layers"][first]), ""]
    return "\n".join(lines)


def figures_of(results: dict[str, Any]) -> dict[str, Any]:
    from repo_lens.plots import category_drift_figure, layer_series_figure

    figures = {}
    for model, result in results.items():
        name, layers = stem(model), result["layers"]
        series: dict[str, list[float]] = {}
        for layer, row in layers.items():
            covered = result["rows"] if result.get("shared_delta") else [int(layer)]
            for category, entry in row["table"]["categories"].items():
                for index in covered:
                    series.setdefault(category, [float("nan")] * len(result["layer_kinds"]))[index] = entry["median"]
        figures[f"{name}_category_medians"] = layer_series_figure(series, "median δ", f"{model}: median δ by category")
        names = list(layers)
        chosen = [names[k] for k in sorted({0, len(names) // 2, len(names) - 1})]  # first, middle, last
        drifts = {}
        for layer in chosen:
            rows = layers[layer]["drift"]["categories"]
            drifts[f"L{layer}"] = SimpleNamespace(labels=tuple(rows), median=[r["median"] for r in rows.values()],
                                                  median_ci=[r["median_ci"] for r in rows.values()])
        figures[f"{name}_drift"] = category_drift_figure(drifts, f"{model}: relative drift of δ by category")
    return figures


def post_vocabulary_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                          progress: bool = True) -> dict[str, Any]:
    """The graft script's vocabulary table and the relative drift, per learned layer of each of ``models``
    (every vocabulary id; quick: the first 2,048 ids and fewer bootstrap resamples and permutations)."""
    results = {model: analyse(model, quick, progress) for model in models}
    document = {"study": "increment_post_vocabulary", "settings": {"quick": quick, "quick_ids": QUICK_IDS},
                "results": results, "markdown": vocabulary_markdown(results)}
    return save_study(out, document, figures_of(results) if figures else None, table="vocabulary.md")
