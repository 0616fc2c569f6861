"""Fixtures of the studies tests."""

from __future__ import annotations

import pytest

from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model


@pytest.fixture(scope="session")
def byte_model_dir(tmp_path_factory):
    """A random 4-layer byte-level RePo checkpoint (RoPE in layers 0–1), context 512."""
    directory = tmp_path_factory.mktemp("tiny_bytes")
    save_checkpoint(tiny_model("repo", seed=2), directory, info={"name": "tiny"})
    return directory
