"""device="auto" picks CUDA + bf16 when present, else CPU + fp32 (CUDA simulated: no GPU here)."""

from __future__ import annotations

import pytest
import torch

from repo_lens.errors import InputError
from repo_lens.model.loaders.device import resolve_device, resolve_dtype


def test_auto_on_a_machine_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device = resolve_device("auto")
    assert device == torch.device("cpu") and resolve_dtype(None, device) == torch.float32


def test_auto_with_cuda_picks_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    device = resolve_device("auto")
    assert device == torch.device("cuda") and resolve_dtype(None, device) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_dtype(None, device) == torch.float32


def test_explicit_choices_and_errors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(InputError, match="CUDA is not available here"):
        resolve_device("cuda")
    with pytest.raises(InputError, match="unknown dtype 'float8'"):
        resolve_dtype("float8", torch.device("cpu"))
