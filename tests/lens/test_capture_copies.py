"""Tracing copies from the device only what it must: a layer whose positions are known (RoPE's integers,
NoPE's constant) is filled in on the host, unless a hook someone else attached may have changed them."""

from __future__ import annotations

import numpy as np
import torch

from repo_lens import capture
from repo_lens.model.tiny import tiny_model


def test_known_positions_are_not_copied_and_equal_what_the_layer_uses(monkeypatch):
    model = tiny_model("repo", n_layers=6)  # RoPE in layers 0-1, RePo in 2-5
    copied = []
    to_host = capture._to_host
    monkeypatch.setattr(capture, "_to_host", lambda values: copied.append(tuple(values.shape)) or to_host(values))
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    [(positions, _), (short, _)] = capture.capture_batch(model, ids, [5, 3])
    assert len(copied) == 4  # the four RePo layers only
    np.testing.assert_array_equal(positions[:2], np.broadcast_to(np.arange(5.0), (2, 4, 5)))
    np.testing.assert_array_equal(short[:2], np.broadcast_to(np.arange(3.0), (2, 4, 3)))
    # the learned layers are what hook_pos saw
    _, cache = model.run_with_cache(ids[:1])
    for layer in range(6):
        np.testing.assert_allclose(positions[layer], cache[f"blocks.{layer}.attn.hook_pos"][0].numpy(), rtol=0, atol=0)


def test_a_hook_that_edits_known_positions_is_seen_by_the_trace():
    model = tiny_model("rope", n_layers=3)

    def shift(positions, hook):
        return positions + 10.0

    model.add_hook("blocks.1.attn.hook_pos", shift)
    try:
        [(positions, _)] = capture.capture_batch(model, torch.tensor([[1, 2, 3, 4]]), [4])
    finally:
        model.reset_hooks()
    np.testing.assert_array_equal(positions[1], np.broadcast_to(np.arange(4.0) + 10.0, (4, 4)))
    np.testing.assert_array_equal(positions[0], np.broadcast_to(np.arange(4.0), (4, 4)))
