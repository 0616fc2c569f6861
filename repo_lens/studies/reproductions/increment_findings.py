"""The learned-increments post's findings on learned position increments, re-measured on the zoo's LPI models.

For each model: mean increment per byte category and layer over held-out English and Chinese
text (the zoo's validation documents), Chinese word-boundary ROC-AUC per layer on held-out People's
Daily paragraphs (gold segmentation and jieba), and the entity-grouping test ("New York" vs
"York New": increment at the space, Wilcoxon signed-rank). Writes ``results.json``,
``findings.md`` (our numbers beside the post's) and figures (PDF + SVG) to ``--out``.

    python analyses/increment_findings.py --out build/increment_findings \
        [--model zoo:bytes-post-lpi --model zoo:bytes-post-lpi-resid] [--quick]
"""

from __future__ import annotations

from pathlib import Path

from repo_lens.studies.reproductions.common import held_out_documents, save_study, stem

# the learned-increments post's tables (shared model: whole-model δ; per-layer model: L0 for categories)
POST_CATEGORIES = {
    "shared": {"lowercase": 0.79, "continuation": 0.80, "cjk_lead": 0.92, "space": 1.05, "uppercase": 1.10,
               "punctuation": 1.18, "newline": 2.12, "separator": 2.90},
    "per-layer L0": {"lowercase": 1.64, "continuation": 1.79, "cjk_lead": 2.43, "uppercase": 9.52,
                     "punctuation": 9.90, "separator": 9.82, "space": 9.99, "newline": 9.99},
}
POST_AUC = [0.50, 0.54, 0.68, 0.37, 0.63, 0.47]
POST_ENTITY = {"mean_real": [9.99, 1.42, 1.43, 0.06, 0.86, 0.47], "mean_reversed": [9.99, 1.43, 1.54, 0.10, 1.21, 0.64],
               "share_smaller": [0.0, 0.51, 0.71, 0.66, 0.77, 0.78], "p_value": [1.0, 0.28, 3e-5, 6e-5, 3e-8, 3e-7]}
CATEGORY_ORDER = ["lowercase", "continuation", "cjk_lead", "digit", "space", "uppercase", "punctuation", "newline",
                  "separator"]




def analyse(model: str, windows: int, sentences: int, progress: bool) -> dict:
    from repo_lens.data.bilingual import held_out_chinese_sentences
    from repo_lens.loading import load
    from repo_lens.studies.increment_tables import boundary_table, category_table, entity_table

    lens = load(model, device="cpu")
    return {
        "layer_kinds": list(lens.model.cfg.layer_mechanisms),
        "categories": category_table(lens, held_out_documents(windows), progress=progress),
        "boundaries": boundary_table(lens, held_out_chinese_sentences()[:sentences], progress=progress),
        "entities": entity_table(lens, progress=progress),
    }


def findings_markdown(results: dict) -> str:
    lines = ["# the learned-increments post findings on our models", ""]
    for model, result in results.items():
        categories = result["categories"]["layers"]
        lines += [f"## {model} ({', '.join(sorted(set(result['layer_kinds'])))})", "",
                  "Mean increment by byte category (held-out text), per layer:", "",
                  "| category | " + " | ".join(f"L{i}" for i in range(len(categories))) + " |",
                  "|---|" + "---|" * len(categories)]
        for category in CATEGORY_ORDER:
            if category in categories[0]:
                lines.append(f"| {category} | " + " | ".join(f"{layer[category]:.2f}" for layer in categories) + " |")
        boundaries, entities = result["boundaries"], result["entities"]
        lines += ["", "Chinese word-boundary AUC (0.5 = chance) and the entity test, per layer:", "",
                  "| layer | AUC gold | AUC jieba | δ real | δ reversed | share smaller | p |", "|---|---|---|---|---|---|---|"]
        for layer in range(len(categories)):
            lines.append(f"| L{layer} | {boundaries['auc_gold'][layer]:.3f} | {boundaries['auc_jieba'][layer]:.3f} | "
                         f"{entities['mean_real'][layer]:.3f} | {entities['mean_reversed'][layer]:.3f} | "
                         f"{entities['share_smaller'][layer]:.2f} | {entities['p_value'][layer]:.2g} |")
        lines += ["", f"{boundaries['n_gaps_gold']} scored gaps (gold), {boundaries['n_gaps_jieba']} (jieba); "
                  f"{entities['n']} entity prompts per order.", ""]
    return "\n".join(lines)


def figures_of(results: dict) -> dict:
    from repo_lens.plots import category_increments_figure, layer_series_figure

    figures = {}
    for model, result in results.items():
        name = stem(model)
        layers = result["categories"]["layers"]
        figures[f"{name}_categories"] = category_increments_figure(
            layers, [c for c in CATEGORY_ORDER if c in layers[0]], title=f"{model}: mean increment by byte category")
        figures[f"{name}_boundary_auc"] = layer_series_figure(
            {"gold": result["boundaries"]["auc_gold"], "jieba": result["boundaries"]["auc_jieba"],
             "the learned-increments post (jieba)": POST_AUC}, "ROC-AUC", f"{model}: Chinese word-boundary AUC", reference=0.5)
        figures[f"{name}_entities"] = layer_series_figure(
            {"real order": result["entities"]["mean_real"], "reversed": result["entities"]["mean_reversed"]},
            "mean δ at the space", f"{model}: 'New York' vs 'York New'")
    return figures


def increment_findings_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                             progress: bool = True) -> dict:
    """The learned-increments post's tables on ``models`` (30 held-out documents per language, 250 Chinese paragraphs; quick: 8 and 100)."""
    windows, sentences = (8, 100) if quick else (30, 250)
    results = {model: analyse(model, windows, sentences, progress) for model in models}
    markdown = findings_markdown(results)
    document = {"study": "increment_findings", "settings": {"windows": windows, "sentences": sentences},
                "results": results, "markdown": markdown,
                "seeds_002": {"categories": POST_CATEGORIES, "auc_jieba": POST_AUC, "entities": POST_ENTITY}}
    return save_study(out, document, figures_of(results) if figures else None, table="findings.md")
