"""Bad input to ``run_with_cache(..., incl_bwd=True)`` and the loss of the TransformerLens adapter, by class:
a loss that is not one number, ``remove_batch_dim`` with a batch of several, a loss of fewer than two
tokens are each one InputError naming the argument and the fix; with some weights frozen every
activation's gradient is still cached, equal to the one autograd gives with none frozen.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.errors import InputError
from repo_lens.model.tiny import tiny_model

IDS = torch.tensor([[3, 17, 4, 9, 22, 5, 11]])


@pytest.fixture(scope="module")
def model():
    return tiny_model("repo", n_layers=2, d_model=32, n_heads=4, seed=3)


@pytest.fixture(scope="module")
def text_model(byte_model_dir):
    """A model with a tokenizer (set by repo_lens.load), for text and lists of texts."""
    return repo_lens.load(byte_model_dir, device="cpu").model


# --- a backward pass needs one number --------------------------------------------------------------------

@pytest.mark.parametrize("per_token", [True, np.bool_(True), 1], ids=["true", "numpy-true", "one"])
def test_incl_bwd_refuses_a_loss_per_token(model, per_token):
    with pytest.raises(InputError, match="loss_per_token=True gives one per token: leave loss_per_token out"):
        model.run_with_cache(IDS, return_type="loss", loss_per_token=per_token, incl_bwd=True)


@pytest.mark.parametrize("return_type", ["logits", "both", None], ids=["logits", "both", "none"])
def test_incl_bwd_refuses_an_output_that_is_not_one_number(model, return_type):
    with pytest.raises(InputError, match='return_type="loss"'):
        model.run_with_cache(IDS, return_type=return_type, incl_bwd=True)


def test_incl_bwd_takes_loss_per_token_false(model):
    loss, cache = model.run_with_cache(IDS, return_type="loss", loss_per_token=False, incl_bwd=True)
    model.zero_grad(set_to_none=True)
    assert loss.ndim == 0 and "blocks.1.hook_resid_post_grad" in cache.cache_dict


# --- remove_batch_dim needs a batch of one ----------------------------------------------------------------

BATCHES = [
    pytest.param(lambda: IDS.repeat(2, 1), 2, id="tensor-of-2"),
    pytest.param(lambda: IDS.repeat(8, 1), 8, id="tensor-of-8"),
    pytest.param(lambda: torch.zeros(3, 1, dtype=torch.long), 3, id="tensor-of-3-one-token-rows"),
    pytest.param(lambda: ["ab cd", "ef gh"], 2, id="list-of-2-texts"),
    pytest.param(lambda: ("ab", "cd", "ef"), 3, id="tuple-of-3-texts"),
]


@pytest.mark.parametrize("incl_bwd", [True, False], ids=["incl-bwd", "forward-only"])
@pytest.mark.parametrize("inputs,batch", BATCHES)
def test_remove_batch_dim_refuses_a_batch_of_several(text_model, inputs, batch, incl_bwd):
    with pytest.raises(InputError) as caught:
        text_model.run_with_cache(inputs(), return_type="loss", incl_bwd=incl_bwd, remove_batch_dim=True)
    message = str(caught.value)
    assert "remove_batch_dim=True" in message and f"a batch of {batch}" in message, message
    text_model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("inputs", [lambda: IDS, lambda: IDS[0], lambda: "ab cd", lambda: ["ab cd"]],
                         ids=["tensor-1xT", "tensor-T", "text", "list-of-one-text"])
def test_remove_batch_dim_takes_one_input(text_model, inputs):
    _, batched = text_model.run_with_cache(inputs(), return_type="loss", incl_bwd=True)
    _, squeezed = text_model.run_with_cache(inputs(), return_type="loss", incl_bwd=True, remove_batch_dim=True)
    text_model.zero_grad(set_to_none=True)
    for name in ("blocks.2.attn.hook_pos", "blocks.2.attn.hook_pos_grad", "hook_embed_grad"):
        torch.testing.assert_close(squeezed[name], batched[name][0], atol=0, rtol=0)


# --- a loss needs two tokens --------------------------------------------------------------------------------

ONE_TOKEN = [pytest.param(lambda: torch.tensor([[5]]), id="1x1"), pytest.param(lambda: torch.tensor([5]), id="1-d"),
             pytest.param(lambda: torch.tensor([[1], [2], [3]]), id="3x1")]


@pytest.mark.parametrize("call", [
    lambda m, x: m(x, return_type="loss"),
    lambda m, x: m(x, return_type="both"),
    lambda m, x: m.run_with_cache(x, return_type="loss"),
    lambda m, x: m.run_with_cache(x, return_type="loss", incl_bwd=True),
    lambda m, x: m.run_with_cache(x[:1], return_type="loss", incl_bwd=True, remove_batch_dim=True),
], ids=["forward-loss", "forward-both", "cache", "cache-incl-bwd", "cache-incl-bwd-squeezed"])
@pytest.mark.parametrize("inputs", ONE_TOKEN)
def test_a_loss_of_one_token_is_refused(model, call, inputs):
    x = inputs()
    with pytest.raises(InputError, match="a next-token loss needs at least two tokens .* the input has 1"):
        call(model, x)


def test_a_loss_of_one_token_per_token_is_empty(model):
    assert model(torch.tensor([[5]]), return_type="loss", loss_per_token=True).shape == (1, 0)


def test_a_loss_of_two_tokens_is_the_cross_entropy(model):
    x = torch.tensor([[5, 9]])
    with torch.no_grad():
        logits = model(x)
        expected = torch.nn.functional.cross_entropy(logits[0, :1].float(), x[0, 1:])
        assert torch.isfinite(expected)
        torch.testing.assert_close(model(x, return_type="loss"), expected, atol=1e-6, rtol=0)


# --- frozen weights: every activation's gradient, as with none frozen -------------------------------------

def _autograd_gradients(model: Any, ids: torch.Tensor, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Each hook's gradient (``names``, else every hook's) from autograd itself (retain_grad on what the hook point
    hands on), no weight frozen. The same hooks as the cache's: a hooked attention pattern is computed apart."""
    grabbed: dict[str, torch.Tensor] = {}

    def grab(tensor: torch.Tensor, hook: Any) -> torch.Tensor:
        if tensor.requires_grad:
            tensor.retain_grad()
            grabbed[hook.name] = tensor
        return tensor

    with model.hooks(fwd_hooks=[(name, grab) for name in names or model.hook_dict]):
        model(ids, return_type="loss").backward()
    model.zero_grad(set_to_none=True)
    return {f"{name}_grad": tensor.grad for name, tensor in grabbed.items() if tensor.grad is not None}


FROZEN = {  # which weights stay trainable
    "unembed-only": lambda name: name.startswith("unembed"),
    "embed-only": lambda name: name == "embed.weight",
    "last-block-only": lambda name: name.startswith("blocks.1."),
    "first-attention-only": lambda name: name.startswith("blocks.0.attn."),
    "every-other": None,  # set below: every second parameter
    "all-but-unembed": lambda name: not name.startswith("unembed"),
    "one-norm": lambda name: name == "blocks.1.post_attention_layernorm.weight",
}


@pytest.mark.parametrize("kind", ["repo", "rope", "grape-m", "cope", "fox"])
@pytest.mark.parametrize("frozen", list(FROZEN))
def test_frozen_weights_still_give_every_activation_gradient(kind, frozen):
    model = tiny_model(kind, n_layers=2, d_model=32, n_heads=4, seed=5)
    expected = _autograd_gradients(model, IDS)
    names = [name for name, _ in model.named_parameters()]
    keep = FROZEN[frozen] or (lambda name: names.index(name) % 2 == 0)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(keep(name))
    loss, cache = model.run_with_cache(IDS, return_type="loss", incl_bwd=True)
    gradients = {name: value for name, value in cache.cache_dict.items() if name.endswith("_grad")}
    assert sorted(gradients) == sorted(expected) and len(expected) > 20
    for name, value in expected.items():
        torch.testing.assert_close(gradients[name], value, atol=0, rtol=0, msg=name)
    # as TransformerLens: the frozen weights get no gradient
    assert all(parameter.grad is None for name, parameter in model.named_parameters() if not keep(name))
    assert torch.equal(cache["hook_embed"], model.embed(IDS))  # the cached activations are the forward's own


def test_frozen_weights_with_names_filter_and_squeezed_batch(model):
    names = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.attn.hook_pos"]
    expected = _autograd_gradients(model, IDS, names)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("unembed"))
    try:
        _, cache = model.run_with_cache(IDS, return_type="loss", incl_bwd=True, names_filter=names,
                                        remove_batch_dim=True)
    finally:
        model.requires_grad_(True)
        model.zero_grad(set_to_none=True)
    assert sorted(name for name in cache.cache_dict if name.endswith("_grad")) == sorted(f"{n}_grad" for n in names)
    for name in names:
        torch.testing.assert_close(cache[f"{name}_grad"], expected[f"{name}_grad"][0], atol=0, rtol=0)


def test_every_weight_frozen_is_still_refused_naming_the_fix(model):
    model.requires_grad_(False)
    try:
        with pytest.raises(InputError, match=r"every parameter has requires_grad=False.*requires_grad_\(True\)"):
            model.run_with_cache(IDS, return_type="loss", incl_bwd=True)
    finally:
        model.requires_grad_(True)
