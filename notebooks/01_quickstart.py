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
# # Quickstart: the positions a RePo model learns
#
# RePo ("RePo: Language Models with Context Re-Positioning", arXiv 2512.14391) replaces the integer
# index that RoPE rotates queries and keys by with a real-valued position *z* = *f*(*h*), which every head
# of a RePo layer computes from the token's hidden state. This notebook loads a small byte-level
# RePo model that ships with repo_lens, traces a sentence, looks at the positions its heads assign,
# draws them and exports a figure for a paper.

# %%
import tempfile
from pathlib import Path

import numpy as np

import repo_lens

# figures are interactive here; each also carries a PNG, for viewers that do not run plotly (GitHub, HTML export)
repo_lens.plots.notebook_setup()

# %% [markdown]
# ## The model zoo
#
# repo_lens ships small models trained with different position mechanisms; `zoo:NAME` loads one
# without any download. Each was trained on a task: `bytes` (English and Chinese text, one token per
# byte), `mix` (the same text mixed with needle-in-a-haystack retrieval prompts, in a longer
# context), `reversal` and `flipflop` (synthetic tasks), or comes `pretrained`.

# %%
for entry in repo_lens.zoo.zoo_entries():
    print(f"{entry['name']:16} {entry['mechanism']:10} {entry['task']}")

# %% [markdown]
# ## Load a model and trace a text
#
# In `zoo:bytes-repo`, as in the paper, the lowest third of the layers keeps RoPE and the layers
# above use RePo (the summary below lists them). `repo_lens.load` picks CUDA and bf16 when a GPU is present (`device="auto"`); these
# tiny models run well on the CPU.

# %%
lens = repo_lens.load("zoo:bytes-repo", device="cpu")
t = lens.trace("Positions are learned, not counted. 位置是学出来的，不是数出来的。")
t

# %% [markdown]
# A `Trace` shows a summary of itself: the model, the tokens, layers × heads, and per layer the kind
# of layer and the range of the positions (min and max over all heads, and the range
# d = max z − min z of each head: its smallest, mean and largest value). The byte tokenizer shows a
# space as `␣` and each continuation byte of a multi-byte UTF-8 character as `·`.
#
# The positions themselves are an array `(layers, heads, tokens)`. Here, head 0 of every layer for
# the first tokens: the RoPE layers count 0, 1, 2, …; the RePo layers place each token wherever
# *f*(*h*) says.

# %%
print(t.positions.shape)
print("token " + "".join(f"{f'L{layer} {kind}':>11}" for layer, kind in enumerate(t.layer_kinds)))
for index in range(12):
    print(f"{t.tokens[index]:5} " + "".join(f"{t.positions[layer, 0, index]:11.2f}" for layer in range(t.n_layers)))

# %% [markdown]
# ## Figures
#
# `t.plot()` draws the tokens spaced by their positions, one row per layer (each row scaled to its
# own range); hover over a token to see its position. `t.plot("scatter", layer=...)` plots token
# index against position; `"ranges"` and `"patterns"` are the layer × head views of the next
# notebook.

# %%
t.plot(head=0)

# %%
t.plot("scatter", layer=5, head="all", view="global")

# %% [markdown]
# ## Export a figure
#
# `repo_lens.plots.export` writes PNG, SVG, PDF or HTML, picked from the file name; `layout=` sizes
# the figure for a one- or two-column paper first. It renders with the local Chromium and fetches
# nothing.

# %%
fig = t.plot(head=0, layers=[0, 2, 3, 4, 5])
out_dir = Path(tempfile.mkdtemp(prefix="repo_lens_quickstart_"))
for name in ("spaced_tokens.png", "spaced_tokens.svg", "spaced_tokens.pdf"):
    path = repo_lens.plots.export(fig, out_dir / name, layout="two-column")
    print(f"{path.name:18} {path.stat().st_size:>9,} bytes")

# %% [markdown]
# ## Save and load the trace
#
# A trace is saved as one safetensors file (the arrays, with everything else as JSON in its
# header; never pickle), so it can be shared and opened without the model.

# %%
trace_path = t.save(out_dir / "trace.safetensors")
again = repo_lens.Trace.load(trace_path)
print(again)
print("same positions:", np.array_equal(again.positions, t.positions), "| same tokens:", again.tokens == t.tokens)
