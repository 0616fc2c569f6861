"""Loading by Hugging Face Hub id, through the real huggingface_hub code, offline: a Hub cache laid out as
huggingface_hub writes it (``models--ORG--NAME/{blobs/<hash>, refs/<name>, snapshots/<commit>/<file> ->
../../blobs/<hash>}``) holds a tiny checkpoint in the published RePo-OLMo2 layout; subprocesses with
``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` pointing at it load it by id, by commit and by tag, and get a
clear error naming the command to run for a missing revision and for a repository not in the cache.
Which files an online load would fetch is checked against a repository listing with extra files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import repo_lens
from hub_helpers import INDEX, PARTIAL, REPO, SHARDED, SHARDS, SINGLE, build_hub_cache, hub_env, write_snapshot
from repo_lens.loading import source_kind
from repo_lens.model.loaders.hf import hub


@pytest.fixture(scope="module")
def hub_cache(repo_dir, tmp_path_factory) -> Path:
    """A Hub cache holding REPO at three commits, built from the published-layout fixture ``repo_dir``."""
    return build_hub_cache(tmp_path_factory.mktemp("hf_home") / "hub", repo_dir, tmp_path_factory.mktemp("shards"))


# run in a fresh interpreter, so that huggingface_hub reads HF_HUB_OFFLINE and HF_HUB_CACHE from its environment
LOADS = r"""
import json, sys
import numpy as np
import repo_lens

repo, reference_dir, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
text = "the needle is in the haystack"
reference = repo_lens.load(reference_dir, device="cpu").trace(text).positions
cases = {"latest": {}, "commit": {"revision": "a" * 40}, "tag": {"revision": "v1.0"},
         "missing_revision": {"revision": "v9.9"}, "partial": {"revision": "partial"},
         "cache_miss": {"repo": "other-org/not-cached"},
         "local_files_only": {"hub_access": repo_lens.HubAccess(local_files_only=True)},
         "local_miss": {"repo": "other-org/not-cached", "hub_access": repo_lens.HubAccess(local_files_only=True)}}
results = {}
for name in wanted:
    options = cases[name]
    try:
        lens = repo_lens.load(options.pop("repo", repo), device="cpu", **options)
        trace = lens.trace(text)
        trace.save(out + f"/{name}.safetensors")
        saved = repo_lens.Trace.load(out + f"/{name}.safetensors")
        results[name] = {"lens_hub": lens.meta["hub"], "name": lens.meta["name"], "source": lens.meta["source"],
                         "trace_hub": trace.meta["hub"], "saved_hub": saved.meta["hub"],
                         "same_positions": bool(np.array_equal(trace.positions, reference)),
                         "files": [str(path) for path in repo_lens.checkpoint_files(repo, **options)]}
    except repo_lens.RepoLensError as error:
        results[name] = {"error": type(error).__name__, "message": str(error)}
print(json.dumps(results))
"""


def _run_loads(cache: Path, repo_dir: Path, out: Path, offline: bool, cases: list[str]) -> dict:
    result = subprocess.run([sys.executable, "-c", LOADS, REPO, str(repo_dir), str(out), ",".join(cases)],
                            env=hub_env(cache, offline),
                            capture_output=True, text=True, timeout=600, cwd=out)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def offline_loads(hub_cache, repo_dir, tmp_path_factory) -> dict:
    cases = ["latest", "commit", "tag", "missing_revision", "partial", "cache_miss"]
    return _run_loads(hub_cache, repo_dir, tmp_path_factory.mktemp("offline"), offline=True, cases=cases)


@pytest.mark.slow
def test_load_by_id_takes_main_and_records_the_commit(offline_loads, hub_cache):
    latest = offline_loads["latest"]
    expected = {"repo_id": REPO, "revision": "main", "commit": SHARDED}
    assert latest["lens_hub"] == latest["trace_hub"] == latest["saved_hub"] == expected
    assert latest["name"] == REPO
    assert latest["same_positions"]  # the sharded snapshot (symlinks into blobs/) loads the same model
    snapshot = hub_cache / "models--test-org--tiny-repo" / "snapshots" / SHARDED
    assert Path(latest["source"]) == snapshot
    assert [Path(path).name for path in latest["files"][:4]] == ["config.json", INDEX, *SHARDS]


@pytest.mark.parametrize("case, revision", [("commit", SINGLE), ("tag", "v1.0")])
def test_load_by_commit_or_tag(offline_loads, case, revision):
    loaded = offline_loads[case]
    assert loaded["trace_hub"] == loaded["saved_hub"] == {"repo_id": REPO, "revision": revision, "commit": SINGLE}
    assert loaded["same_positions"]
    assert Path(loaded["source"]).name == SINGLE


def test_a_missing_revision_names_the_cached_ones_and_the_command(offline_loads, hub_cache):
    error = offline_loads["missing_revision"]
    assert error["error"] == "InputError"
    folder = hub_cache / "models--test-org--tiny-repo"
    assert error["message"] == (
        f"revision 'v9.9' of {REPO} is not in the Hugging Face cache at {folder} (cached: main -> bbbbbbbbbbbb, "
        f"partial -> cccccccccccc, v1.0 -> aaaaaaaaaaaa); run `{hub.hub_cli('download')} {REPO} --revision v9.9` "
        "with network access, or unset HF_HUB_OFFLINE")


def test_a_repository_not_in_the_cache_names_the_command(offline_loads, hub_cache):
    error = offline_loads["cache_miss"]
    assert error["error"] == "InputError"
    assert error["message"] == (
        f"other-org/not-cached is not in the Hugging Face cache at {hub_cache}; run "
        f"`{hub.hub_cli('download')} other-org/not-cached` with network access, or unset HF_HUB_OFFLINE")


def test_an_incomplete_snapshot_names_the_missing_shards(offline_loads):
    error = offline_loads["partial"]
    assert error["error"] == "InputError"
    assert f"the cached snapshot of {REPO} at commit {PARTIAL}" in error["message"]
    assert f"lacks {SHARDS[0]}, {SHARDS[1]}; run `{hub.hub_cli('download')} {REPO} --revision {PARTIAL}`" in \
        error["message"]


@pytest.mark.slow
def test_local_files_only_reads_the_cache_without_offline_mode(hub_cache, repo_dir, tmp_path):
    """HF_HUB_OFFLINE=0 and local_files_only=True: no network call, the same snapshot; a miss says how to fetch it."""
    loads = _run_loads(hub_cache, repo_dir, tmp_path, offline=False, cases=["local_files_only", "local_miss"])
    assert loads["local_files_only"]["trace_hub"]["commit"] == SHARDED
    assert loads["local_files_only"]["same_positions"]
    assert loads["local_miss"]["message"] == (
        f"other-org/not-cached is not in the Hugging Face cache at {hub_cache}; run "
        f"`{hub.hub_cli('download')} other-org/not-cached` with network access, or load without "
        "HubAccess(local_files_only=True)")


@pytest.mark.slow
def test_cli_trace_by_hub_id(hub_cache, tmp_path):
    out = tmp_path / "trace.safetensors"
    command = [sys.executable, "-m", "repo_lens.cli", "trace", "--model", REPO, "--revision", "v1.0", "--device",
               "cpu", "--text", "the cat sat on the mat", "--save", str(out)]
    result = subprocess.run(command, env=hub_env(hub_cache), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert repo_lens.Trace.load(out).meta["hub"] == {"repo_id": REPO, "revision": "v1.0", "commit": SINGLE}
    missing = subprocess.run(command[:6] + ["--revision", "v9.9"] + command[8:], env=hub_env(hub_cache),
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert missing.returncode != 0
    assert f"run `{hub.hub_cli('download')} {REPO} --revision v9.9` with network access" in missing.stderr


# ---- which files an online load fetches, and how its errors read (huggingface_hub's download replaced) ----

LISTING = {
    "config.json": b"{}", "generation_config.json": b"{}", "README.md": b"# card", ".gitattributes": b"",
    "tokenizer.json": b"{}", "tokenizer_config.json": json.dumps({"fast_tokenizer_files": ["tokenizer.v2.json"]}),
    "tokenizer.v2.json": b"{}", "special_tokens_map.json": b"{}", "vocab.json": b"{}", "merges.txt": b"",
    "additional_chat_templates/tool_use.jinja": b"",
    INDEX: json.dumps({"weight_map": {"x": SHARDS[0], "y": SHARDS[1]}}),
    SHARDS[0]: b"", SHARDS[1]: b"",
    # what a repository often holds beside the checkpoint, none of which a load reads
    "model.safetensors": b"", "pytorch_model.bin": b"", "pytorch_model.bin.index.json": b"{}",
    "optimizer.pt": b"", "scheduler.pt": b"", "trainer_state.json": b"{}", "training_args.bin": b"",
    "model-q4_k_m.gguf": b"", "onnx/model.onnx": b"", "onnx/config.json": b"{}", "flax_model.msgpack": b"",
    "checkpoint-500/model.safetensors": b"", "checkpoint-500/config.json": b"{}", "original/consolidated.00.pth": b"",
}
NEEDED = {"config.json", INDEX, *SHARDS, "tokenizer.json", "tokenizer_config.json", "tokenizer.v2.json",
          "special_tokens_map.json", "vocab.json", "merges.txt", "additional_chat_templates/tool_use.jinja"}


class FakeHub:
    """Stands in for ``huggingface_hub.snapshot_download`` online: resolves a revision to a commit, filters
    the repository listing with the allow_patterns as huggingface_hub does, and writes the matches into a
    cache laid out like the real one. Records every call."""

    def __init__(self, cache: Path, listing: dict[str, bytes | str], commit: str = "d" * 40):
        self.cache, self.listing, self.commit, self.calls = cache, listing, commit, []

    def __call__(self, repo_id, *, revision, allow_patterns, token, local_files_only):
        from huggingface_hub.utils import filter_repo_objects

        self.calls.append({"revision": revision, "allow_patterns": allow_patterns, "token": token})
        wanted = list(filter_repo_objects(self.listing, allow_patterns=allow_patterns))
        files = {name: data.encode() if isinstance(data, str) else data for name, data in self.listing.items()
                 if name in wanted}
        storage = self.cache / ("models--" + repo_id.replace("/", "--"))
        present = {path.relative_to(storage / "snapshots" / self.commit).as_posix()
                   for path in (storage / "snapshots" / self.commit).rglob("*")} if storage.exists() else set()
        write_snapshot(self.cache, repo_id, self.commit, {k: v for k, v in files.items() if k not in present})
        return str(storage / "snapshots" / self.commit)

    def fetched(self) -> set[str]:
        snapshot = self.cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / self.commit
        return {path.relative_to(snapshot).as_posix() for path in snapshot.rglob("*") if not path.is_dir()}


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub

    fake = FakeHub(tmp_path / "hub", LISTING)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setattr(hub, "_offline_mode", lambda: False)
    return fake


def test_only_the_files_a_load_reads_are_fetched(fake_hub):
    snapshot = hub.download_snapshot(REPO, token="hf_secret")
    assert fake_hub.fetched() == NEEDED
    first, second = fake_hub.calls
    assert first["revision"] == "main" and set(first["allow_patterns"]) == set(hub.INDEX_FILES)
    assert second["revision"] == fake_hub.commit  # pinned to what the first step resolved, not 'main' again
    assert first["token"] == second["token"] == "hf_secret"
    assert snapshot.meta() == {"repo_id": REPO, "revision": "main", "commit": fake_hub.commit}


def test_a_single_file_checkpoint_fetches_model_safetensors(fake_hub):
    fake_hub.listing = {name: data for name, data in LISTING.items() if name not in (INDEX, *SHARDS)}
    hub.download_snapshot(REPO, revision="v1.0")
    assert fake_hub.fetched() == (NEEDED - {INDEX, *SHARDS}) | {"model.safetensors"}


def test_a_repository_with_only_pickled_weights_is_refused(fake_hub):
    fake_hub.listing = {name: data for name, data in LISTING.items()
                        if not name.endswith(".safetensors") and name != INDEX}
    with pytest.raises(repo_lens.CheckpointError, match=r"has no model\.safetensors; repo_lens loads .*pickled .bin "
                                                        r"weights are never loaded"):
        hub.download_snapshot(REPO)
    assert "pytorch_model.bin" not in fake_hub.fetched()


def test_a_repository_without_config_is_not_a_checkpoint(fake_hub):
    fake_hub.listing = {"model-q4_k_m.gguf": b"", "README.md": b""}
    with pytest.raises(repo_lens.CheckpointError, match=r"has no config\.json; .*For a GGUF file, download it with"):
        hub.download_snapshot(REPO)
    assert fake_hub.fetched() == set()


def _hub_error(name: str):
    from huggingface_hub import errors

    cls = getattr(errors, name)
    error = cls.__new__(cls)  # their constructors want an HTTP response; the type is what is translated
    Exception.__init__(error, "401 Client Error")
    return error


@pytest.mark.parametrize("name, message", [
    ("GatedRepoError", r"test-org/tiny-repo is gated: accept its conditions at https://huggingface.co/test-org/"
                       r"tiny-repo with your account, then pass hub_access=HubAccess\(token='hf_\.\.\.'\) to "
                       r"load\(\), set HF_TOKEN, or run `(hf auth|huggingface-cli) login`"),
    ("RepositoryNotFoundError", r"'test-org/tiny-repo' is neither a local directory nor a Hub repository this "
                                r"account can see; check the name, or if the repository is private pass "
                                r"hub_access=HubAccess\(token="),
    ("RevisionNotFoundError", r"the Hub repository test-org/tiny-repo has no revision 'nope'; pass a branch, a tag "
                              r"or a full commit hash that exists"),
])
def test_hub_errors_say_what_to_do(monkeypatch, name, message):
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise _hub_error(name)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(repo_lens.InputError, match=message):
        repo_lens.load(REPO, revision="nope")


def test_other_errors_pass_through(monkeypatch):
    import huggingface_hub

    def fail(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(MemoryError):
        hub.download_snapshot(REPO)


# ---- what a source string means ----

def test_an_existing_local_directory_wins_over_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert source_kind(REPO) == "hub"
    (tmp_path / REPO).mkdir(parents=True)
    assert source_kind(REPO) == "path"
    assert source_kind(Path(REPO)) == "path"  # a Path object is always a path
    with pytest.raises(repo_lens.CheckpointError, match="not a checkpoint directory: it has no config.json"):
        repo_lens.load(REPO, device="cpu")


@pytest.mark.parametrize("source", ["a/b/c", "./org/name", "/abs/org", "org/na me", "org--x/name", "gpt2"])
def test_a_string_that_is_no_path_zoo_name_or_hub_id(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert source_kind(source) == "path"
    with pytest.raises(repo_lens.CheckpointError, match=r"does not exist; pass a checkpoint directory or \.gguf "
                                                        r"file, 'zoo:NAME' or a Hugging Face Hub id 'org/name'"):
        repo_lens.load(source, device="cpu")


@pytest.mark.parametrize("revision, message", [
    ("../../etc", "is not a branch, tag or commit name"), ("", "is not a branch, tag or commit name"),
    (3, "not int"),
])
def test_bad_revisions(revision, message):
    with pytest.raises(repo_lens.InputError, match=message):
        repo_lens.load(REPO, revision=revision)


def test_a_revision_with_a_local_source_is_an_error(repo_dir):
    with pytest.raises(repo_lens.InputError, match="revision='main' applies only to a Hugging Face Hub id"):
        repo_lens.load(repo_dir, revision="main")

