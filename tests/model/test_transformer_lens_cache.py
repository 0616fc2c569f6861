"""TransformerLens' cache on repo_lens' models: direct logit attribution on the weights as loaded (the norms'
weights included, equal to TransformerLens' bridge with ``fold_ln``) and the gradients of ``incl_bwd``
(autograd's own, with TransformerLens' refusals)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from repo_lens.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("transformer_lens_idioms", ROOT / "bench" / "transformer_lens_idioms.py")
idioms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(idioms)


@pytest.fixture(scope="module", params=["llama-gqa", "olmo2"])
def folded(request, tmp_path_factory):
    """(arch, TransformerLens' bridge with fold_ln (and no other processing), repo_lens' model) of one checkpoint."""
    directory = idioms.write_checkpoint(tmp_path_factory.mktemp(f"{request.param}-folded"), request.param)
    return request.param, idioms.transformer_lens_folded_model(directory), idioms.repo_lens_model(directory)


def _logit_attributions(cache: Any, stack: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (cache.logit_attrs(stack, tokens=5, pos_slice=-1),
            cache.logit_attrs(stack, tokens=5, incorrect_tokens=6, pos_slice=-1))


def test_direct_logit_attribution_on_the_weights_as_loaded_is_transformer_lens_folded(folded):
    """With the final norm's weight as loaded (not 1), the attributions of every component add up to the logit
    and to a logit difference; on Llama they equal TransformerLens' on its bridge with ``fold_ln``, by block,
    head and neuron (TransformerLens cannot fold OLMo-2's norms, and its attributions there do not add up);
    ``fold_final_norm`` changes none of them."""
    arch, reference, ours = folded
    ids = idioms._ids()
    with torch.no_grad():
        logits, cache = ours.run_with_cache(ids)
        assert not torch.equal(ours.ln_final.weight, torch.ones_like(ours.ln_final.weight))  # a weight to include
        parts = cache.decompose_resid(pos_slice=-1)
        attributions, difference = _logit_attributions(cache, parts)
        torch.testing.assert_close(attributions.sum(0), logits[:, -1, 5], atol=1e-4, rtol=0)
        torch.testing.assert_close(difference.sum(0), logits[:, -1, 5] - logits[:, -1, 6], atol=1e-4, rtol=0)
        torch.testing.assert_close(cache.decompose_resid(pos_slice=-1, apply_ln=True),
                                   cache.apply_ln_to_stack(parts, pos_slice=-1), atol=0, rtol=0)
        stacks = {"blocks": lambda c: c.decompose_resid(pos_slice=-1),
                  "accumulated": lambda c: c.accumulated_resid(pos_slice=-1, incl_mid=True),
                  "neurons": lambda c: c.stack_neuron_results(layer=-1, pos_slice=-1)}
        if arch == "olmo2":
            with pytest.raises(InputError, match="not residual stream components"):
                cache.stack_head_results(layer=-1)
        else:
            stacks["heads"] = lambda c: c.stack_head_results(layer=-1, pos_slice=-1)
            _, theirs = reference.run_with_cache(ids)
            for name, stack in stacks.items():
                ours_attributions = _logit_attributions(cache, stack(cache))
                torch.testing.assert_close(ours_attributions, _logit_attributions(theirs, stack(theirs)), atol=1e-4,
                                           rtol=0, msg=f"{arch} {name}")
            # the fused norm-and-projection path of the full decomposition (no [neuron, d_model] stack)
            direction = ours.W_U[:, 5] - ours.W_U[:, 6]
            full = cache.get_full_resid_decomposition(apply_ln=True, pos_slice=-1, project_output_onto=direction)
            torch.testing.assert_close(full.sum(0), difference.sum(0), atol=1e-4, rtol=0)
        ours.fold_final_norm()
        refolded, cache = ours.run_with_cache(ids)
        torch.testing.assert_close(refolded, logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(_logit_attributions(cache, cache.decompose_resid(pos_slice=-1)),
                                   (attributions, difference), atol=1e-4, rtol=0)


def test_a_block_norm_s_weight_is_included_and_a_norm_with_a_bias_is_refused():
    """A stack entering block 1's ln1 is each component divided by the cached scale times ln1's weight, so
    it adds up to what the norm hands attention; a bias, which no component owns, is refused."""
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo", n_layers=2, family="llama")
    with torch.no_grad():
        torch.nn.init.uniform_(model.blocks[1].ln1.weight, 0.5, 1.5)
        _, cache = model.run_with_cache(torch.tensor([[1, 2, 3, 4]]))
        stack = cache.decompose_resid(layer=1)
        normed = cache.apply_ln_to_stack(stack, layer=1)
        expected = model.blocks[1].ln1(cache["blocks.1.hook_resid_pre"])
        torch.testing.assert_close(normed.sum(0), expected, atol=1e-5, rtol=0)
        model.final_norm.bias = torch.nn.Parameter(torch.full_like(model.final_norm.weight, 0.1))
        with pytest.raises(InputError, match=r"bias.*fold_final_norm\(\)"):
            cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens=5, pos_slice=-1)


def test_a_read_pattern_keeps_its_gradient_and_incl_bwd_needs_a_loss():
    """A forward hook that only reads hook_pattern and calls retain_grad() gets the gradient a backward hook
    on the same point sees, on every mechanism, and the logits stay bit-identical; incl_bwd without a
    scalar output is refused before the run."""
    from repo_lens.errors import InputError
    from repo_lens.model.registry import mechanism_kinds
    from repo_lens.model.tiny import tiny_model

    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(2))
    for kind in mechanism_kinds():
        model = tiny_model(kind, n_layers=2)
        kept, seen = {}, {}

        def keep(pattern, hook):
            pattern.retain_grad()
            kept["pattern"] = pattern

        def grad_hook(grad, hook):
            seen["grad"] = grad.detach().clone()

        plain = model(ids)
        logits = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_pattern", keep)])
        assert torch.equal(logits, plain), kind
        logits[0, -1, 3].backward()
        model.zero_grad()
        logits = model.run_with_hooks(ids, bwd_hooks=[("blocks.1.attn.hook_pattern", grad_hook)], reset_hooks_end=False)
        logits[0, -1, 3].backward()
        model.reset_hooks()
        model.zero_grad()
        assert kept["pattern"].grad is not None, kind
        torch.testing.assert_close(kept["pattern"].grad, seen["grad"], atol=1e-6, rtol=1e-5, msg=kind)
    with pytest.raises(InputError, match='return_type="loss"'):
        model.run_with_cache(ids, incl_bwd=True)


@pytest.mark.parametrize("family", ["llama", "olmo2", "authors"])
def test_incl_bwd_caches_autograds_gradients_bit_for_bit_and_refuses_what_transformer_lens_refuses(family):
    """Each cached ``_grad`` is torch.autograd's gradient of the loss with respect to that activation (read by
    retain_grad() on the tensor the hook point hands on), exactly, on every mechanism, with and without
    remove_batch_dim (every mechanism the family's attention runs); a run whose backward cannot happen is refused
    before the forward, as TransformerLens' bridge refuses it."""
    from repo_lens.model.registry import family_attention, kinds_in_attention
    from repo_lens.model.tiny import tiny_model

    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(3))
    names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_z", "blocks.1.hook_resid_post", "blocks.1.attn.hook_pos"]
    for kind in kinds_in_attention(family_attention(family)):
        model = tiny_model(kind, n_layers=2, family=family)
        present = [name for name in names if name in model.hook_dict]
        grabbed: dict[str, torch.Tensor] = {}

        def grab(tensor: torch.Tensor, hook: Any) -> torch.Tensor:
            if tensor.requires_grad:  # RoPE's integer positions have no gradient
                tensor.retain_grad()
                grabbed[hook.name] = tensor
            return tensor

        with model.hooks(fwd_hooks=[(name, grab) for name in present]):
            model(ids, return_type="loss").backward()
        model.zero_grad(set_to_none=True)
        loss, cache = model.run_with_cache(ids, return_type="loss", names_filter=present, incl_bwd=True)
        _, squeezed = model.run_with_cache(ids, return_type="loss", names_filter=present, incl_bwd=True,
                                           remove_batch_dim=True)
        model.zero_grad(set_to_none=True)
        assert loss.ndim == 0 and all(not model.hook_dict[name].bwd_hooks for name in present), kind
        assert all(f"{name}_grad" not in cache.cache_dict for name in present if name not in grabbed), kind
        for name in grabbed:
            expected = grabbed[name].grad
            if expected is None:  # read by nothing the loss depends on (CoPE's hook_pos is a readout)
                assert f"{name}_grad" not in cache.cache_dict, (kind, name)
                continue
            torch.testing.assert_close(cache[f"{name}_grad"], expected, atol=0, rtol=0, msg=f"{kind} {name}")
            torch.testing.assert_close(squeezed[f"{name}_grad"], expected[0], atol=0, rtol=0, msg=f"{kind} {name}")
    refusals = {"scalar output": dict(return_type="logits"), "stop_at_layer": dict(stop_at_layer=1)}
    for phrase, options in refusals.items():
        with pytest.raises(InputError, match=phrase):
            model.run_with_cache(ids, incl_bwd=True, **{"return_type": "loss", **options})
    with torch.no_grad(), pytest.raises(InputError, match="gradient tracking is off"):
        model.run_with_cache(ids, return_type="loss", incl_bwd=True)
    for parameter in model.original_model.parameters():  # TransformerLens' bridge: the wrapped model's weights
        parameter.requires_grad_(False)
    with pytest.raises(InputError, match="no grad_fn"):
        model.run_with_cache(ids, return_type="loss", incl_bwd=True)
