"""The byte-model analyses of "Learned position increments" (Brendan Long), computed as its scripts compute
them (``experiments/selective_pe/``: ``byte_boundary_analysis.py``, ``entity_grouping_analysis.py``,
``plot_increments.py``), on the zoo's byte models or your own.

Per model, over the layers that sum learned increments (δ averaged over heads):

1. **Byte table**: min / max / mean δ of the script's byte categories, for every byte id as the first
   byte of a document (exactly the script's embedding-level table for a shared DeltaMLP and for layer 0 of
   a per-layer one), and over the bytes of held-out English and Chinese documents in context (the first
   context's worth of each, after the separator).
2. **Chinese word boundaries**: windows of at most 512 bytes (or the model's context, if shorter) of
   held-out Chinese, gaps between two CJK Unified Ideographs scored by δ at the next character's lead byte,
   labels from jieba's precise mode on the whole text, ROC-AUC per layer, texts until 40,000 gaps.
3. **Entities**: δ at the space of the script's 79 entities × 5 carriers (EOS prepended), averaged over
   carriers, real vs reversed order, two-sided Wilcoxon signed-rank per layer.
4. **Spacing**: each character's increment (the sum of its bytes' δ) of the post's two sentences, scaled
   per row and on one scale, drawn as the post's spacing plot.

Writes ``results.json``, ``post_scripts.md`` (the post's numbers beside ours) and figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens.studies.reproductions.common import save_study, stem
from repo_lens.studies.reproductions.increment_findings import POST_AUC, POST_ENTITY

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.protocol import LensProtocol

POST_SENTENCES = {"english": "Marie Curie, a Polish-born physicist, won two Nobel Prizes.",
                  "chinese": "人工智能是计算机科学的一个分支。"}  # plot_increments.py's DEFAULT_EN / DEFAULT_ZH
WINDOW_BYTES = 512
BATCH = 128
# The post's per-byte tables (mean δ; the shared model, and layer 0 of the per-layer model), in the script's
# categories. The post merges ". , ; ! ?" into one row (1.18 shared, 9.90 at L0): both punctuation rows carry it.
POST_BYTE_MEANS = {
    "shared": {"English within-word (a-z)": 0.79, "Chinese char interior (cont 0x80-0xBF)": 0.80,
               "Chinese char start (lead 0xE4-0xE9)": 0.92, "Space": 1.05, "Capital letters (A-Z)": 1.10,
               "Sentence punct (. ! ?)": 1.18, "Other punct (, ; : -)": 1.18, "Newline": 2.12, "EOS": 2.90},
    "per-layer L0": {"English within-word (a-z)": 1.64, "Chinese char interior (cont 0x80-0xBF)": 1.79,
                     "Chinese char start (lead 0xE4-0xE9)": 2.43, "Capital letters (A-Z)": 9.52,
                     "Sentence punct (. ! ?)": 9.90, "Other punct (, ; : -)": 9.90, "EOS": 9.82, "Space": 9.99,
                     "Newline": 9.99},
}
SHARED_POST_AUC = 0.50  # the post's shared model: byte identity, chance


def learned_increment_rows(lens: Lens) -> list[int]:
    """The layers whose mechanism sums learned increments (``trace.extras["increments"]`` holds their δ)."""
    from repo_lens.errors import InputError
    from repo_lens.model.registry import is_learned, mechanism_traits

    rows = [layer for layer, kind in enumerate(lens.layer_kinds)
            if is_learned(kind) and mechanism_traits(kind).increments is not None]
    if not rows:
        raise InputError(f"the model's layers ({', '.join(sorted(set(lens.layer_kinds)))}) sum no learned increments; "
                         "these analyses read δ (e.g. zoo:bytes-post-lpi, zoo:bytes-post-lpi-resid)")
    return rows


def row_increments(lens: LensProtocol, sequences: list[list[int]], rows: list[int]) -> list[np.ndarray]:
    """(len(rows), T) head-averaged δ of each sequence, traced ``BATCH`` at a time."""
    from repo_lens.analysis import trace_increments
    from repo_lens.lens_inputs import trace_many

    traces = trace_many(lens, sequences, batch_size=BATCH)
    return [trace_increments(trace)[rows].mean(axis=1) for trace in traces]


def byte_tables(lens: LensProtocol, rows: list[int], separator: int, texts: list[str]) -> dict[str, Any]:
    """Part 1: the script's byte table of every byte id after the separator, and over held-out text."""
    from repo_lens.analysis import byte_category_table, vocabulary_increments

    every_byte = np.arange(257)
    vocabulary = byte_category_table(vocabulary_increments(lens, every_byte, [separator], batch_size=64)[rows],
                                     every_byte)
    ids = [[separator, *text.encode("utf-8")][: lens.context_length] for text in texts]
    deltas = row_increments(lens, ids, rows)
    in_context = byte_category_table(np.concatenate([d[:, 1:] for d in deltas], axis=-1),
                                     np.concatenate([np.asarray(one[1:], dtype=np.int64) for one in ids]))
    return {"vocabulary": [vocabulary.rows(r) for r in range(len(rows))],
            "in_context": [in_context.rows(r) for r in range(len(rows))]}


def boundary_result(lens: Lens, rows: list[int], texts: list[str], max_gaps: int) -> dict[str, Any]:
    """Part 2: the between-CJK word-boundary ROC-AUC per layer against jieba."""
    from repo_lens.analysis import boundary_windows, window_boundary_auc

    max_bytes = min(WINDOW_BYTES, lens.context_length)
    windows = boundary_windows(texts, max_bytes=max_bytes, max_gaps=max_gaps)
    deltas = row_increments(lens, [window.byte_ids.tolist() for window in windows], rows)
    result = window_boundary_auc(deltas, windows)
    return {"auc": result.auc.tolist(), "n_gaps": result.n_gaps, "boundary_rate": result.boundary_rate,
            "max_bytes": max_bytes, "n_texts": len({window.text_index for window in windows})}


def entity_result(lens: LensProtocol, rows: list[int], separator: int) -> dict[str, Any]:
    """Part 3: δ at the space, real vs reversed, averaged over the carriers, Wilcoxon per layer."""
    from repo_lens.analysis import CARRIER_SENTENCES, ENTITY_PAIRS, entity_grouping_test, entity_prompts

    values = []
    for prompts in entity_prompts(ENTITY_PAIRS, CARRIER_SENTENCES):
        deltas = row_increments(lens, [[separator, *p.text.encode("utf-8")] for p in prompts], rows)
        at_space = np.stack([d[:, 1 + p.space_byte] for d, p in zip(deltas, prompts)])
        values.append(at_space.reshape(len(ENTITY_PAIRS), len(CARRIER_SENTENCES), len(rows)))
    test = entity_grouping_test(values[0], values[1], carrier_axis=1)
    return {"mean_real": test.mean_real.tolist(), "mean_reversed": test.mean_reversed.tolist(),
            "share_smaller": test.share_smaller.tolist(), "p_value": test.p_value.tolist(), "n_entities": test.n,
            "n_carriers": len(CARRIER_SENTENCES)}


def spacing_result(lens: LensProtocol, rows: list[int], separator: int) -> dict[str, Any]:
    """Part 4: the post's two sentences, each character's increment per row and on one scale."""
    from repo_lens.analysis import char_increments

    out = {}
    for name, text in POST_SENTENCES.items():
        [deltas] = row_increments(lens, [[separator, *text.encode("utf-8")]], rows)
        out[name] = {"text": text, "per_row": char_increments(deltas[:, 1:], text, scale="per-row").tolist(),
                     "shared": char_increments(deltas[:, 1:], text, scale="shared").tolist()}
    return out


def analyse(model: str, held_out: dict[str, list[str]], documents: int, max_gaps: int) -> dict[str, Any]:
    from repo_lens.analysis import document_separator
    from repo_lens.errors import InputError
    from repo_lens.loading import load

    lens = load(model, device="cpu")
    if lens.vocab_size != 257:
        raise InputError(f"{model} has {lens.vocab_size} token ids; these analyses read a byte-level model's "
                         "257 (bytes and the separator); for a subword model use increment_post_vocabulary")
    rows = learned_increment_rows(lens)
    separator = document_separator(lens.tokenizer)
    return {"layer_kinds": list(lens.layer_kinds), "rows": rows, "shared_delta": hasattr(lens.model, "shared_delta"),
            "byte_table": byte_tables(lens, rows, separator, held_out["en"][:documents] + held_out["zh"][:documents]),
            "boundaries": boundary_result(lens, rows, held_out["zh"], max_gaps),
            "entities": entity_result(lens, rows, separator),
            "spacing": spacing_result(lens, rows, separator)}


def _table_lines(tables: list[dict[str, dict[str, float]]], names: list[str], value: str,
                 post: dict[str, float] | None = None) -> list[str]:
    extra = " post |" if post is not None else ""
    lines = ["| category | " + " | ".join(names) + " |" + extra, "|---|" + "---|" * (len(names) + (post is not None))]
    for category in tables[0]:
        cells = [(f"{t[category]['min']:.2f}–{t[category]['max']:.2f} ({t[category]['mean']:.2f})"
                  if value == "range" else f"{t[category]['mean']:.2f}") if t[category]["count"] else "–"
                 for t in tables]
        if post is not None:
            cells.append(f"{post[category]:.2f}" if category in post else "–")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return lines


def _post_columns(result: dict[str, Any], layer: int) -> tuple[str, str]:
    """The post's AUC and entity p beside layer ``layer``: its per-layer model, or chance for a shared one."""
    if result["shared_delta"]:
        return f"{SHARED_POST_AUC:.2f}", "–"
    if layer < len(POST_AUC):
        return f"{POST_AUC[layer]:.2f}", f"{POST_ENTITY['p_value'][layer]:.1g}"
    return "–", "–"


def _shown_rows(result: dict[str, Any]) -> tuple[list[int], list[str]]:
    """Which rows the tables show, and their names: a shared DeltaMLP's δ is the same in every layer (one row)."""
    if result["shared_delta"]:
        return [0], ["shared"]
    return list(range(len(result["rows"]))), [f"L{layer}" for layer in result["rows"]]


def post_markdown(results: dict[str, Any]) -> str:
    lines = ["# The learned-increments post's scripts on our models", ""]
    for model, result in results.items():
        shown, names = _shown_rows(result)
        tables = {key: [table[k] for k in shown] for key, table in result["byte_table"].items()}
        shared = " (one shared DeltaMLP: the same δ in every layer)" if result["shared_delta"] else ""
        post = POST_BYTE_MEANS["shared" if result["shared_delta"] else "per-layer L0"]
        lines += [f"## {model}{shared}", "", "δ of every byte id after the separator, min–max (mean); the post's "
                  "mean (its shared model, or its per-layer model's L0; its punctuation row covers both):", "",
                  *_table_lines(tables["vocabulary"], names, "range", post), "",
                  "Mean δ over the bytes of held-out text:", "", *_table_lines(tables["in_context"], names, "mean"), ""]
        bounds, ents = result["boundaries"], result["entities"]
        lines += [f"Chinese word boundaries: {bounds['n_gaps']} gaps (boundary rate {bounds['boundary_rate']:.3f}) "
                  f"in windows of ≤ {bounds['max_bytes']} bytes of {bounds['n_texts']} texts; entities: "
                  f"{ents['n_entities']} × {ents['n_carriers']} carriers.", "",
                  "| layer | AUC | post AUC | δ real | δ reversed | real smaller | p (2-sided) | post p |",
                  "|---|---|---|---|---|---|---|---|"]
        for k, name in zip(shown, names):
            post_auc, post_p = _post_columns(result, result["rows"][k])
            lines.append(f"| {name} | {bounds['auc'][k]:.3f} | {post_auc} | {ents['mean_real'][k]:.3f} | "
                         f"{ents['mean_reversed'][k]:.3f} | {ents['share_smaller'][k]:.2f} | "
                         f"{ents['p_value'][k]:.2g} | {post_p} |")
        lines.append("")
    return "\n".join(lines)


def figures_of(results: dict[str, Any]) -> dict[str, Any]:
    from repo_lens.plots import category_increments_figure, char_spacing_figure, layer_series_figure

    figures = {}
    for model, result in results.items():
        name, rows, kinds = stem(model), result["rows"], result["layer_kinds"]

        def by_layer(values: list[float]) -> list[float]:
            full = [float("nan")] * len(kinds)
            for row, value in zip(rows, values):
                full[row] = value
            return full

        shown, _ = _shown_rows(result)
        figures[f"{name}_byte_table"] = category_increments_figure(
            [{c: v["mean"] for c, v in result["byte_table"]["vocabulary"][k].items()} for k in shown],
            title=f"{model}: mean δ by byte category" + (" (shared δ)" if result["shared_delta"] else ""))
        figures[f"{name}_boundary_auc"] = layer_series_figure(
            {"ours (jieba)": by_layer(result["boundaries"]["auc"]),
             "the post": [SHARED_POST_AUC] * len(kinds) if result["shared_delta"] else POST_AUC}, "ROC-AUC",
            f"{model}: Chinese word-boundary AUC", reference=0.5)
        figures[f"{name}_entities"] = layer_series_figure(
            {"real order": by_layer(result["entities"]["mean_real"]),
             "reversed": by_layer(result["entities"]["mean_reversed"])}, "mean δ at the space",
            f"{model}: 'New York' vs 'York New'")
        for text_name, spacing in result["spacing"].items():
            for scale in ("per_row", "shared"):
                figures[f"{name}_spacing_{text_name}_{scale}"] = char_spacing_figure(
                    spacing["text"], np.asarray(spacing[scale]), [kinds[r] for r in rows], layers=rows,
                    title=f"{model}: learned position increments ({scale.replace('_', '-')} scale)")
    return figures


def post_scripts_study(out: Path, models: list[str], quick: bool = False, figures: bool = True, progress: bool = True,
                       held_out: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The post's byte-model scripts on ``models``: the first 30 held-out documents per language for the
    in-context table, held-out Chinese documents until 40,000 scored gaps (quick: 4 documents, 2,000 gaps).
    ``held_out`` ({"en": texts, "zh": texts}) replaces the zoo's held-out documents."""
    documents, max_gaps = (4, 2_000) if quick else (30, 40_000)
    if held_out is None:
        from repo_lens.data.bilingual import bilingual_splits

        splits = bilingual_splits()
        held_out = {"en": splits["en"][1], "zh": splits["zh"][1]}
    results = {model: analyse(model, held_out, documents, max_gaps) for model in models}
    document = {"study": "increment_post_scripts",
                "settings": {"documents": documents, "max_gaps": max_gaps, "window_bytes": WINDOW_BYTES},
                "results": results, "markdown": post_markdown(results),
                "post": {"auc_jieba": POST_AUC, "entities": POST_ENTITY}}
    return save_study(out, document, figures_of(results) if figures else None, table="post_scripts.md")
