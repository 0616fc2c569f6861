"""trace stops its forward early only when nobody else waits on a later hook point."""

from __future__ import annotations

import torch

from repo_lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model


def test_trace_runs_to_the_end_for_someone_elses_hook_and_gives_the_same_positions():
    lens = Lens(tiny_model("repo"), ByteTokenizer())
    alone = lens.trace("hello there", progress=False)
    seen = []
    last = lens.n_layers - 1
    lens.model.add_hook(f"blocks.{last}.hook_resid_post", lambda tensor, hook: seen.append(tensor.shape))
    try:
        listened = lens.trace("hello there", progress=False)
    finally:
        lens.model.reset_hooks()
    assert seen == [torch.Size([1, 11, 64])]  # the hook past the last positions fired
    assert (listened.positions == alone.positions).all()
