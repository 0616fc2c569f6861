"""GGUF files load through the strict Llama adapter: a tiny GGUF written like llama.cpp's converter
round-trips to the original weights, matches transformers' own GGUF load, and bad files are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("gguf", reason="the GGUF path needs the 'gguf' package: pip install gguf accelerate")

import repo_lens  # noqa: E402
from gguf_fixture import tiny_llama, write_gguf  # noqa: E402
from repo_lens.errors import CheckpointError  # noqa: E402


@pytest.fixture(scope="module")
def original():
    return tiny_llama(seed=3)


@pytest.fixture(scope="module")
def gguf_path(original, tmp_path_factory):
    return write_gguf(original, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_gguf_round_trips_to_the_original_weights_and_matches_transformers(original, gguf_path):
    from transformers import AutoModelForCausalLM

    lens = repo_lens.load(gguf_path, device="cpu")
    ids = torch.randint(0, original.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    hf = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                              attn_implementation="eager").eval()
    with torch.no_grad():
        ours, theirs, source = lens.model(ids), hf(ids).logits, original(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    # q/k rows were permuted for ggml's rotary layout on writing and un-permuted on loading
    torch.testing.assert_close(ours, source, atol=1e-4, rtol=0)
    cfg = lens.model.cfg
    assert (cfg.family, cfg.n_heads, cfg.n_kv_heads, cfg.rope_theta) == ("llama", 4, 2, 50000.0)
    assert cfg.rms_norm_eps == pytest.approx(1e-5) and cfg.tie_word_embeddings
    assert lens.model.unembed.weight.data_ptr() == lens.model.embed.weight.data_ptr()
    assert lens.meta["format"] == "gguf-llama" and lens.meta["gguf"]["add_bos_token"] is False


def test_gguf_tokenizer_and_trace(gguf_path):
    lens = repo_lens.load(gguf_path, device="cpu")
    trace = lens.trace("the cat the")
    assert trace.tokens[0] == "t" and trace.tokens[-1] == " the"  # no BOS: the GGUF says add_bos_token=False
    assert trace.layer_kinds == ["rope", "rope"]
    np.testing.assert_array_equal(trace.positions[1, 3], np.arange(len(trace), dtype=np.float32))


def test_surplus_gguf_tensor_is_refused(original, tmp_path):
    path = write_gguf(original, tmp_path / "surplus.gguf",
                      extra_tensors={"blk.0.attn_gate_extra.weight": np.zeros((4, 4), np.float32)})
    with pytest.raises(CheckpointError, match="refusing to drop"):
        repo_lens.load(path, device="cpu")


def test_missing_gguf_tensor_is_named(original, tmp_path):
    path = write_gguf(original, tmp_path / "missing.gguf", drop=("blk.1.ffn_up.weight",))
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        repo_lens.load(path, device="cpu")


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    from repo_lens.model.loaders.hf.gguf import load_gguf

    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf at all")
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        load_gguf(fake, device="cpu")
