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
# # Needle in a haystack: where the answer's attention goes
#
# The RePo paper ("RePo: Language Models with Context Re-Positioning", arXiv 2512.14391, §5.1,
# Table 4) asks whether re-positioning helps a model attend to distant relevant information. On
# RULER needle-in-a-haystack (NIAH) prompts it measures how much attention the answer tokens put on
# the needle, on the query and on the rest of the context, per token of each span ("attention mass
# per token", averaged over answer tokens, heads and layers), and finds RePo puts more mass on the
# needle than RoPE and NoPE.
#
# The question only makes sense on models that retrieve. The zoo's `bytes1k-*` models were trained
# on text mixed with retrieval prompts at a 1,024-byte context; this notebook first checks which of
# them find the needle, then measures the attention mass on prompts within their context.

# %%
import dataclasses

import numpy as np
import torch

import repo_lens
from repo_lens.analysis import attention_mass_batch
from repo_lens.data import niah_single

repo_lens.plots.notebook_setup()

# %% [markdown]
# ## One prompt
#
# `niah_single` writes RULER's single-needle prompt at a given length (in tokens of the tokenizer
# passed in: bytes here) with the needle at a given depth of the haystack, and appends the answer.
# The prompt's named spans say where each part is; `value` is the needle's 7-digit number and the
# query rows are the answer tokens.

# %%
MODELS = ["bytes1k-rope", "bytes1k-repo", "bytes1k-nope", "bytes1k-lpi"]
lenses = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in MODELS}
context = lenses["bytes1k-repo"].context_length
tokenizer = lenses["bytes1k-repo"].tokenizer
print("context:", context, "bytes")

prompt = niah_single(tokenizer, context, depth=0.5, seed=0)
print(len(prompt.ids), "tokens | answer:", prompt.answer, "| query rows:", prompt.query)
for span in ("instruction", "context", "needle", "value", "question", "answer_prefix", "answer"):
    print(f"{span:14} {prompt.spans[span]!s:12} {prompt.span_text(span)[:60]!r}")

# %% [markdown]
# ## Which models retrieve?
#
# 16 prompts per model (needle depths spread from the start to the end of the haystack, two seeds
# each). A prompt counts as solved when every answer byte is the model's most likely next byte
# given the correct prefix, which is exactly when greedy decoding writes the answer.

# %%
prompts = [niah_single(tokenizer, context, depth=depth, seed=seed)
           for depth in np.linspace(0, 1, 8) for seed in (0, 1)]


@torch.inference_mode()
def solved(lens, prompt):
    ids = torch.tensor(np.array([prompt.ids]))
    start, end = prompt.query
    predicted = lens.model(ids)[0].argmax(-1)
    return bool((predicted[start - 1:end - 1] == ids[0, start:end]).all())


accuracy = {name: float(np.mean([solved(lens, p) for p in prompts])) for name, lens in lenses.items()}
for name, value in accuracy.items():
    print(f"{name:14} NIAH accuracy {value:.2f}  (layers: {lenses[name].layer_kinds})")

# %% [markdown]
# ## Attention mass per token (Table 4)
#
# `attention_mass_batch` measures every prompt (needle = the value's tokens, query = the question
# and the answer prefix, rows = the answer tokens); only the answer rows of the attention pattern
# are ever computed. The table averages over the 16 prompts and prints the paper's values beside
# ours, both ×10⁻² as the paper prints them. The paper's models are OLMo-2 1B at 4K tokens, ours
# 4-layer byte models at 1,024 bytes, so compare the pattern (needle against rest, model against
# model), not the magnitudes.

# %%
PAPER_TABLE4 = {"paper: RoPE": {"needle": 1.754, "query": 1.123, "rest": 0.014},
                "paper: NoPE": {"needle": 1.572, "query": 1.135, "rest": 0.014},
                "paper: RePo": {"needle": 2.013, "query": 1.046, "rest": 0.015}}


def mean_mass(masses):
    """The AttentionMass of many prompts averaged (per-token masses, and per layer and head)."""
    return dataclasses.replace(
        masses[0],
        per_token={span: float(np.mean([m.per_token[span] for m in masses])) for span in masses[0].per_token},
        by_layer_head={span: np.mean([m.by_layer_head[span] for m in masses], axis=0)
                       for span in masses[0].by_layer_head})


masses = {}
for name, lens in lenses.items():
    measured = attention_mass_batch(
        lens, [(p.ids, {"needle": p.spans["value"], "query": p.spans["query"]}, p.query) for p in prompts])
    masses[name] = mean_mass(measured)

print(f"{'model':14} {'accuracy':>8} {'needle':>8} {'query':>8} {'rest':>8} {'needle/rest':>12}")
rows = {name: (accuracy[name], mass.per_token) for name, mass in masses.items()}
rows.update({name: (None, {span: value / 100 for span, value in table.items()}) for name, table in PAPER_TABLE4.items()})
for name, (acc, mass) in rows.items():
    acc_text = "" if acc is None else f"{acc:.2f}"
    print(f"{name:14} {acc_text:>8} " + " ".join(f"{100 * mass[span]:8.3f}" for span in ("needle", "query", "rest"))
          + f" {mass['needle'] / mass['rest']:12.1f}")

ours = masses["bytes1k-repo"].per_token["needle"] / masses["bytes1k-rope"].per_token["needle"]
paper = PAPER_TABLE4["paper: RePo"]["needle"] / PAPER_TABLE4["paper: RoPE"]["needle"]
print(f"\nneedle mass, RePo / RoPE: {ours:.2f} on the two zoo models that retrieve, {paper:.2f} in the paper")

# %% [markdown]
# The last line answers Table 4's question for the two models that solve the task (accuracy column):
# a ratio above 1 means the RePo model puts more attention per token on the needle than the RoPE
# model, as the paper found. The two models that do not retrieve are a warning against reading too
# much into the measure: compare their needle mass with that of the models that do.

# %%
repo_lens.plots.attention_mass_figure(masses, log_y=True)

# %% [markdown]
# ## Layer by layer
#
# Both retrieving models have RoPE in their lower layers; in `bytes1k-repo` the upper layers are
# RePo. The mass per layer (mean over heads) shows where the answer rows look at the needle.

# %%
retrievers = {name: masses[name] for name in ("bytes1k-rope", "bytes1k-repo")}
for name, mass in retrievers.items():
    needle = mass.by_layer_head["needle"].mean(axis=1)
    peak = int(np.argmax(needle))
    print(f"{name}: needle mass per layer {np.round(100 * needle, 3)} ×10⁻², highest in layer {peak} "
          f"({lenses[name].layer_kinds[peak]})")
repo_lens.plots.attention_mass_layers_figure(retrievers)

# %% [markdown]
# ## Where RePo puts the needle
#
# The positions `bytes1k-repo` assigns on the prompt above, in its first RePo layer, with the
# needle's value and the query marked: how far apart, in learned positions, are the needle and the
# question that asks for it, hundreds of tokens apart? Notebook 05 replaces these positions and
# watches retrieval fail.

# %%
repo = lenses["bytes1k-repo"]
trace = repo.trace(prompt.ids)
first_repo_layer = trace.layer_kinds.index("repo")
value, query = prompt.spans["value"], prompt.spans["query"]
for head in range(trace.n_heads):
    z = trace.positions[first_repo_layer, head]
    print(f"L{first_repo_layer} h{head}: needle value at z ≈ {z[value[0]:value[1]].mean():7.2f}, "
          f"query at z ≈ {z[query[0]:query[1]].mean():7.2f}, all tokens from {z.min():7.2f} to {z.max():7.2f}")

# %%
trace.plot("scatter", layer=first_repo_layer, head="all", view="global",
           highlight={"needle value": value, "query": query})
