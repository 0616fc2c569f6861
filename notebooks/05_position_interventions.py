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
# causal question: change them and measure what breaks. `repo_lens.interventions` does this for
# every learned mechanism through one code path:
#
# * `ablate(lens, inputs, mode=…, layers=…, heads=…, metric=…)` replaces the positions of some
#   layers and heads in one forward pass. Modes (from `repo_lens.interventions`; a mode without
#   settings can also be given by its name, e.g. `"integer"`): `Integer()` (RoPE's positions 0, 1,
#   2, …), `Constant()` (no positional signal, as NoPE), `Mean(reference=…)` (each token index's mean
#   over a reference set), `Shuffle()` (the tokens' positions permuted), and `Interpolate(p=…)`,
#   which moves the learned positions a fraction p of the way to the integers, z' = (1 − p)·z + p·t,
#   as the RePo authors' training code does with its `dynamic_pe_pdrop` option ("RePo: Language
#   Models with Context Re-Positioning", arXiv 2512.14391). Three edits stay on the positions' own
#   scale: `Affine()` (each head's least-squares line through its own positions), `Rank()` (order
#   kept, spacing made even over the head's range) and `Scaled()` (the integers rescaled to the head's
#   range); `Random()` (a random direction as long as the affine edit) and `Window(width=w)`
#   (positions permuted within blocks of w tokens) are controls that can fail.
# * `ablation_grid(lens, prompt, metric, mode=…)` ablates one layer, head or token at a time, every
#   cell batched.
# * `patch(lens, clean, corrupted, metric)` writes a clean prompt's positions into a corrupted run,
#   one cell at a time, and `attribute(...)` estimates the same grid from one forward and one
#   backward pass. Each of them can edit or patch only some tokens (`tokens=` of `ablate`, or
#   `options=GridOptions(tokens=…)` of the grids: a slice, token indices, or a span of a built prompt
#   such as `"needle"` or `"rest"`).
#
# What "integer" and "constant" mean for a mechanism (RePo's z, CoPE's gates, learned increments,
# FoX's forget gates) comes from the model's registry, so the calls are the same for all of them.
# A metric maps logits `[batch, pos, vocab]` to one number per prompt; the built-in ones score a
# prompt's answer span: `answer_logprob`, `niah_exact_match`, `span_loss`, `logit_difference`.

# %%
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import repo_lens
from repo_lens import interventions
from repo_lens.data import PromptEncoding, bilingual_splits, niah_prompt, niah_single, reversal_prompt
from repo_lens.interventions import GridOptions, Interpolate, Mean, stats

repo_lens.plots.notebook_setup()

# %% [markdown]
# ## 1. Retrieval: which layers does it need?
#
# `zoo:bytes1k-repo` (RoPE in its two lowest layers, RePo above) finds the needle in RULER prompts
# that fill its 1,024-byte context (notebook 03). Sixteen prompts, the needle at depths from the
# start to the end of the haystack, scored by exact match (every answer byte is the model's most
# likely next byte) and by the answer's log-probability (nats, summed over its bytes). Each mode is
# applied to every RePo layer at once (`layers=None`: every learned layer), then to one layer.

# %%
lens = repo_lens.load("zoo:bytes1k-repo", device="cpu")
learned = [site.layer for site in interventions.select_sites(lens.model, None)]
prompts = [niah_single(lens.tokenizer, lens.context_length, depth=depth) for depth in np.linspace(0, 1, 16)]
exact_match, answer_logprob = interventions.niah_exact_match(prompts), interventions.answer_logprob(prompts)
print(lens.layer_kinds, "| learned layers", learned)


UNCHANGED = Interpolate(p=0.0)  # p = 0: the positions as the model learned them


def scores(mode, layers=None, heads=None):
    """(accuracy, mean answer log p, Wilson interval of the accuracy) with ``layers`` × ``heads`` edited."""
    mode = Mean(reference=prompts) if mode == "mean" else mode
    logits = interventions.ablate(lens, prompts, mode=mode, layers=layers, heads=heads)
    hits = exact_match(logits).numpy()
    return hits.mean(), answer_logprob(logits).mean().item(), stats.interval_text(stats.accuracy(hits))


MODES = ["integer", "constant", "mean", "shuffle", "affine", "rank", "scaled", "random"]
rows = {"unchanged": scores(UNCHANGED)}
rows.update({f"{mode}, every RePo layer": scores(mode) for mode in MODES})
rows.update({f"{mode}, layer {layer}": scores(mode, layers=[layer]) for layer in learned for mode in MODES})
print(f"{'positions':28} {'accuracy [95 % Wilson]':>24} {'log p':>8}")
for label, (accuracy, logprob, interval) in rows.items():
    print(f"{label:28} {interval:>24} {logprob:8.2f}")

# %%
fig = go.Figure()
for index, layers in enumerate(["every RePo layer", *[f"layer {layer}" for layer in learned]]):
    fig.add_bar(name=layers, x=MODES, y=[rows[f"{mode}, {layers}"][0] for mode in MODES],
                marker_color=repo_lens.plots.OKABE_ITO[index])
fig.add_hline(y=rows["unchanged"][0], line_dash="dot", annotation_text="unchanged")
fig.update_layout(barmode="group", title="bytes1k-repo: NIAH accuracy with learned positions replaced",
                  xaxis_title="replacement", yaxis_title="exact match", yaxis_range=[0, 1.05])

# %% [markdown]
# The rows above say which layer's positions retrieval reads: the off-scale replacements in the lower
# RePo layer break it, while the upper one can take any of them and still retrieve. Sixteen prompts
# give wide intervals (0/16 is 0.00–0.19): read differences of a few prompts as noise. Compare
# "integer" with "scaled" (the same layout at the head's own scale) and "affine" with "random" (an
# edit of the same size): a drop under "integer" alone is a change of scale, not a lack of anything
# RoPE-like.
#
# ## 2. Which heads?
#
# `ablation_grid` ablates one head at a time. It runs the prompt once, then all cells batched, each
# starting from the cached residual stream at its layer (the layers below it do not change). Its
# `values` hold the metric per cell (NaN for the RoPE layers, which have no learned positions);
# `GridOptions(also=…)` measures further metrics on the same runs. The maps average the sixteen prompts.

# %%
def head_maps(mode):
    """Mean exact match and answer log p over the prompts, one head's positions replaced at a time."""
    grids = [interventions.ablation_grid(lens, prompt, interventions.answer_logprob(prompt), mode=mode,
                                         options=GridOptions(also={"exact": interventions.niah_exact_match(prompt)},
                                                             progress=False))
             for prompt in prompts]
    return np.mean([grid.also["exact"] for grid in grids], axis=0), np.mean([grid.values for grid in grids], axis=0)


maps = {mode: head_maps(mode) for mode in ("integer", "constant", "affine", "scaled")}
for mode, (accuracy, logprob) in maps.items():
    for layer in learned:
        print(f"{mode:8} L{layer}: accuracy " + " ".join(f"h{h} {accuracy[layer, h]:.2f}" for h in range(lens.n_heads))
              + " | log p " + " ".join(f"{logprob[layer, h]:.2f}" for h in range(lens.n_heads)))

# %%
repo_lens.plots.layer_head_heatmap(maps["integer"][0], title="bytes1k-repo: NIAH accuracy, one head's positions made integer",
                                   colorbar_title="accuracy", layer_kinds=lens.layer_kinds,
                                   colors=repo_lens.plots.HeatmapColors(zmin=0.0, zmax=1.0))

# %% [markdown]
# Within the lower RePo layer, heads 0 and 3 carry retrieval, head 1 a little, head 2 not at all.
# "Integer" hurts head 3 more than "constant", but the on-scale maps qualify that: given its own
# straight line or the integers at its own scale, head 3 retrieves about as often as with a constant,
# so what "integer" breaks is mostly the scale (the integers span about a thousand units, these heads
# a few dozen), not a missing RoPE-like layout. `repo-lens reproduce position_interventions` measures this
# on 200 prompts of four families with intervals and paired tests.
#
# ## 3. The authors' interpolation
#
# `Interpolate(p=p)` moves every RePo layer's positions a fraction p toward the integers in the
# same forward pass, so later layers see the earlier layers' change, as the authors' forward does;
# `Interpolate(p=p, toward="constant")` moves them toward a constant instead, which shrinks them and
# keeps their order.

# %%
SWEEP = [0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
sweep = {toward: [scores(Interpolate(p=p, toward=toward))[0] for p in SWEEP] for toward in ("integer", "constant")}
print("p          " + "".join(f"{p:>7}" for p in SWEEP))
for toward, accuracies in sweep.items():
    print(f"{toward:10} " + "".join(f"{accuracy:7.2f}" for accuracy in accuracies))

fig = go.Figure()
for index, (toward, accuracies) in enumerate(sweep.items()):
    fig.add_scatter(x=SWEEP, y=accuracies, mode="lines+markers", name=f"toward {toward}",
                    line_color=repo_lens.plots.OKABE_ITO[index])
fig.update_layout(title="bytes1k-repo: NIAH accuracy vs interpolation p", xaxis_title="p", xaxis_type="log",
                  yaxis_title="exact match", yaxis_range=[0, 1.05])

# %% [markdown]
# The learned positions of a RePo head span a few to a few dozen units over the prompt (notebook 03
# prints the ranges), while the integers run to the prompt's length, so a small step toward the
# integers moves them far (p = 0.05 adds tens of units between needle and question, more than the
# whole learned span); a step toward a constant only shrinks them. The sweep therefore measures the
# scale gap as much as anything about the learned layout.
#
# ## 4. Patching: which heads carry where the needle is?
#
# A clean prompt and a corrupted one with the same key and value, the needle moved from a quarter to
# three quarters of the way through the haystack (equal lengths, so tokens align one to one).
# `patch` writes the clean run's positions of one head into the corrupted run and measures the
# answer's log-probability; `effects` is the change from the corrupted run. `attribute` estimates
# the same map from one forward and one backward pass (∂metric/∂z · (z_clean − z_corrupted)).

# %%
def needle_moved(seed):
    for candidate in range(seed, seed + 50):
        clean, moved = (niah_prompt(lens.tokenizer, lens.context_length, depth=depth, seed=candidate,
                                    encoding=PromptEncoding(add_special_tokens=False)) for depth in (0.25, 0.75))
        if len(clean) == len(moved):
            return clean, moved


pairs = [needle_moved(100 * seed) for seed in range(4)]
exact, estimate = [], []
for clean, moved in pairs:
    metric = interventions.answer_logprob(moved)
    exact.append(interventions.patch(lens, clean, moved, metric, options=GridOptions(progress=False)))
    estimate.append(interventions.attribute(lens, clean, moved, metric))
effects = np.mean([grid.effects for grid in exact], axis=0)
estimated = np.mean([grid.effects for grid in estimate], axis=0)
cells = np.isfinite(effects)
print(f"log p, corrupted runs: {np.mean([g.baseline for g in exact]):.2f}, clean runs: {np.mean([g.clean for g in exact]):.2f}")
for layer in learned:
    print(f"L{layer} patched effect " + " ".join(f"h{h} {effects[layer, h]:+.2f}" for h in range(lens.n_heads))
          + " | attributed " + " ".join(f"{estimated[layer, h]:+.2f}" for h in range(lens.n_heads)))
print(f"Pearson r (patched vs attributed, every cell of every pair): "
      f"{np.corrcoef(np.ravel([g.effects[cells] for g in exact]), np.ravel([g.effects[cells] for g in estimate]))[0, 1]:.2f}")

# `GridOptions(tokens=…)` patches only some tokens. A span by name ("needle", "question", "answer") is
# transplanted: each of its tokens in the moved run gets the clean positions of the same token of the clean run's
# span, wherever that sat. "rest" is every other token, patched index by index.
for tokens in ("needle", "rest"):
    only = np.mean([interventions.patch(lens, clean, moved, interventions.answer_logprob(moved),
                                        options=GridOptions(tokens=tokens, progress=False)).effects
                    for clean, moved in pairs], axis=0)
    for layer in learned:
        print(f"tokens={tokens!r:9} L{layer} " + " ".join(f"h{h} {only[layer, h]:+.2f}" for h in range(lens.n_heads)))

# %%
fig = make_subplots(rows=1, cols=2, subplot_titles=("patched (exact)", "attributed (gradient)"))
largest = float(np.nanmax(np.abs(effects)))
for column, values in enumerate((effects, estimated), start=1):
    fig.add_heatmap(z=values[learned], x=[f"h{h}" for h in range(lens.n_heads)], y=[f"L{layer}" for layer in learned],
                    colorscale="RdBu", zmid=0.0, zmin=-largest, zmax=largest, coloraxis=None,
                    showscale=column == 2, colorbar_title="Δ log p", row=1, col=column)
fig.update_yaxes(autorange="reversed")
fig.update_layout(title="bytes1k-repo: clean positions of one head written into the moved-needle run")

# %% [markdown]
# A head whose patched effect is far from zero holds positions that differ between the two prompts
# in a way the answer depends on: the same two heads of the lower RePo layer that the ablations of
# section 2 flag. Transplanting the needle's own clean positions onto the moved needle changes next
# to nothing, and neither does patching every other token: the needle carries the same learned
# positions wherever it sits, so the whole-run effect comes from writing other tokens' positions
# (the haystack's that sat at the moved needle's indices in the clean run) onto the needle. In a RoPE
# model the same transplant breaks retrieval: its needle's positions are its place in the text.
# The attribution map costs one forward and one backward pass for the whole grid,
# but it is a first-order estimate, and the answer is far from linear in a position that moves by
# many units (a rotation angle wraps around): it finds one of the two heads and misses the other,
# as the Pearson r above shows. Use it to rank the cells of a large grid, then patch the top ones
# exactly.
#
# ## 5. Next-byte prediction
#
# `zoo:bytes-repo` on the first held-out English and Chinese document: the mean next-byte loss in
# bits (`span_loss` over every byte, divided by ln 2) with its learned positions, and the change when
# every RePo layer's are replaced. A control replaces the RoPE layers' positions by a constant, to
# show what losing order information costs this model.

# %%
byte_lens = repo_lens.load("zoo:bytes-repo", device="cpu")
rope_layers = [layer for layer, kind in enumerate(byte_lens.layer_kinds) if kind == "rope"]
splits = bilingual_splits()
documents = {lang: byte_lens.encode(splits[lang][1][0])[: byte_lens.context_length] for lang in ("en", "zh")}


def bits_per_byte(ids, mode=UNCHANGED, layers=None):
    loss = interventions.span_loss((np.asarray(ids), (1, len(ids))))
    return interventions.ablate(byte_lens, ids, mode=mode, layers=layers, metric=loss)[0] / np.log(2)


baseline = {lang: bits_per_byte(ids) for lang, ids in documents.items()}
settings = {f"{mode}, RePo layers": (mode, None) for mode in ("integer", "constant", "shuffle")}
settings["control: constant, RoPE layers"] = ("constant", rope_layers)
changes = {label: {lang: bits_per_byte(ids, mode, layers) - baseline[lang] for lang, ids in documents.items()}
           for label, (mode, layers) in settings.items()}
print(f"{'positions':32} {'en':>8} {'zh':>8}")
print(f"{'learned (bits per byte)':32} {baseline['en']:8.3f} {baseline['zh']:8.3f}")
for label, change in changes.items():
    print(f"{label:32} {change['en']:+8.3f} {change['zh']:+8.3f}")

# %%
fig = go.Figure()
for index, lang in enumerate(documents):
    fig.add_bar(name=lang, x=list(changes), y=[change[lang] for change in changes.values()],
                marker_color=repo_lens.plots.OKABE_ITO[index])
fig.update_layout(barmode="group", title="bytes-repo: loss change when positions are replaced",
                  yaxis_title="Δ bits per byte (replaced − learned)")

# %% [markdown]
# ## 6. Text reversal
#
# `zoo:reversal-repo` (RePo in every layer) reverses lists of made-up words,
# `<bos> Reverse the following words : x1 … xL <sep> xL … x1`, and was trained on lists of 2 to 20
# words; the RePo paper (App. C) finds RePo generalises to longer lists where RoPE and NoPE fail.
# Exact match over the reversed words, 50 prompts per length: the three zoo reversal models, then
# `reversal-repo` with its positions replaced in every layer or made integer in one.

# %%
reversal = {name: repo_lens.load(f"zoo:{name}", device="cpu") for name in ("reversal-repo", "reversal-rope", "reversal-nope")}
LENGTHS = [10, 20, 25, 30]


def reversal_accuracy(model, n_words, mode=UNCHANGED, layers=None):
    batch = [reversal_prompt(model.tokenizer, n_words, seed=seed) for seed in range(50)]
    solved = interventions.niah_exact_match([(prompt.ids, prompt.spans["output"]) for prompt in batch])
    return interventions.ablate(model, [prompt.ids for prompt in batch], mode=mode, layers=layers, metric=solved).mean()


table = {name: [reversal_accuracy(model, n) for n in LENGTHS] for name, model in reversal.items()}
repo = reversal["reversal-repo"]
for mode in ("integer", "constant", "shuffle"):
    table[f"reversal-repo, {mode}"] = [reversal_accuracy(repo, n, mode) for n in LENGTHS]
for layer in range(repo.n_layers):
    table[f"reversal-repo, integer L{layer}"] = [reversal_accuracy(repo, n, "integer", [layer]) for n in LENGTHS]
print(f"{'model, positions':30}" + "".join(f"{f'L={n}':>8}" for n in LENGTHS))
for label, accuracies in table.items():
    print(f"{label:30}" + "".join(f"{value:8.2f}" for value in accuracies))

# %% [markdown]
# The first three rows compare the mechanisms on lengths within and beyond training; the rows below
# them show what `reversal-repo` keeps when its learned positions are replaced, in every layer or
# in one. The same questions for a whole study, with the RoPE model as a control, run with
# `repo-lens reproduce position_interventions`.
