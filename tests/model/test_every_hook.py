"""Every hook of every mechanism, and of each decay, honours an in-place edit and fires a backward hook attached alone."""

from __future__ import annotations

import pytest
import torch

from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.registry import block_families, decay_names, mechanism_kinds, mechanism_traits

IDS = torch.tensor([[3, 9, 4, 7, 1, 8]])
# what a layer whose bias comes from every query-key pair publishes for reading only (the docs' hook table
# says "a read-out"): the positions and increments as seen from the last token; editing them changes nothing
READ_OUTS = ("attn.hook_pos", "mechanism.hook_delta", "mechanism.hook_query_delta")


def build(kind: str, family: str = "llama", decay: str = "none") -> LensModel:
    torch.manual_seed(0)
    cfg = ModelConfig(family=family, vocab_size=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                      d_mlp=48, layer_mechanisms=["rope", kind], decay=decay)
    model = LensModel(cfg).eval()
    with torch.no_grad():  # no parameter left at zero (CoPE's position embeddings start at zero)
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def read_out(kind: str, name: str) -> bool:
    contextual = mechanism_traits(kind).role == "contextual"
    return contextual and name.startswith("blocks.1.") and name.endswith(READ_OUTS)


# every kind in a Llama block, or in the block family of the attention that runs it where the zoo's does not
CASES = [("llama" if "llama" in block_families(kind) else block_families(kind)[0], kind, "none") for kind in mechanism_kinds()]
CASES += [("olmo2", "rope", "none"), ("olmo2", "repo", "none")]  # OLMo-2: post-norms, q/k norms
CASES += [("llama", "lpi-head", decay) for decay in decay_names()] + [("olmo2", "rope", "forget")]  # the model's decay


@pytest.mark.parametrize(("family", "kind", "decay"), CASES)
def test_in_place_edits_and_lone_backward_hooks_work_at_every_hook(family, kind, decay):
    model = build(kind, family, decay)
    with torch.no_grad():
        plain = model(IDS)
    # layer 0 (RoPE), the embeddings and the final norm run the same code in every model: walk them once
    names = [name for name in model.hook_dict
             if kind == "rope" or name.startswith("blocks.1.") or name == "hook_log_forget"]
    for name in names:
        def scale(tensor, hook):
            generator = torch.Generator().manual_seed(1)  # not a shift: RoPE does not see one
            tensor.mul_(0.5).add_(torch.rand(tensor.shape, generator=generator).to(tensor.dtype))  # in place

        with torch.no_grad():
            try:
                edited = model.run_with_hooks(IDS, fwd_hooks=[(name, scale)])
            except RuntimeError as error:
                raise AssertionError(f"{kind}: an in-place edit of {name} failed: {error}") from None
        if not read_out(kind, name):
            assert (edited - plain).abs().max() > 1e-6, f"{kind}: an in-place edit of {name} changed nothing"
        grads = []
        with model.hooks(bwd_hooks=[(name, lambda grad, hook: grads.append(grad))]):
            model(IDS)[0, -1].logsumexp(-1).backward()
        model.zero_grad()
        if not read_out(kind, name):
            assert grads and grads[0].abs().sum() > 0, f"{kind}: a lone backward hook on {name} did not fire"
