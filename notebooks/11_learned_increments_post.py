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
# # The learned-increments post's figures, on its own model
#
# "Learned position increments" (Brendan Long) trains a small byte-level model on English and
# Chinese text in which every layer moves each byte's position by a learned increment
# δ = max_delta · sigmoid(DeltaMLP(RMSNorm(x))) (max_delta = 10) read from the residual stream, and RoPE
# rotates by the running sum of δ. Its figures: the bytes that get large increments in the first layer,
# each character of two sentences spaced by its increments, Chinese word boundaries found without
# spaces, and multi-word names ("New York") kept close.
#
# `zoo:bytes-post-lpi-resid` is that model (256 wide, 8 heads, 6 layers, 512-byte context, the post's
# per-layer equation), trained here for fewer steps than the post's 50,000 (its card says how many).
# This notebook computes each figure with the toolkit's analysis functions, beside the post's numbers.

# %%
import numpy as np

import repo_lens
from repo_lens.analysis import (
    CARRIER_SENTENCES,
    ENTITY_PAIRS,
    boundary_windows,
    byte_category_table,
    char_increments,
    document_separator,
    entity_grouping_test,
    entity_prompts,
    trace_increments,
    vocabulary_increments,
    window_boundary_auc,
)
from repo_lens.data import bilingual_splits

repo_lens.plots.notebook_setup()

lens = repo_lens.load("zoo:bytes-post-lpi-resid", device="cpu")
separator = document_separator(lens.tokenizer)
print(lens.layer_kinds, "context", lens.context_length)
print({key: round(value, 3) for key, value in lens.meta["info"]["metrics"].items() if "bpb" in key})


def layer_increments(sequences: list[list[int]]) -> list[np.ndarray]:
    """[layer, position] δ of each sequence (the layer's heads share one δ)."""
    return [trace_increments(lens.trace(ids)).mean(axis=1) for ids in sequences]


# %% [markdown]
# ## Which bytes get large increments
#
# The post's table reads δ of every byte as the first byte of a document. At layer 0, δ is a function
# of the byte alone (the residual stream there is the byte's embedding). The post's layer 0 gives
# spaces, punctuation, newlines, capitals and EOS the largest step allowed (9.5-10 of 10), letters 1.6.

# %%
every_byte = np.arange(257)
table = byte_category_table(vocabulary_increments(lens, every_byte, [separator], batch_size=64), every_byte)
POST_L0 = {"English within-word (a-z)": 1.64, "Chinese char interior (cont 0x80-0xBF)": 1.79,
           "Chinese char start (lead 0xE4-0xE9)": 2.43, "Capital letters (A-Z)": 9.52,
           "Sentence punct (. ! ?)": 9.90, "Other punct (, ; : -)": 9.90, "EOS": 9.82, "Space": 9.99,
           "Newline": 9.99}
print(f"{'category':42s} {'ours L0':>8s} {'post L0':>8s}")
for category, row in table.rows(0).items():
    print(f"{category:42s} {row['mean']:8.2f} {POST_L0.get(category, float('nan')):8.2f}")
repo_lens.plots.category_increments_figure(
    [{category: row["mean"] for category, row in table.rows(layer).items()} for layer in range(lens.n_layers)],
    title="bytes-post-lpi-resid: mean δ by byte category, per layer")

# %% [markdown]
# ## The post's two sentences, spaced by their increments
#
# Each character's increment is the sum of its bytes' δ (a Chinese character is three bytes). Each
# layer's row is scaled on its own, as the post draws it; the second figure puts every layer on one
# scale.

# %%
SENTENCES = ["Marie Curie, a Polish-born physicist, won two Nobel Prizes.", "人工智能是计算机科学的一个分支。"]
for text in SENTENCES:
    [deltas] = layer_increments([[separator, *text.encode("utf-8")]])
    for scale in ("per-row", "shared"):
        repo_lens.plots.char_spacing_figure(
            text, char_increments(deltas[:, 1:], text, scale=scale), lens.layer_kinds,
            title=f"learned position increments ({scale} scale)").show()

# %% [markdown]
# ## Chinese word boundaries without spaces
#
# Gaps between two Chinese characters of held-out People's Daily text, each scored by δ at the next
# character's lead byte and labelled by jieba's segmentation: ROC-AUC per layer (0.5 = chance). The post
# reports 0.50 0.54 0.68 0.37 0.63 0.47 and its author's rerun 0.516 0.528 0.634 0.414 0.722 0.411:
# layers 2 and 4 above chance, layer 3 below, in both.

# %%
held_out = bilingual_splits()
windows = boundary_windows(held_out["zh"][1], max_bytes=lens.context_length, max_gaps=10_000)
auc = window_boundary_auc(layer_increments([window.byte_ids.tolist() for window in windows]), windows)
print(f"{auc.n_gaps:,} gaps, boundary rate {auc.boundary_rate:.3f}")
print("AUC by layer:", " ".join(f"{value:.3f}" for value in auc.auc))
repo_lens.plots.layer_series_figure(
    {"ours (jieba)": auc.auc.tolist(), "the post": [0.50, 0.54, 0.68, 0.37, 0.63, 0.47],
     "the post's rerun": [0.516, 0.528, 0.634, 0.414, 0.722, 0.411]},
    "ROC-AUC", "Chinese word-boundary AUC by layer", reference=0.5)

# %% [markdown]
# ## "New York" against "York New"
#
# δ at the space between the two words of 79 multi-word names, each in 5 carrier sentences, in the
# real and the reversed order; per layer, a paired two-sided Wilcoxon test over the names (carriers
# averaged). The post: the real order's space is smaller in layers 2-5 (p between 3e-8 and 6e-5).

# %%
at_space = []
for prompts in entity_prompts(ENTITY_PAIRS, CARRIER_SENTENCES):
    deltas = layer_increments([[separator, *prompt.text.encode("utf-8")] for prompt in prompts])
    values = np.stack([d[:, 1 + prompt.space_byte] for d, prompt in zip(deltas, prompts)])
    at_space.append(values.reshape(len(ENTITY_PAIRS), len(CARRIER_SENTENCES), lens.n_layers))
test = entity_grouping_test(at_space[0], at_space[1], carrier_axis=1)
print(f"{'layer':>5s} {'δ real':>8s} {'δ reversed':>10s} {'real smaller':>12s} {'p':>8s}")
for layer in range(lens.n_layers):
    print(f"{layer:5d} {test.mean_real[layer]:8.3f} {test.mean_reversed[layer]:10.3f} "
          f"{test.share_smaller[layer]:12.2f} {test.p_value[layer]:8.2g}")

# %% [markdown]
# ## Where this model stands
#
# The tables above are one training step's. How each finding develops along training, from the run's
# snapshots, is what `post_findings_by_step` in `repo_lens.studies.reproductions.post_by_step` computes
# on a run of your own (`repo-lens train --preset bytes-post --out runs/NAME` keeps a snapshot every 250
# steps); the project's results page has that table for this model.
