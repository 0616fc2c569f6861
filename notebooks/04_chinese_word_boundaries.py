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
# per token instead of by 1 (position = running sum of δ; RoPE rotates by it). "Learned position
# increments" (Brendan Long) trained such models on English and Chinese bytes and asked whether δ
# grows where a Chinese word ends, since Chinese text marks no word boundaries with spaces. Its
# protocol, which repo_lens implements:
#
# * only gaps between two Chinese characters are scored (no space or punctuation between them);
# * a gap is scored by the increment of the first byte of the next character;
# * its label is whether the previous character ends a word (of jieba's segmentation, or of a
#   hand-segmented corpus);
# * the score is the ROC-AUC per layer: 0.5 = no relation, above 0.5 = boundaries get larger
#   increments, below 0.5 smaller ones.
#
# Here: the zoo's byte models of the post's two kinds, of its size and architecture and trained by
# its recipe on this project's English and Chinese text (the post used Wikipedia): per-layer
# increments, each layer's δ read from the residual stream (`bytes-post-lpi-resid`), and one δ shared
# by all layers (`bytes-post-lpi`). Beside them RePo (`bytes-repo`, a smaller model whose increments
# are the differences of consecutive positions), a learned mechanism that is not built from
# increments. All three read held-out paragraphs of the hand-segmented People's Daily corpus
# (January 1998).

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
# every model's context whole: `bytes-repo`'s context is the shortest, so it sets the limit, and all
# three models score the very same gaps.

# %%
MODELS = ["bytes-post-lpi-resid", "bytes-post-lpi", "bytes-repo"]
lenses = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in MODELS}
for name, lens in lenses.items():
    print(f"{name:21} {lens.meta['info']['steps']:5d} training steps, context {lens.context_length} bytes, "
          f"layers {lens.layer_kinds}")
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
            "gaps": len(gold), "boundary share": gold.mean(), "scores": scores, "labels": {"gold": gold, "jieba": jieba}}


# the blog post's per-layer model (Chinese Wikipedia, jieba words), for comparison
BLOG_PER_LAYER_JIEBA = [0.50, 0.54, 0.68, 0.37, 0.63, 0.47]

aucs = {name: boundary_aucs(lens, paragraphs) for name, lens in lenses.items()}
first = aucs[MODELS[0]]
print(f"{first['gaps']} scored gaps, {first['boundary share']:.0%} of them word boundaries (gold)\n")
print(f"{'':33}" + "".join(f"{f'L{layer}':>7}" for layer in range(len(first["gold"]))))
for name, result in aucs.items():
    for segmentation in ("gold", "jieba"):
        print(f"{name + ' (' + segmentation + ')':33}" + "".join(f"{auc:7.3f}" for auc in result[segmentation]))
print(f"{'blog post, per layer (jieba)':33}" + "".join(f"{auc:7.2f}" for auc in BLOG_PER_LAYER_JIEBA))
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
# layer furthest from chance, to hold against the post's row. How far from 0.5 is far enough? The
# AUC of the very same increments against shuffled word labels shows how far chance alone strays:
# below, each layer is called *larger* (word ends get larger increments than the gaps inside a
# word) or *smaller* only where its AUC lies outside the band that 95% of 200 shuffles stay within.

# %%
def chance_band(scores, labels, rng, shuffles=200):
    """Per layer, the distance from 0.5 that 95% of the AUCs against shuffled labels stay within."""
    null = np.array([boundary_auc(scores, rng.permutation(labels)) for _ in range(shuffles)])
    return np.quantile(np.abs(null - 0.5), 0.95, axis=0)


def side(auc, band):
    return "larger" if auc > 0.5 + band else "smaller" if auc < 0.5 - band else "chance"


rng = np.random.default_rng(0)
print(f"{'':33}" + "".join(f"{f'L{layer}':>9}" for layer in range(len(first["gold"]))) + "   chance band")
for name, result in aucs.items():
    for segmentation in ("gold", "jieba"):
        band = chance_band(result["scores"], result["labels"][segmentation], rng)
        print(f"{name + ' (' + segmentation + ')':33}"
              + "".join(f"{side(auc, width):>9}" for auc, width in zip(result[segmentation], band))
              + f"   0.5 ± {band.max():.3f}")

# %% [markdown]
# * `bytes-post-lpi-resid`: its L0 reads only the embedding of the byte, so the increment it scores
#   at a gap depends on nothing but the lead byte of the next character, not on where the word ends;
#   the post's L0 sits at chance for that reason. The layers above read the context, and that is
#   where the post found word boundaries (larger increments in its L2 and L4, smaller in its L3);
#   the lines above say which layers of the zoo's model separate word ends, and in which direction.
# * `bytes-post-lpi` shares one increment across its layers, so all its layers agree; that increment
#   is computed from the byte's embedding alone, so, as for L0 above, whatever it separates comes from
#   the next character's lead byte (which tells apart blocks of characters, some likelier than others
#   to start a word), not from reading the word around the gap.
# * `bytes-repo`: its RoPE layers advance by exactly 1 at every byte, so their AUC is exactly 0.5; its
#   RePo layers stay within a few hundredths of 0.5, some of them just outside the chance band.
#
# Where gold words and jieba's disagree (the example above shows how), the two rows of a model differ
# a little.
#
# ## One paragraph, spaced by the learned positions
#
# The per-layer model's positions on the example paragraph, one row per layer, each row scaled to
# its own range (head 0; every head of an `lpi-resid` layer shares its δ), to compare the gaps
# between the characters with the gold words printed above. As the post found for its own model,
# the structure is hard to see in one sentence: an AUC sums up a tendency over many gaps, and a
# tendency this weak does not group the characters of one paragraph into visible words.

# %%
ids, _ = encode_with_offsets(lenses["bytes-post-lpi-resid"].tokenizer, example.text)
lenses["bytes-post-lpi-resid"].trace(ids).plot(head=0)

# %% [markdown]
# ## Increments by byte category
#
# The post also lists mean learned increments by kind of byte (lowercase letters, spaces,
# punctuation, the lead and continuation bytes of Chinese characters, …): for its shared-increment
# model, and for the first layer (L0) of its per-layer model, which reads only the byte itself. The
# same tables for `bytes-post-lpi` and `bytes-post-lpi-resid`, pooled over held-out English and
# Chinese text, with the post's means beside ours (its categories "word boundary", "line boundary"
# and "punctuation" are our `space`, `newline` and `punctuation`). The last lines order the
# categories from smallest to largest mean δ, ours against the post's.

# %%
BLOG_SHARED_MEANS = {"lowercase": 0.79, "continuation": 0.80, "cjk_lead": 0.92, "space": 1.05,
                     "uppercase": 1.10, "punctuation": 1.18, "newline": 2.12}
BLOG_PER_LAYER_L0_MEANS = {"lowercase": 1.64, "continuation": 1.79, "cjk_lead": 2.43, "uppercase": 9.52,
                           "punctuation": 9.90, "space": 9.99, "newline": 9.99}

splits = repo_lens.data.bilingual_splits()
texts = splits["en"][1][:6] + splits["zh"][1][:6]  # held-out documents, cut to the context


def increments_table(lens, texts):
    """Mean δ per layer and byte category of ``lens`` over ``texts``, pooled."""
    encoded = [lens.encode(text)[: lens.context_length] for text in texts]
    pooled, categories = [], []
    for ids, trace in zip(encoded, lens.trace_batch(encoded, batch_size=12, progress=False)):
        pooled.append(trace_increments(trace).mean(axis=1)[:, 1:])  # the first byte has no gap
        categories.append(byte_categories(ids)[1:])
    return increments_by_category(np.concatenate(pooled, axis=1), np.concatenate(categories))


shared, per_layer = (increments_table(lenses[name], texts) for name in ("bytes-post-lpi", "bytes-post-lpi-resid"))
assert shared.labels == per_layer.labels  # the same bytes: both read 512-byte windows


def post_value(means, label):
    return f"{means[label]:8.2f}" if label in means else " " * 8


print(f"{'':14} {'':>6}   {'bytes-post-lpi':>16}   {'bytes-post-lpi-resid L0':>23}")
print(f"{'category':14} {'bytes':>6}   {'ours':>7} {'post':>8}   {'ours':>14} {'post':>8}")
for index, label in enumerate(shared.labels):
    print(f"{label:14} {int(shared.count[0, index]):6d}   {shared.mean[0, index]:7.3f} "
          f"{post_value(BLOG_SHARED_MEANS, label)}   {per_layer.mean[0, index]:14.3f} "
          f"{post_value(BLOG_PER_LAYER_L0_MEANS, label)}")


def smallest_to_largest(labels, means, post_means):
    return " < ".join(labels[i] for i in np.argsort(means, kind="stable") if labels[i] in post_means)


print("\nfrom smallest to largest mean δ")
print("  bytes-post-lpi, ours:      ", smallest_to_largest(shared.labels, shared.mean[0], BLOG_SHARED_MEANS))
print("  shared model, post:        ", " < ".join(sorted(BLOG_SHARED_MEANS, key=BLOG_SHARED_MEANS.get)))
print("  bytes-post-lpi-resid L0:   ", smallest_to_largest(per_layer.labels, per_layer.mean[0], BLOG_PER_LAYER_L0_MEANS))
print("  per-layer model L0, post:  ", " < ".join(sorted(BLOG_PER_LAYER_L0_MEANS, key=BLOG_PER_LAYER_L0_MEANS.get)))

# %%
repo_lens.plots.category_increments_figure(
    [{label: float(mean) for label, mean in zip(shared.labels, shared.mean[0])}],
    title="bytes-post-lpi: mean learned increment by byte category")

# %% [markdown]
# The per-layer model's L0, like the post's, gives spaces and punctuation larger increments than
# lowercase letters and the bytes of Chinese characters, so English words stand apart in its first
# layer; how much larger, the table shows beside the post's values (its L0 puts every kind of
# boundary near the bound max_delta = 10, after far more training steps than the zoo's models had:
# see the first output). `bytes-post-lpi` computes its one increment from the byte's embedding alone,
# as L0 does; the first two lines of the ordering compare it with the post's shared model.
#
# All six layers of the per-layer model, below: which layers depart from δ = 1, and at which kinds of
# byte. In the held-out Chinese text, `other_lead` bytes are mostly the lead bytes of Chinese
# punctuation (， 。 、 《 》).

# %%
repo_lens.plots.category_increments_figure(
    [{label: float(mean) for label, mean in zip(per_layer.labels, means)} for means in per_layer.mean],
    title="bytes-post-lpi-resid: mean learned increment by byte category, per layer")
