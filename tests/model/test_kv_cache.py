"""Incremental decoding with a KV cache gives every token the z (and logits) of a full forward."""

from __future__ import annotations

import torch

import repo_lens


def _positions_by_layer(model, ids, cache=None):
    captured = {}
    hooks = [(f"blocks.{layer}.attn.hook_pos", (lambda layer: lambda t, hook: captured.__setitem__(layer, t.clone()))(layer))
             for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        logits = model.run_with_hooks(ids, fwd_hooks=hooks, cache=cache)
    return logits, torch.stack([captured[layer][0] for layer in range(model.cfg.n_layers)])


def test_token_by_token_decoding_matches_full_forward(repo_dir):
    model = repo_lens.load(repo_dir, device="cpu").model
    ids = torch.tensor([[1, 5, 9, 12, 7, 3, 20, 8, 2, 6, 14, 11]])
    full_logits, full_positions = _positions_by_layer(model, ids)
    cache = model.new_cache()
    prompt = 5  # a prompt pass first, then one token at a time
    logits, positions = _positions_by_layer(model, ids[:, :prompt], cache)
    step_logits, step_positions = [logits], [positions]
    for index in range(prompt, ids.shape[1]):
        logits, positions = _positions_by_layer(model, ids[:, index : index + 1], cache)
        step_logits.append(logits)
        step_positions.append(positions)
    torch.testing.assert_close(torch.cat(step_positions, dim=-1), full_positions, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.cat(step_logits, dim=1), full_logits, atol=1e-4, rtol=0)
    assert cache.seq_len == ids.shape[1]
    # RoPE layers continue the integer index across steps
    assert torch.equal(torch.cat(step_positions, dim=-1)[0, 0], torch.arange(12, dtype=torch.float32))
