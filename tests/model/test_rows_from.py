"""``LensModel.forward(rows_from=k)``: the logits of tokens k.. alone (the last block runs its queries and
MLP for them only) equal the full forward's, for every registered mechanism and both block families, and
the KV cache it fills continues exactly as the full forward's does."""

from __future__ import annotations

import pytest
import torch

from repo_lens.model.registry import block_families, mechanism_kinds
from repo_lens.model.tiny import tiny_model

IDS = torch.tensor([[5, 17, 99, 3, 42, 42, 7, 200, 31, 64, 1, 250]])


def _perturbed(kind: str, family: str):
    model = tiny_model(kind, n_layers=3, d_model=32, n_heads=4, family=family, context=64)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


# both zoo families for every kind the zoo's attention runs; a kind only an authors' attention runs, in its family
CASES = [(kind, family) for kind in mechanism_kinds()
         for family in [family for family in ("olmo2", "llama") if family in block_families(kind)] or block_families(kind)]


@pytest.mark.parametrize(("kind", "family"), CASES)
def test_rows_from_equals_the_last_rows_of_the_full_forward(kind, family):
    model = _perturbed(kind, family)
    with torch.no_grad():
        full = model(IDS)
        for rows_from in (1, 7, IDS.shape[1] - 1):
            part = model(IDS, rows_from=rows_from)
            assert part.shape == (1, IDS.shape[1] - rows_from, full.shape[-1])
            torch.testing.assert_close(part, full[:, rows_from:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["repo", "lpi", "cope", "fox", "grape-a"])
def test_the_cache_filled_with_rows_from_continues_like_the_full_forward(kind):
    model = _perturbed(kind, "olmo2")
    with torch.no_grad():
        full_cache, part_cache = model.new_cache(), model.new_cache()
        model(IDS[:, :8], cache=full_cache)
        model(IDS[:, :8], cache=part_cache, rows_from=6)
        torch.testing.assert_close(model(IDS[:, 8:], cache=part_cache), model(IDS[:, 8:], cache=full_cache),
                                   atol=1e-5, rtol=1e-5)


def test_rows_from_skips_the_mlp_rows_it_does_not_need():
    model = _perturbed("repo", "olmo2")
    seen = []
    handle = model.blocks[-1].mlp.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    with torch.no_grad():
        model(IDS, rows_from=9)
    handle.remove()
    assert seen == [IDS.shape[1] - 9]
