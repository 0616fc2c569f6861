"""A Hugging Face Hub cache laid out as huggingface_hub writes it, for the offline Hub tests (tests/model/test_hub.py,
the app's Hub id box): ``models--ORG--NAME/{blobs/<hash>, refs/<name>, snapshots/<commit>/<file> ->
../../blobs/<hash>}``, holding a tiny checkpoint in the published RePo-OLMo2 layout at three commits.

A module, not a conftest.py (see tests/app/app_helpers.py): test modules import what they use from here."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from safetensors.torch import load_file, save_file

REPO = "test-org/tiny-repo"
SINGLE = "a" * 40  # the first commit: one model.safetensors (tagged v1.0)
SHARDED = "b" * 40  # main: the same weights in two shards
PARTIAL = "c" * 40  # branch 'partial': the index is cached but not the shards (an interrupted download)
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX = "model.safetensors.index.json"
ROOT = Path(__file__).resolve().parents[1]


def _blob_name(data: bytes, lfs: bool) -> str:
    """The blob file name huggingface_hub uses: an LFS file's sha256, else the git blob sha1."""
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_snapshot(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], refs: tuple[str, ...] = ()) -> Path:
    """Add ``files`` as commit ``commit`` of ``repo_id`` to the Hub cache ``cache``, the way huggingface_hub
    stores a download: each file's bytes once in blobs/, a relative symlink to it in snapshots/<commit>/,
    and each ref (branch or tag) a file under refs/ holding the commit hash (no newline)."""
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / commit
    for name, data in files.items():
        blob = storage / "blobs" / _blob_name(data, lfs=name.endswith(".safetensors"))
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (storage / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (storage / "refs" / ref).write_text(commit)
    return snapshot


def build_hub_cache(cache: Path, repo_dir: Path, scratch: Path) -> Path:
    """A Hub cache at ``cache`` holding REPO at three commits (SINGLE tagged v1.0, SHARDED on main, PARTIAL
    on 'partial'), built from the published-layout checkpoint ``repo_dir``; ``scratch`` is a work directory."""
    common = {path.name: path.read_bytes() for path in sorted(repo_dir.iterdir())
              if path.is_file() and path.name != "model.safetensors"}
    write_snapshot(cache, REPO, SINGLE, {**common, "model.safetensors": (repo_dir / "model.safetensors").read_bytes()},
                   refs=("v1.0",))
    weights = load_file(str(repo_dir / "model.safetensors"))
    names = sorted(weights)
    halves = {SHARDS[0]: names[: len(names) // 2], SHARDS[1]: names[len(names) // 2:]}
    sharded = dict(common)
    for shard, keys in halves.items():
        save_file({key: weights[key] for key in keys}, str(scratch / shard), metadata={"format": "pt"})
        sharded[shard] = (scratch / shard).read_bytes()
    index = {"metadata": {}, "weight_map": {key: shard for shard, keys in halves.items() for key in keys}}
    sharded[INDEX] = json.dumps(index).encode()
    write_snapshot(cache, REPO, SHARDED, sharded, refs=("main",))
    write_snapshot(cache, REPO, PARTIAL, {"config.json": common["config.json"], INDEX: sharded[INDEX]},
                   refs=("partial",))
    return cache


def hub_env(cache: Path, offline: bool = True) -> dict[str, str]:
    """The environment of a subprocess whose huggingface_hub reads only the Hub cache ``cache`` (offline by default)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(cache.parent), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1" if offline else "0",
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(ROOT))
    if offline:
        env["TRANSFORMERS_OFFLINE"] = "1"
    return env
