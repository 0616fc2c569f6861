# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Do learned position increments mark Chinese word boundaries?
#
# A byte-level model with *learned position increments* advances its position by a learned δ > 0
# per token instead of by 1 (position = running sum of δ; RoPE rotates by it). A blog post on such
# models trained on English and Chinese bytes asked whether δ grows where a Chinese word ends, since
# Chinese text marks no word boundaries with spaces. Its protocol, which repo_lens implements:
#
# * only gaps between two Chinese characters are scored (no space or punctuation between them);
# * a gap is scored by the increment of the first byte of the next character;
# * its label is whether the previous character ends a word (of jieba's segmentation, or of a
#   hand-segmented corpus);
# * the score is the ROC-AUC per layer: 0.5 = no relation, above 0.5 = boundaries get larger
#   increments, below 0.5 smaller ones.
#
# Here: the zoo's per-layer (`bytes-lpi-layer`) and shared (`bytes-lpi`) learned-increment models
# and RePo (`bytes-repo`, whose increments are the differences of consecutive positions), on
# held-out paragraphs of the hand-segmented People's Daily corpus (January 1998).

# %%
import numpy as np

import repo_lens
from repo_lens.analysis import (
    boundary_auc,
    byte_categories,
    cjk_boundary_labels,
    increments_by_category,
    jieba_words,
    trace_increments,
)
from repo_lens.data import encode_with_offsets

repo_lens.plots.notebook_setup()

# %% [markdown]
# ## Held-out paragraphs with gold words
#
# `repo_lens.data.held_out_chinese_sentences()` returns the paragraphs of the corpus that no zoo
# model trained on, each with its gold segmentation (`words`). We keep the first paragraphs that fit
# the models' context whole.

# %%
MODELS = ["bytes-lpi-layer", "bytes-lpi", "bytes-repo"]
lenses = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in MODELS}
context = min(lens.context_length for lens in lenses.values())

paragraphs = [s for s in repo_lens.data.held_out_chinese_sentences() if 40 <= len(s.text.encode()) <= context][:60]
print(len(paragraphs), "paragraphs of up to", context, "bytes,", sum(len(s.text) for s in paragraphs), "characters")

example = next(s for s in paragraphs if len(s.text) <= 40)
print(example.text)
print("gold :", " | ".join(example.words))
print("jieba:", " | ".join(jieba_words(example.text)))

# %% [markdown]
# ## Word-boundary AUC per layer
#
# For each paragraph: trace it (`trace_batch` traces 16 paragraphs per forward pass, each trace the
# same as alone), take every layer's increments (`trace_increments`, averaged over heads), find the
# scored gaps and their labels (`cjk_boundary_labels`), then pool all paragraphs and compute the
# AUC per layer (`boundary_auc`).

# %%
def boundary_aucs(lens, paragraphs):
    encoded = [encode_with_offsets(lens.tokenizer, paragraph.text) for paragraph in paragraphs]
    traces = lens.trace_batch([ids for ids, _ in encoded], batch_size=16, progress=False)
    scores, gold, jieba = [], [], []
    for paragraph, (_, offsets), trace in zip(paragraphs, encoded, traces):
        increments = trace_increments(trace).mean(axis=1)  # (layers, tokens): head-averaged
        by_gold = cjk_boundary_labels(paragraph.text, offsets, paragraph.words)
        by_jieba = cjk_boundary_labels(paragraph.text, offsets, jieba_words(paragraph.text))
        scores.append(increments[:, by_gold.scored])  # the scored gaps do not depend on the words
        gold.append(by_gold.labels[by_gold.scored])
        jieba.append(by_jieba.labels[by_jieba.scored])
    scores, gold, jieba = np.concatenate(scores, axis=1), np.concatenate(gold), np.concatenate(jieba)
    return {"gold": boundary_auc(scores, gold), "jieba": boundary_auc(scores, jieba),
            "gaps": len(gold), "boundary share": gold.mean()}


# the blog post's per-layer model (Chinese Wikipedia, jieba words), for comparison
BLOG_PER_LAYER_JIEBA = [0.50, 0.54, 0.68, 0.37, 0.63, 0.47]

aucs = {name: boundary_aucs(lens, paragraphs) for name, lens in lenses.items()}
first = aucs[MODELS[0]]
print(f"{first['gaps']} scored gaps, {first['boundary share']:.0%} of them word boundaries (gold)\n")
print(f"{'':28}" + "".join(f"{f'L{layer}':>7}" for layer in range(len(first["gold"]))))
for name, result in aucs.items():
    for segmentation in ("gold", "jieba"):
        print(f"{name + ' (' + segmentation + ')':28}" + "".join(f"{auc:7.3f}" for auc in result[segmentation]))
print(f"{'blog post, per layer (jieba)':28}" + "".join(f"{auc:7.2f}" for auc in BLOG_PER_LAYER_JIEBA))
name, segmentation, layer, auc = max(((name, segmentation, layer, auc) for name, result in aucs.items()
                                      for segmentation in ("gold", "jieba") for layer, auc in enumerate(result[segmentation])),
                                     key=lambda row: abs(row[3] - 0.5))
print(f"\nfurthest from chance among the zoo models: {name}, layer {layer} ({segmentation} words), AUC {auc:.3f}")

# %%
series = {f"{name} ({segmentation})": result[segmentation].tolist()
          for name, result in aucs.items() for segmentation in ("gold", "jieba")}
series["blog post, per layer (jieba)"] = BLOG_PER_LAYER_JIEBA
repo_lens.plots.layer_series_figure(series, "ROC-AUC", "Chinese word boundaries: increment AUC per layer",
                                    reference=0.5)

# %% [markdown]
# Read the table layer by layer: an AUC away from 0.5 in either direction means that layer's
# increments carry word-boundary information; the last line of the output names the zoo model and
# layer furthest from chance, to hold against the blog post's row. In `bytes-repo` the RoPE layers
# advance by exactly 1 at every byte, so their AUC is exactly 0.5; `bytes-lpi` shares one increment
# across its layers, so all its layers agree. Where gold words and jieba's disagree (the example
# above shows how), the two rows of a model differ.
#
# ## One paragraph, spaced by the learned positions
#
# The per-layer model's positions on the example paragraph, one row per layer, each row scaled to
# its own range (head 0; in an LPI layer every head shares δ). Compare the gaps between the
# characters with the gold words printed above.

# %%
ids, _ = encode_with_offsets(lenses["bytes-lpi-layer"].tokenizer, example.text)
lenses["bytes-lpi-layer"].trace(ids).plot(head=0)

# %% [markdown]
# ## Increments by byte category
#
# The blog post also lists the mean learned δ of its shared-increment model by kind of byte
# (lowercase letters, spaces, punctuation, the lead and continuation bytes of Chinese characters, …).
# The same table for `bytes-lpi`, pooled over held-out English and Chinese text, with the post's
# means beside ours (its categories "word boundary" and "punctuation" are our `space` and
# `punctuation`).

# %%
BLOG_SHARED_MEANS = {"lowercase": 0.79, "continuation": 0.80, "cjk_lead": 0.92, "space": 1.05,
                     "uppercase": 1.10, "punctuation": 1.18}

splits = repo_lens.data.bilingual_splits()
texts = splits["en"][1][:6] + splits["zh"][1][:6]  # held-out documents, cut to the context
lpi = lenses["bytes-lpi"]
encoded = [lpi.encode(text)[: lpi.context_length] for text in texts]
pooled, categories = [], []
for ids, trace in zip(encoded, lpi.trace_batch(encoded, batch_size=12, progress=False)):
    pooled.append(trace_increments(trace).mean(axis=1)[:, 1:])  # the first byte has no gap
    categories.append(byte_categories(ids)[1:])
table = increments_by_category(np.concatenate(pooled, axis=1), np.concatenate(categories))

print(f"{'category':14} {'bytes':>6} {'mean δ':>8} {'blog post':>10}")
for index, label in enumerate(table.labels):
    blog = BLOG_SHARED_MEANS.get(label)
    print(f"{label:14} {int(table.count[0, index]):6d} {table.mean[0, index]:8.3f} "
          + (f"{blog:10.2f}" if blog is not None else ""))
order = [table.labels[i] for i in np.argsort(table.mean[0]) if table.labels[i] in BLOG_SHARED_MEANS]
print("\nfrom smallest to largest mean δ, ours:     ", " < ".join(order))
print("from smallest to largest mean δ, blog post:", " < ".join(sorted(BLOG_SHARED_MEANS, key=BLOG_SHARED_MEANS.get)))

# %%
layers = [{label: float(table.mean[layer, i]) for i, label in enumerate(table.labels)}
          for layer in range(table.mean.shape[0])]
repo_lens.plots.category_increments_figure(layers[:1], title="bytes-lpi: mean learned increment by byte category")
