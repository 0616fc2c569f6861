"""Shared fixtures: tiny checkpoints written by stock transformers (never by repo_lens itself)."""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from safetensors.torch import load_file, save_file

WORDS = ("the a needle is in haystack what where hidden magic number special text of and to "
         "hello world , . ? ! cat dog sat on mat").split()


def write_word_tokenizer(directory: Path) -> None:
    """A word-level HF fast tokenizer (BOS + whitespace/punctuation words), saved like any checkpoint's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<bos>": 1, **{word: index + 2 for index, word in enumerate(WORDS)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<bos>")
    tokenizer.save_pretrained(str(directory))


def tiny_olmo2_config(**overrides):
    from transformers import Olmo2Config

    settings = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                    eos_token_id=0)
    settings.update(overrides)
    return Olmo2Config(**settings)


def save_hf_model(model, directory: Path) -> Path:
    model.save_pretrained(str(directory), safe_serialization=True)
    write_word_tokenizer(directory)
    return directory


def hf_model(config, seed: int = 0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    # HF initialises norms to 1 and small weights; perturb the norms so they are really tested
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    return model.eval()


REPO_START = 2


def add_repo_weights(directory: Path, start: int = REPO_START, seed: int = 1, scale: float = 1.0,
                     pe_config_extra: dict | None = None) -> dict[str, torch.Tensor]:
    """Turn a stock OLMo-2 directory into the published RePo layout: pe_config (with the authors'
    misspelled keys) in config.json, gate/content/final maps for layers >= start in the weights."""
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    d_model, n_heads, n_layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    config["pe_config"] = {
        "dynamic_pe_mode": "swigluex_multihead",
        "dynamic_pe_start_layer": start,
        "dynmaic_pe_start_layer": start,
        "dynamic_pe_layer_ids": "",
        "dynmaic_pe_layer_ids": "",
        **(pe_config_extra or {}),
    }
    config_path.write_text(json.dumps(config, indent=2))
    weights = load_file(str(directory / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    d_position = d_model // 8
    extra = {}
    for layer in range(start, n_layers):
        prefix = f"model.layers.{layer}.self_attn."
        extra[prefix + "gate_map.weight"] = torch.randn(d_position, d_model, generator=generator) * scale / d_model**0.5
        extra[prefix + "content_map.weight"] = torch.randn(d_position, d_model, generator=generator) * scale / d_model**0.5
        extra[prefix + "final_map.weight"] = torch.randn(n_heads, d_position, generator=generator) * scale
    weights.update(extra)
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return extra


@pytest.fixture(scope="session")
def olmo2_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("olmo2")
    return save_hf_model(hf_model(tiny_olmo2_config()), directory)


@pytest.fixture(scope="session")
def repo_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("repo_olmo2")
    save_hf_model(hf_model(tiny_olmo2_config(), seed=3), directory)
    add_repo_weights(directory)
    return directory


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> Path:
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
                         eos_token_id=0)
    directory = tmp_path_factory.mktemp("llama")
    return save_hf_model(hf_model(config, seed=5), directory)


@pytest.fixture(scope="session")
def byte_model_dir(tmp_path_factory):
    """A random 4-layer byte-level RePo checkpoint (RoPE in layers 0–1), context 512 (the studies tests)."""
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    directory = tmp_path_factory.mktemp("tiny_bytes")
    save_checkpoint(tiny_model("repo", seed=2), directory, info={"name": "tiny"})
    return directory


PUBLISHED_SHAPE_TOKENS = 4096


def published_shape_text(n_bytes: int = PUBLISHED_SHAPE_TOKENS, seed: int = 0) -> str:
    """Exactly ``n_bytes`` ASCII characters of seeded random words and sentences (one byte token each)."""
    import random

    rng = random.Random(seed)
    words = [word for word in WORDS if word.isalpha()]
    pieces: list[str] = []
    length = 0
    while length < n_bytes:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + ". "
        pieces.append(sentence)
        length += len(sentence)
    return "".join(pieces)[:n_bytes]


@pytest.fixture(scope="session")
def published_shape_dir(tmp_path_factory) -> Path:
    """A random byte-level checkpoint of SakanaAI/RePo-OLMo2-1B-stage2-L5's shape: 16 layers × 16 heads,
    RoPE in layers 0–4, RePo in 5–15, context 8192, d_model 128 (``repo-lens tiny DIR --shape olmo2-1b``)."""
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import published_shape_model

    directory = tmp_path_factory.mktemp("published_shape")
    save_checkpoint(published_shape_model(), directory, info={"name": "tiny-olmo2-1b-shape"})
    return directory


@pytest.fixture(scope="session")
def published_shape_trace(published_shape_dir):
    """A 4,096-token trace of ``published_shape_dir`` (positions (16, 16, 4096)), built once (~4 s on 2 cores)."""
    import repo_lens

    lens = repo_lens.load(published_shape_dir, device="cpu")
    return lens.trace(published_shape_text(), progress=False)


@contextmanager
def within(seconds: int):
    """Fail, instead of hanging the suite, when a call blocks (a FIFO read, /dev/zero)."""
    def expire(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
