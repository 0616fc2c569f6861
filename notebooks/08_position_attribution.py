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
# # Why a token gets its position
#
# A learned position z = f(h) is computed from the residual stream at its layer, and that stream is a sum
# of parts: the embedding, every earlier attention output and MLP output, and within each attention output
# every head. `repo_lens.analysis.position_attribution` says how far each part moves each head's position
# of each token: it removes the part from the position module's input only and re-runs the module (a
# path ablation; the attention and every other layer keep the unedited stream). `method="gradient"` is
# the linearised version, with its completeness error. `token_attribution` says which earlier tokens move
# one position.
#
# The model is `zoo:bytes1k-repo`: a 4-layer byte model with RoPE in layers 0 and 1 and RePo ("RePo:
# Language Models with Context Re-Positioning", arXiv 2512.14391) in layers 2 and 3, which retrieves a
# needle from 1,000 bytes of text. We ask what writes the needle's positions.

# %%
import numpy as np
import torch

import repo_lens
from repo_lens.analysis import position_attribution, token_attribution
from repo_lens.data import niah_single
from repo_lens.plots import attribution_map_figure, notebook_setup, position_attribution_bars, token_attribution_strip

notebook_setup()
lens = repo_lens.load("zoo:bytes1k-repo", device="cpu", dtype="float32")
prompt = niah_single(lens.tokenizer, length=1000, depth=0.5, seed=1)
start, end = prompt.spans["value"]
ids = list(prompt.ids)
print(len(ids), "bytes; the needle's value is bytes", start, "to", end - 1, repr(prompt.answer))

# %% [markdown]
# ## What writes layer 3's position of the needle
#
# Every head of layer 3 at the needle value's first byte. The components are named as in TransformerLens:
# `embed`, `{l}_attn_out`, `{l}_mlp_out`, and `L{l}H{h}` for one head of an earlier layer.

# %%
found = position_attribution(lens, ids, layer=3, tokens=[start])
print("components:", len(found.labels), found.labels[:7], "...")
print("head 3, top five:", [(name, round(value, 3)) for name, value in found.top(head=3, token=start, k=5)])
position_attribution_bars(found, head=3, token=start)

# %% [markdown]
# The linearised attribution ranks the components alike, but does not add up: f is an MLP, so the sum of
# the blocks' attributions misses what removing all of them does (the completeness error).

# %%
linear = position_attribution(lens, ids, layer=3, tokens=[start], method="gradient")
exact_row, linear_row = found.values[3, 0], linear.values[3, 0]
ranks = [np.argsort(np.argsort(row)) for row in (exact_row, linear_row)]
print("gradient, top five:", [(name, round(value, 3)) for name, value in linear.top(head=3, token=start, k=5)])
print("Spearman correlation of the two methods:", round(float(np.corrcoef(*ranks)[0, 1]), 3))
print("completeness error:", round(float(linear.completeness_error[3, 0]), 3))

# %% [markdown]
# The whole layer at once: components down, the layer's heads across.

# %%
attribution_map_figure(found, token=start)

# %% [markdown]
# ## Which earlier bytes move it
#
# The gradient of head 3's position of the needle's first byte with respect to each earlier byte's
# embedding, times that embedding: the bytes of the needle's own sentence stand out.

# %%
strip = token_attribution(lens, ids, layer=3, head=3, token=start)
tokens = lens.trace(ids, progress=False).tokens
order = np.argsort(-np.abs(strip.values))[:5]
print("the five bytes that move it most:", [(int(i), tokens[i], round(float(strip.values[i]), 3)) for i in order])
token_attribution_strip(strip, tokens, window=40)

# %% [markdown]
# ## A causal check
#
# The top upstream head is zeroed in the full forward (its `hook_z`), and the needle's position in layer
# 3 head 3 is read again, beside what the path ablation predicts (z without the head − z). The two differ
# by what the head also changes on the way, in the layers between it and layer 3.

# %%
top = next(name for name, _ in found.top(head=3, token=start, k=len(found.labels)) if name.startswith("L"))
layer, head = (int(part) for part in top[1:].split("H"))
seen = {}


def zero_head(z, hook):
    z = z.clone()
    z[:, :, head] = 0
    return z


def keep(positions, hook):
    seen["z"] = positions[0, 3, start].item()


with torch.no_grad():
    lens.model.run_with_hooks(torch.tensor([ids]), fwd_hooks=[("blocks.3.attn.hook_pos", keep)])
    before = seen["z"]
    lens.model.run_with_hooks(torch.tensor([ids]), fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero_head),
                                                            ("blocks.3.attn.hook_pos", keep)])
print(f"zeroing {top}: the needle's position moves by {seen['z'] - before:+.3f} in the full forward;",
      f"the path ablation predicts {-found.values[3, 0, found.labels.index(top)]:+.3f}")
