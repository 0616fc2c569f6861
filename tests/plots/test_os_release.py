"""The distribution words the export's install hint reads, from ``platform.freedesktop_os_release()``."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from repo_lens.plots.export import _os_release_ids, browser_install_hint

UBUNTU = '''PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
'''
MINT = "NAME='Linux Mint'\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"


@pytest.fixture
def os_release(tmp_path, monkeypatch):
    """Point the standard library at an os-release file written here (its cache emptied; monkeypatch restores both)."""
    if not hasattr(platform, "_os_release_candidates"):
        pytest.skip("this Python keeps its os-release paths elsewhere")

    def use(text: str) -> None:
        path = tmp_path / "os-release"
        path.write_text(text)
        monkeypatch.setattr(platform, "_os_release_candidates", (str(path),))
        monkeypatch.setattr(platform, "_os_release_cache", None)

    return use


@pytest.mark.parametrize(("text", "words"), [(UBUNTU, {"ubuntu", "debian"}), (MINT, {"linuxmint", "ubuntu", "debian"}),
                                             ("ID=Fedora\n", {"fedora"}),
                                             ("NAME=nothing\n", {"linux"})])  # the ID os-release(5) defaults to
def test_id_and_id_like_words(os_release, text, words):
    os_release(text)
    assert _os_release_ids() == words


def test_the_hint_follows_the_distribution(os_release):
    os_release(UBUNTU)
    assert browser_install_hint("Linux").startswith("On Ubuntu")
    os_release("ID=debian\n")
    assert "apt-get install chromium fonts-wqy-microhei" in browser_install_hint("Linux")


def test_no_os_release_is_no_words(monkeypatch):
    def missing():
        raise OSError("Unable to read files /etc/os-release, /usr/lib/os-release")

    monkeypatch.setattr(platform, "freedesktop_os_release", missing)
    assert _os_release_ids() == set()
    assert browser_install_hint("Linux").startswith("Install Chromium or Google Chrome with your system's")


def test_this_machines_file_read_by_hand():
    path = Path("/etc/os-release")
    if not path.is_file():
        pytest.skip("no /etc/os-release here")
    words = set()
    for line in path.read_text().splitlines():  # KEY=value, the value maybe quoted
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            words |= set(value.strip("\"'").lower().split())
    assert _os_release_ids() == words
