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
# # Intervening on learned positions
#
# The other notebooks describe the positions a model assigns. Whether the model *uses* them is a
# causal question: replace them and see what breaks. Every attention layer publishes the positions
# it rotates queries and keys by at the hook point `blocks.{layer}.attn.hook_pos`, shaped
# `[batch, head, pos]`; a forward hook that returns a new tensor replaces them for the rest of the
# forward pass (TransformerLens' `run_with_hooks`).
#
# Three replacements, on the RePo layers only:
#
# * **linear**: 0, 1, 2, …: the positions RoPE would use;
# * **constant**: 0 for every token, as NoPE;
# * **shuffled**: each head's own learned positions, permuted over the tokens.
#
# and three tasks: next-byte prediction on held-out text, needle-in-a-haystack retrieval, and
# text reversal, the toy task of the RePo paper ("RePo: Language Models with Context
# Re-Positioning", arXiv 2512.14391, App. C). The hooks are written out here to show the
# mechanism; the last section does the same with `repo_lens.interventions`, which packages it.

# %%
import math

import numpy as np
import plotly.graph_objects as go
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.data import niah_single, reversal_prompt

repo_lens.plots.notebook_setup()

# %% [markdown]
# ## The interventions as hook functions
#
# Each builds a hook `fn(positions, hook)` that rewrites the positions of the given heads (all by
# default) and keeps the others.

# %%
def linear(heads=slice(None)):
    def fn(positions, hook):
        out = positions.clone()
        out[:, heads] = torch.arange(out.shape[-1], dtype=out.dtype, device=out.device)
        return out
    return fn


def constant(heads=slice(None)):
    def fn(positions, hook):
        out = positions.clone()
        out[:, heads] = 0.0
        return out
    return fn


def shuffled(heads=slice(None), seed=0):
    def fn(positions, hook):
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(positions.shape[-1], generator=generator).to(positions.device)
        out = positions.clone()
        out[:, heads] = positions[:, heads][..., order]
        return out
    return fn


def hooks(make, layers, **options):
    """(hook name, function) pairs for run_with_hooks: ``make(**options)`` in each of ``layers``."""
    return [(f"blocks.{layer}.attn.hook_pos", make(**options)) for layer in layers]


INTERVENTIONS = {"linear": linear, "constant": constant, "shuffled": shuffled}

# %% [markdown]
# ## 1. Next-byte prediction
#
# `zoo:bytes-repo` (RoPE in its lowest layers, RePo above) on the first held-out English and Chinese
# document, cut to its context: the loss in bits per byte with its learned positions, and the change
# when the RePo layers' positions are replaced. A control replaces the positions of the RoPE layers
# by a constant, to show what losing order information costs this model.

# %%
lens = repo_lens.load("zoo:bytes-repo", device="cpu")
repo_layers = [layer for layer, kind in enumerate(lens.layer_kinds) if kind == "repo"]
rope_layers = [layer for layer, kind in enumerate(lens.layer_kinds) if kind == "rope"]
print(lens.layer_kinds, "| RePo layers", repo_layers)

splits = repo_lens.data.bilingual_splits()
ids = {lang: torch.tensor([lens.encode(splits[lang][1][0])[: lens.context_length]]) for lang in ("en", "zh")}


@torch.inference_mode()
def bits_per_byte(model, x, fwd_hooks=()):
    logits = model.run_with_hooks(x, fwd_hooks=list(fwd_hooks))
    return torch.nn.functional.cross_entropy(logits[0, :-1].float(), x[0, 1:]).item() / math.log(2)


baseline = {lang: bits_per_byte(lens.model, x) for lang, x in ids.items()}
settings = {f"{name}, RePo layers": hooks(make, repo_layers) for name, make in INTERVENTIONS.items()}
settings["control: constant, RoPE layers"] = hooks(constant, rope_layers)
changes = {label: {lang: bits_per_byte(lens.model, x, fwd) - baseline[lang] for lang, x in ids.items()}
           for label, fwd in settings.items()}

print(f"{'positions':32} {'en':>8} {'zh':>8}")
print(f"{'learned (bits per byte)':32} {baseline['en']:8.3f} {baseline['zh']:8.3f}")
for label, change in changes.items():
    print(f"{label:32} {change['en']:+8.3f} {change['zh']:+8.3f}")

# %%
fig = go.Figure()
for index, lang in enumerate(ids):
    fig.add_bar(name=lang, x=list(changes), y=[change[lang] for change in changes.values()],
                marker_color=repo_lens.plots.OKABE_ITO[index])
fig.update_layout(barmode="group", title="bytes-repo: loss change when positions are replaced",
                  yaxis_title="Δ bits per byte (replaced − learned)")

# %% [markdown]
# Compare the RePo rows with the control in the output above: the size of each change says how much
# this model's next-byte predictions depend on the positions of those layers.
#
# ## 2. Retrieval
#
# `zoo:bytes1k-repo` finds the needle in RULER prompts that fill its context (notebook 03). Does it
# need its learned positions to do so? NIAH accuracy (all answer bytes the model's most likely next
# bytes) on 8 prompts, the needle at depths from the start to the end of the haystack: with each
# RePo layer's positions replaced, then with every RePo head's positions made linear, one at a time.

# %%
retriever = repo_lens.load("zoo:bytes1k-repo", device="cpu")
repo_layers_1k = [layer for layer, kind in enumerate(retriever.layer_kinds) if kind == "repo"]
prompts = [niah_single(retriever.tokenizer, retriever.context_length, depth=depth) for depth in np.linspace(0, 1, 8)]


@torch.inference_mode()
def niah_accuracy(model, fwd_hooks=()):
    solved = []
    for length in sorted({len(prompt.ids) for prompt in prompts}):  # prompts of one length share a forward pass
        group = [prompt for prompt in prompts if len(prompt.ids) == length]
        x = torch.tensor(np.array([prompt.ids for prompt in group]))
        predicted = model.run_with_hooks(x, fwd_hooks=list(fwd_hooks)).argmax(-1)
        for row, prompt in enumerate(group):
            start, end = prompt.query
            solved.append(bool((predicted[row, start - 1:end - 1] == x[row, start:end]).all()))
    return float(np.mean(solved))


print(retriever.layer_kinds, "| learned positions: accuracy", niah_accuracy(retriever.model))
for layer in repo_layers_1k:
    print(f"L{layer} replaced: " + ", ".join(
        f"{name} {niah_accuracy(retriever.model, hooks(make, [layer])):.2f}" for name, make in INTERVENTIONS.items()))

# %%
grid = np.full((retriever.n_layers, retriever.n_heads), np.nan)  # RoPE layers: already linear, left empty
for layer in repo_layers_1k:
    for head in range(retriever.n_heads):
        grid[layer, head] = niah_accuracy(retriever.model, hooks(linear, [layer], heads=[head]))
repo_lens.plots.layer_head_heatmap(grid, title="bytes1k-repo: NIAH accuracy with one head's positions made linear",
                                   colorbar_title="accuracy", layer_kinds=retriever.layer_kinds, zmin=0.0, zmax=1.0)

# %% [markdown]
# The accuracies above locate what retrieval needs: a layer or head whose replacement takes accuracy
# down is one whose learned positions the retrieval circuit reads.
#
# ## 3. Text reversal
#
# `zoo:reversal-repo` reverses lists of made-up words,
# `<bos> Reverse the following words : x1 … xL <sep> xL … x1`, and was trained on lists of 2 to 20
# words; the RePo paper (App. C) finds RePo generalises to longer lists where RoPE and NoPE fail.
# `reversal_prompt` writes such a prompt with its answer; exact-match accuracy over 50 prompts per
# length, for the three zoo reversal models and for `reversal-repo` with its positions replaced.

# %%
reversal = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in ("reversal-repo", "reversal-rope", "reversal-nope")}
example = reversal_prompt(reversal["reversal-repo"].tokenizer, 5, seed=0)
print(example.text, "| spans", example.spans)
LENGTHS = [10, 20, 25, 30]


@torch.inference_mode()
def reversal_accuracy(lens, n_words, fwd_hooks=()):
    batch = [reversal_prompt(lens.tokenizer, n_words, seed=seed) for seed in range(50)]
    x = torch.tensor(np.array([prompt.ids for prompt in batch]))  # one token per word: equal lengths
    start = batch[0].spans["output"][0]
    predicted = lens.model.run_with_hooks(x, fwd_hooks=list(fwd_hooks)).argmax(-1)
    return (predicted[:, start - 1:-1] == x[:, start:]).all(dim=1).float().mean().item()


rows = {name: [reversal_accuracy(model, n) for n in LENGTHS] for name, model in reversal.items()}
repo = reversal["reversal-repo"]
every_layer = list(range(repo.n_layers))
print("reversal-repo layers:", repo.layer_kinds)
for name, make in INTERVENTIONS.items():
    rows[f"reversal-repo, {name}"] = [reversal_accuracy(repo, n, hooks(make, every_layer)) for n in LENGTHS]
for layer in every_layer:
    rows[f"reversal-repo, linear L{layer}"] = [reversal_accuracy(repo, n, hooks(linear, [layer])) for n in LENGTHS]

print(f"{'model, positions':30}" + "".join(f"{f'L={n}':>8}" for n in LENGTHS))
for label, accuracies in rows.items():
    print(f"{label:30}" + "".join(f"{value:8.2f}" for value in accuracies))

# %% [markdown]
# The first three rows compare the mechanisms on lengths within and beyond training; the rows
# below them show what `reversal-repo` keeps when its learned positions are replaced, in every
# layer or in one.

# %% [markdown]
# ## 4. The same with `repo_lens.interventions`
#
# `interventions.ablate` applies such replacements by name: `"integer"` (RoPE's positions),
# `"constant"`, `"shuffle"`, `"mean"`, or `("interpolate", p)`, which moves the learned positions a
# fraction p of the way toward the integers. What "integer" and
# "constant" mean for each mechanism comes from the model's registry, so the call is the same for
# RePo, learned increments or CoPE. With a metric it returns one value per prompt: here NIAH exact
# match on the retrieval prompts of section 2, with each RePo layer made integer, then for a sweep of p.

# %%
exact_match = interventions.niah_exact_match(prompts)
for layer in repo_layers_1k:
    accuracy = interventions.ablate(retriever, prompts, mode="integer", layers=[layer], metric=exact_match)
    print(f"L{layer} integer: NIAH accuracy {accuracy.mean():.2f}")

first = repo_layers_1k[0]
for p in (0.0, 0.02, 0.05, 0.25, 1.0):
    accuracy = interventions.ablate(retriever, prompts, mode=("interpolate", p), layers=[first], metric=exact_match)
    print(f"L{first}, positions moved {p:4.0%} of the way to the integers: NIAH accuracy {accuracy.mean():.2f}")

# %% [markdown]
# The per-layer lines agree with the linear rows of section 2. The sweep
# shows how far the learned positions of that layer can move toward RoPE's before retrieval fails:
# they span a range of a few units (notebook 03 prints it for this model and its prompts), while the
# integers run to the prompt's length, so even a small step toward them moves the positions far.

