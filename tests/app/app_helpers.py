"""Fixtures and helpers of the app tests: tiny random checkpoints under a temporary root (never the
zoo), and readers of what the app rendered in an AppTest.

A module, not a conftest.py: tests elsewhere do ``from conftest import ...``, which a second conftest
on sys.path would shadow. Test modules import the fixtures they use from here."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from repo_lens.cli import APP_SCRIPT

APP = APP_SCRIPT  # the script `repo-lens app` serves
CONTEXT = 1024
SHORT_CONTEXT = 256


@pytest.fixture(scope="session")
def checkpoint_root(tmp_path_factory) -> Path:
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    root = tmp_path_factory.mktemp("app-checkpoints")
    for mechanism in ("repo", "rope"):
        model = tiny_model(mechanism, n_layers=3, d_model=32, n_heads=2, context=CONTEXT)
        save_checkpoint(model, root / f"tiny-{mechanism}", info={"name": f"tiny-{mechanism}"})
    # the zoo byte models' context: too short for a NIAH prompt and for the Chinese sample
    save_checkpoint(tiny_model("repo", n_layers=2, d_model=32, n_heads=2, context=SHORT_CONTEXT), root / "tiny-short",
                    info={"name": "tiny-short"})
    (root / "not-a-checkpoint").mkdir()
    (root / "not-a-checkpoint" / "notes.txt").write_text("hello")
    return root


@pytest.fixture
def app_env(monkeypatch, checkpoint_root):
    """The app reads only the temporary root; the zoo looks empty, so no test depends on it. The model box's
    cached list (kept 60 s per roots) is cleared before and after, so no test sees the zoo another one saw."""
    import repo_lens.zoo
    from repo_lens.app import cache

    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(checkpoint_root))
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(checkpoint_root / "tiny-repo"))
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: [])
    monkeypatch.setattr(repo_lens.zoo, "zoo_entries", lambda: [])  # nor the external models (smollm2-135m)
    cache.get_model_sources.clear()
    yield checkpoint_root
    cache.get_model_sources.clear()


@pytest.fixture
def app(app_env):
    from streamlit.testing.v1 import AppTest

    def make() -> AppTest:
        return AppTest.from_file(str(APP), default_timeout=180)

    return make


def figures(at) -> list[dict]:
    """The plotly figures the app sent, as dicts (plotly's base64 typed arrays decoded to lists)."""
    return [_decode(json.loads(element.proto.spec)) for element in at.get("plotly_chart")]


def _decode(value):
    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
            if "shape" in value:
                shape = value["shape"]
                array = array.reshape([int(n) for n in (shape.split(",") if isinstance(shape, str) else shape)])
            return array.tolist()
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def chart_configs(at) -> list[dict]:
    """The plotly config of each chart the app sent (modebar options, the export file name)."""
    return [json.loads(element.proto.config) for element in at.get("plotly_chart")]


def messages(at, kind: str) -> list[str]:
    return [element.value for element in getattr(at, kind)]


def assert_clean(at) -> None:
    """No traceback reached the page."""
    assert not at.exception, [e.value for e in at.exception]
