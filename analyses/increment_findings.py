"""seeds/002's findings on learned position increments, re-measured on the zoo's LPI models.

For each model: mean increment per byte category and layer over held-out English and Chinese
text (the zoo's validation documents), Chinese word-boundary ROC-AUC per layer on held-out People's
Daily paragraphs (gold segmentation and jieba), and the entity-grouping test ("New York" vs
"York New": increment at the space, Wilcoxon signed-rank). Writes ``results.json``,
``findings.md`` (our numbers beside the post's) and figures (PDF + SVG) to ``--out``.

    python analyses/increment_findings.py --out build/increment_findings \
        [--model zoo:bytes-lpi --model zoo:bytes-lpi-layer] [--windows 60] [--sentences 400]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# seeds/002's tables (shared model: whole-model δ; per-layer model: L0 for categories)
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


def held_out_texts(windows: int) -> list[str]:
    """``windows`` held-out documents per language (English Brown, Chinese People's Daily blocks)."""
    from repo_lens.data.bilingual import bilingual_splits

    splits = bilingual_splits()
    return [text for lang in ("en", "zh") for text in splits[lang][1][:windows]]


def analyse(model: str, windows: int, sentences: int, progress: bool) -> dict:
    import repo_lens
    from repo_lens.data.bilingual import held_out_chinese_sentences
    from repo_lens.increment_study import boundary_table, category_table, entity_table

    lens = repo_lens.load(model, device="cpu")
    return {
        "layer_kinds": list(lens.model.cfg.layer_mechanisms),
        "categories": category_table(lens, held_out_texts(windows), progress=progress),
        "boundaries": boundary_table(lens, held_out_chinese_sentences()[:sentences], progress=progress),
        "entities": entity_table(lens, progress=progress),
    }


def findings_markdown(results: dict) -> str:
    lines = ["# seeds/002 findings on our models", ""]
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


def write_figures(results: dict, out: Path) -> list[Path]:
    from repo_lens.plots import category_increments_figure, export, layer_series_figure

    written = []
    for model, result in results.items():
        stem = model.replace("zoo:", "").replace("/", "_")
        layers = result["categories"]["layers"]
        figures = {
            f"{stem}_categories": category_increments_figure(
                layers, [c for c in CATEGORY_ORDER if c in layers[0]], title=f"{model}: mean increment by byte category"),
            f"{stem}_boundary_auc": layer_series_figure(
                {"gold": result["boundaries"]["auc_gold"], "jieba": result["boundaries"]["auc_jieba"],
                 "seeds/002 (jieba)": POST_AUC}, "ROC-AUC", f"{model}: Chinese word-boundary AUC", reference=0.5),
            f"{stem}_entities": layer_series_figure(
                {"real order": result["entities"]["mean_real"], "reversed": result["entities"]["mean_reversed"]},
                "mean δ at the space", f"{model}: 'New York' vs 'York New'"),
        }
        for name, figure in figures.items():
            for suffix in (".pdf", ".svg"):
                written.append(export(figure, out / f"{name}{suffix}"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a zoo name or checkpoint (repeat); default both LPI models")
    parser.add_argument("--out", required=True)
    parser.add_argument("--windows", type=int, default=60, help="held-out documents per language for the categories")
    parser.add_argument("--sentences", type=int, default=400, help="held-out Chinese paragraphs for the AUC")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    from repo_lens.atomic import atomic_write_bytes

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = args.model or ["zoo:bytes-lpi", "zoo:bytes-lpi-layer"]
    results = {model: analyse(model, args.windows, args.sentences, not args.quiet) for model in models}
    document = {"settings": vars(args) | {"model": models}, "results": results,
                "seeds_002": {"categories": POST_CATEGORIES, "auc_jieba": POST_AUC, "entities": POST_ENTITY}}
    atomic_write_bytes(out / "results.json", json.dumps(document, indent=2).encode())
    atomic_write_bytes(out / "findings.md", findings_markdown(results).encode())
    if not args.no_figures:
        write_figures(results, out)
    print(findings_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
