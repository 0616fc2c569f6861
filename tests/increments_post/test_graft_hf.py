"""The post's graft against its own method on a stock transformers Llama (GQA, tied embeddings): the post feeds
the exclusive running sum of δ to ``LlamaForCausalLM`` as float ``position_ids`` beside ``inputs_embeds``;
repo_lens' grafted model must give the same logits."""

from __future__ import annotations

import pytest
import torch

import repo_lens

from .graft_reference import exclusive_positions, graft_state, reference_deltas, write_graft

pytestmark = pytest.mark.slow  # imports transformers


def test_grafted_logits_match_transformers_fed_the_posts_positions(llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    state = graft_state(64, seed=3, scale=0.5)
    state["fc1.weight"] *= 20.0  # its embeddings are small (std 0.02): make δ depend on the token
    graft = write_graft(tmp_path / "delta_mlp.pt", state)
    reference = AutoModelForCausalLM.from_pretrained(str(llama_dir), attn_implementation="eager").eval()
    ids = torch.randint(0, 64, (2, 48), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        embedded = reference.get_input_embeddings()(ids)
        deltas = reference_deltas(state, reference.get_input_embeddings().weight)
        positions = exclusive_positions(deltas[ids]).float()  # [batch, pos], the first token at 0
        expected = reference(inputs_embeds=embedded, position_ids=positions).logits
        integer = reference(inputs_embeds=embedded).logits
        lens = repo_lens.load(llama_dir, device="cpu", graft=graft)
        ours = lens.model(ids)
    assert lens.model.cfg.n_kv_heads == 2 and lens.model.cfg.tie_word_embeddings
    assert float(deltas.std()) > 0.05 and (expected - integer).abs().max() > 1e-3  # 10x the tolerance below
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-4)
