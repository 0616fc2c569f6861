"""The app's model box takes a Hugging Face Hub id (and a revision), read through the real huggingface_hub
code offline from a Hub cache laid out as huggingface_hub writes it (tests/hub_helpers.py): the Hub cache is
not under the app's roots and needs not be; a missing revision, a repository not in the cache and a string that
is no Hub id are messages on the page, never a traceback; model info comes from the snapshot's headers; the
cache keys carry the commit the id resolved to."""

from __future__ import annotations

from pathlib import Path

import pytest

from app_helpers import (  # noqa: F401  (fixtures)
    app,
    app_env,
    assert_clean,
    checkpoint_root,
    figures,
    messages,
)
from hub_helpers import PARTIAL, REPO, SHARDED, SHARDS, SINGLE, build_hub_cache
from repo_lens.app import cache, config
from repo_lens.app.sidebar import HUB
from repo_lens.model.loaders.hf import hub

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def hub_cache(repo_dir, tmp_path_factory) -> Path:
    return build_hub_cache(tmp_path_factory.mktemp("hf_home") / "hub", repo_dir, tmp_path_factory.mktemp("shards"))


@pytest.fixture
def offline_hub(hub_cache, monkeypatch) -> Path:
    """huggingface_hub reads ``hub_cache`` only (it reads its cache folder and offline mode at each call)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cache.get_hub_snapshot.clear()
    yield hub_cache
    cache.get_hub_snapshot.clear()


def _type_hub_id(app, repo_id: str, revision: str = ""):
    at = app().run()
    at.selectbox(key="model_a").set_value(HUB).run()
    at.text_input(key="model_a_revision").input(revision)
    at.text_input(key="model_a_hub").input(repo_id).run()
    return at


@pytest.mark.parametrize("revision, commit", [("", SHARDED), ("v1.0", SINGLE), (SINGLE, SINGLE)])
def test_a_hub_id_typed_in_the_sidebar_is_traced(app, app_env, offline_hub, revision, commit):
    assert not Path(offline_hub).resolve().is_relative_to(app_env.resolve())  # the Hub cache is not under a root
    at = _type_hub_id(app, REPO, revision)
    assert_clean(at)
    assert not messages(at, "error"), messages(at, "error")
    label = f"{REPO}@{revision}" if revision else REPO
    assert label in at.markdown[0].value and "4 layers" in at.markdown[0].value
    assert len(figures(at)) == 1
    captions = [caption.value for caption in at.caption]
    assert any(text.startswith(f"commit {commit[:12]} · 4×4 · ctx 128") for text in captions), captions


def test_model_info_and_cache_keys_come_from_the_snapshot(offline_hub):
    sharded = offline_hub / "models--test-org--tiny-repo" / "snapshots" / SHARDED
    assert cache.source_stamp(REPO) == SHARDED and cache.source_stamp(f"{REPO}@v1.0") == SINGLE
    info = cache.get_model_info(REPO, SHARDED)
    assert (info.n_layers, info.n_heads, info.context) == (4, 4, 128)
    assert info.megabytes == pytest.approx(sum((sharded / shard).stat().st_size for shard in SHARDS) / 1e6)
    assert info.parameters == cache.get_model_info(f"{REPO}@v1.0", SINGLE).parameters  # same weights, one file
    lens = cache.get_lens(f"{REPO}@v1.0", SINGLE)
    assert lens.meta["hub"] == {"repo_id": REPO, "revision": "v1.0", "commit": SINGLE}


def test_a_missing_revision_is_the_loaders_message(app, app_env, offline_hub):
    at = _type_hub_id(app, REPO, "v9.9")
    assert_clean(at)
    folder = offline_hub / "models--test-org--tiny-repo"
    expected = (f"Hub model {REPO}: revision 'v9.9' of {REPO} is not in the Hugging Face cache at {folder} (cached: "
                "main -> bbbbbbbbbbbb, partial -> cccccccccccc, v1.0 -> aaaaaaaaaaaa); run "
                f"`{hub.hub_cli('download')} {REPO} --revision v9.9` with network access, or unset HF_HUB_OFFLINE")
    assert messages(at, "error") == [expected]
    assert not figures(at) and any("Pick a model" in text for text in messages(at, "info"))


@pytest.mark.parametrize("repo_id, revision, message", [
    ("other-org/not-cached", "", "other-org/not-cached is not in the Hugging Face cache at {cache}; run "
                                 "`{download} other-org/not-cached` with network access, or unset HF_HUB_OFFLINE"),
    (REPO, "partial", f"the cached snapshot of {REPO} at commit {PARTIAL}"),
    ("not a repo", "", "'not a repo' is not a Hugging Face Hub model id; type it as org/name, e.g. "
                       "SakanaAI/RePo-OLMo2-1B-stage2-L5"),
    ("a/b/c", "", "'a/b/c' is not a Hugging Face Hub model id"),
    ("/etc", "", "'/etc' is not a Hugging Face Hub model id"),
    (REPO, "../../etc", "revision '../../etc' is not a branch, tag or commit name"),
])
def test_bad_hub_ids_are_messages(app, app_env, offline_hub, repo_id, revision, message):
    at = _type_hub_id(app, repo_id, revision)
    assert_clean(at)
    expected = message.format(cache=offline_hub, download=hub.hub_cli("download"))
    assert any(expected in text for text in messages(at, "error")), messages(at, "error")
    assert not figures(at)


def test_a_hub_id_as_the_default_model(app, app_env, offline_hub, monkeypatch):
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", f" {REPO}@v1.0 ")
    at = app().run()
    assert_clean(at)
    assert at.selectbox(key="model_a").value == f"{REPO}@v1.0"
    assert f"{REPO}@v1.0" in at.markdown[0].value and len(figures(at)) == 1


def test_a_local_directory_named_like_the_hub_id_is_not_read(app, app_env, offline_hub, tmp_path, monkeypatch):
    """repo_lens.load takes an existing relative path for a path: the app, which reads local checkpoints only
    under its roots, refuses rather than load a directory of its working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / REPO).mkdir(parents=True)
    at = _type_hub_id(app, REPO)
    assert_clean(at)
    assert any("is also a directory under the app's working directory" in text for text in messages(at, "error"))
    assert not figures(at)


def test_a_hub_id_typed_as_a_directory_points_to_the_hub_box(app, app_env):
    at = app().run()
    at.selectbox(key="model_a").set_value("Other directory…").run()
    at.text_input(key="model_a_path").input(REPO).run()
    assert_clean(at)
    assert any(f"is a relative path; give an absolute path under {app_env}" in text and
               f"(for the Hugging Face Hub repository {REPO}, pick “{HUB}”)" in text for text in messages(at, "error"))


def test_hub_sources_are_named_and_parsed():
    assert config.hub_source(f"{REPO}@v1.0") == config.hub_source(REPO, " v1.0 ") == f"{REPO}@v1.0"
    assert config.parse_hub_source(f"{REPO}@refs/pr/1") == (REPO, "refs/pr/1")
    assert config.parse_hub_source("zoo:bytes-repo") is None and config.parse_hub_source("/ckpt/org/name") is None
    assert config.source_label(f"{REPO}@v1.0") == f"{REPO}@v1.0" and config.source_label("/ckpt/run") == "run"
