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
# # TransformerLens idioms on a model with learned positions
#
# `lens.model` is a TransformerLens model: what you write against TransformerLens runs on it
# unchanged — `to_tokens`, `run_with_cache` and the `ActivationCache` methods, `return_type="loss"`,
# `generate`, the weight matrices, hooks, `transformer_lens.patching`, CircuitsVis — and nnsight can
# read and write every hook. This notebook runs them on a small byte-level RePo model from the zoo,
# whose layers 2 and 3 assign learned positions ("RePo: Language Models with Context Re-Positioning",
# arXiv 2512.14391). The positions are one more entry of the cache: `cache["pos", layer, "attn"]`.

# %%
import circuitsvis
import nnsight
import plotly.graph_objects as go
import torch
import transformer_lens
from transformer_lens import patching

import repo_lens

# figures are interactive here; each also carries a PNG, for viewers that do not run plotly (GitHub, HTML export)
repo_lens.plots.notebook_setup()
torch.set_grad_enabled(False)  # this notebook only reads and edits forward passes
torch.manual_seed(0)

lens = repo_lens.load("zoo:bytes1k-repo")
model = lens.model
print(lens.layer_kinds)

# %% [markdown]
# ## Tokens, the cache and its methods
#
# A byte model has no BOS token, so `to_tokens` gives the bytes of the text.

# %%
text = "The cat sat on the mat. The cat sat"
tokens = model.to_tokens(text)
print(tokens.shape, model.to_str_tokens(text)[:8])
logits, cache = model.run_with_cache(tokens)
print(isinstance(cache, transformer_lens.ActivationCache))
print("pattern", tuple(cache["pattern", 2].shape), " positions", tuple(cache["pos", 2, "attn"].shape))
print("loss", round(float(model(tokens, return_type="loss")), 3))

# %% [markdown]
# The logit lens: `accumulated_resid` stacks the residual stream after each layer (with the final
# norm applied), and `W_U` projects it onto the vocabulary. Below, the log-probability of the true next
# byte at every position, layer by layer.

# %%
resid, labels = cache.accumulated_resid(apply_ln=True, return_labels=True)  # [component, batch, pos, d_model]
log_probs = (resid @ model.W_U).log_softmax(-1)[:, 0, :-1]
true_next = log_probs.gather(-1, tokens[0, 1:].expand(len(labels), -1)[..., None])[..., 0]
fig = go.Figure(go.Heatmap(z=true_next.detach().numpy(), y=labels, colorscale="Viridis",
                           colorbar_title="log p(next byte)"))
fig.update_layout(title="Logit lens: log-probability of the next byte", xaxis_title="position", height=320)
fig

# %% [markdown]
# `decompose_resid` splits the last position's residual stream into what the embedding and each
# block's attention and MLP wrote; `logit_attrs` projects the parts onto a token's logit. It divides
# each part by the final norm's scale and multiplies by the norm's weight, so the attributions add up
# to the logit on the weights as loaded, and equal TransformerLens' after `fold_ln`
# (`fold_final_norm()` folds the weight into `W_U` the same way; nothing changes). (This model's
# blocks are OLMo-2's, whose norm follows attention: `attn_out` = norm(Σ heads + b_O) is no sum over heads, so the cache refuses
# `stack_head_results` as residual components here; each head's result before the norm is at
# `blocks.L.attn.hook_result`.)

# %%
parts, part_labels = cache.decompose_resid(pos_slice=-1, return_labels=True)
attributions = cache.logit_attrs(parts, tokens=int(tokens[0, -1]), pos_slice=-1)[:, 0]
print("sum of attributions", round(float(attributions.sum()), 4), "logit", round(float(logits[0, -1, tokens[0, -1]]), 4))
print([(label, round(float(value), 3)) for label, value in zip(part_labels, attributions)])

# %% [markdown]
# ## Weights, generation, hooks
#
# `W_Q` is [layer, head, d_model, d_head] and `OV` a factored [layer, head, d_model, d_model]
# matrix, as in TransformerLens. `generate` continues greedily (or samples) through the KV cache.

# %%
print(tuple(model.W_Q.shape), tuple(model.OV.shape))
print("OV norms, layer 2:", [round(float(model.OV[2, head].norm()), 2) for head in range(lens.n_heads)])
print(repr(model.generate(text, max_new_tokens=12, do_sample=False, verbose=False)))

# %% [markdown]
# Hooks edit the forward pass, in place or by returning a new tensor. Here the learned positions of
# layers 2 and 3 are replaced by the integer index 0, 1, 2, … — RoPE's — and the loss compared.

# %%
def integer_positions(positions, hook):
    positions[:] = torch.arange(positions.shape[-1], dtype=positions.dtype)


ablated = model.run_with_hooks(tokens, return_type="loss",
                               fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", integer_positions) for layer in (2, 3)])
print("loss with learned positions", round(float(model(tokens, return_type="loss")), 3),
      " with integer positions", round(float(ablated), 3))

# %% [markdown]
# ## Activation patching with `transformer_lens.patching`
#
# Patch the residual stream of a clean prompt into a corrupted one, one layer and position at a time, and
# read the logit of the byte the clean prompt continues with.

# %%
clean, corrupted = model.to_tokens("The cat sat. The ca"), model.to_tokens("The dog sat. The ca")
_, clean_cache = model.run_with_cache(clean)
answer = model.to_single_token("t")
effect = patching.get_act_patch_resid_pre(model, corrupted, clean_cache, lambda logits: logits[0, -1, answer])
fig = go.Figure(go.Heatmap(z=effect.detach().numpy(), x=model.to_str_tokens(clean), colorscale="RdBu",
                           zmid=float(model(corrupted)[0, -1, answer]), colorbar_title="logit of 't'"))
fig.update_layout(title="Patching resid_pre: logit of the answer byte", yaxis_title="layer", height=300)
fig

# %% [markdown]
# ## CircuitsVis and nnsight
#
# CircuitsVis draws the cached pattern of a RePo layer; nnsight reads it (and could write it) inside a
# trace, at the hook's name.

# %%
circuitsvis.attention.attention_patterns(tokens=model.to_str_tokens(text), attention=cache["pattern", 2][0])

# %%
wrapped = nnsight.NNsight(model)
with wrapped.trace(tokens):
    pattern = wrapped.get("blocks.2.attn.hook_pattern.output").save()
print("nnsight's pattern equals the cache's:", torch.allclose(pattern, cache["pattern", 2]))
