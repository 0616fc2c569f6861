"""The recipes on SmolLM2-135M itself (``repo-lens train --base zoo:smollm2-135m --mechanism grape-m|lpi-layer``):
at step 0, before any training, the re-positioned model is the base, so that what training changes is all that
differs between them and their RoPE control."""

from __future__ import annotations

import json

import pytest
import torch

import repo_lens
from repo_lens.train.reposition import RepositionConfig, repositioned_model
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

pytestmark = [pytest.mark.smollm2, pytest.mark.xdist_group("smollm2"),
              pytest.mark.skipif(not external_installed("smollm2-135m"),
                                 reason=f"the base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")]

TEXT = ("The jury said that the city of Atlanta had been well run, and that the election was conducted with care. "
        "It also found that many of the city's laws were outdated and should be revised by the next council.")


@pytest.fixture(scope="module")
def base():
    return repo_lens.load("zoo:smollm2-135m", device="cpu", dtype="float32")


def test_grape_m_at_step_0_is_the_base_in_fp32(base):
    model = repositioned_model(base.model, RepositionConfig(mechanism="grape-m", autocast=False))
    assert model.cfg.layer_mechanisms == ["rope"] * 10 + ["grape-m"] * 20
    tokens = torch.tensor([base.tokenizer.encode(TEXT)])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), base.model(tokens), rtol=0, atol=1e-5)


def test_layer_increments_at_step_0_are_the_base_rotated_from_one(base):
    """δ = 1 puts token t at t + 1 in layers 10-29. q·k cannot see the shift, but fp32 rounds the angles of t + 1
    otherwise than those of t: the reference is the base with RoPE's index shifted by one in the same layers
    (within 1e-5), and the base itself agrees within its own fp32 noise (1e-3 on logits of about 20)."""
    model = repositioned_model(base.model, RepositionConfig(mechanism="lpi-layer", autocast=False))
    assert model.cfg.layer_mechanisms == ["rope"] * 10 + ["lpi-layer"] * 20
    tokens = torch.tensor([base.tokenizer.encode(TEXT)])
    handles = [block.attn.mechanism.register_forward_hook(lambda module, args, out: out + 1.0)
               for block in base.model.blocks[10:]]
    try:
        with torch.no_grad():
            shifted = base.model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        logits, plain = model(tokens), base.model(tokens)
    torch.testing.assert_close(logits, shifted, rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, plain, rtol=0, atol=1e-3)


def test_the_command_trains_grape_m_on_a_corpus_of_ones_own_from_the_base(base, tmp_path):
    """``repo-lens train --base zoo:smollm2-135m --mechanism grape-m --corpus FILE``: the held-out bits it logs at
    step 0 are the base's on the same held-out documents (every tenth paragraph of the file), and it resumes."""
    from repo_lens.cli import main
    from repo_lens.train.reposition import RepositionConfig, held_out_bits
    from repo_lens.train.text_tokens import TextTokens

    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n\n".join(f"Note {i}: {TEXT}" for i in range(30)))
    args = ["train", "--base", "zoo:smollm2-135m", "--mechanism", "grape-m", "--corpus", str(corpus), "--steps", "2",
            "--context", "32", "--batch-size", "1", "--no-autocast", "--quiet", "--out", str(tmp_path / "run")]
    assert main(args) == 0
    recipe = json.loads((tmp_path / "run" / "recipe.json").read_text())
    assert recipe["recipe"]["corpus"] == str(corpus) and recipe["mechanism"] == "grape-m"
    text = TextTokens.from_corpus(str(corpus), base.tokenizer)
    cfg = RepositionConfig(context=32, autocast=False)
    expected = held_out_bits(base.model, text.held_out_sequences(32)[:cfg.eval_sequences], cfg)
    assert abs(recipe["log"][0]["held_out_bits"] - expected) < 1e-5
    assert main(args) == 0  # finished: rerunning the same command resumes at the end and ships again
