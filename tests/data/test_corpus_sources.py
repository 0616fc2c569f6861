"""Corpus sources (issue 35): plain text, JSON lines, Parquet, folders, globs and saved datasets, read
lazily; explicit selections; bad input named with its fix."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from repo_lens.data import corpus_sources
from repo_lens.data.corpus_sources import Corpus, Selection, open_corpus
from repo_lens.errors import InputError


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _documents(corpus):
    return [(document.index, document.id, document.text) for document in corpus]


def test_plain_text_is_one_document_per_paragraph_or_per_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("First paragraph,\nstill the first.\n\n\n  \nSecond one.\n\nThird\n", encoding="utf-8")
    assert _documents(open_corpus(path)) == [(0, "notes.txt:1", "First paragraph,\nstill the first."),
                                             (1, "notes.txt:6", "Second one."), (2, "notes.txt:8", "Third")]
    assert _documents(open_corpus(path, text_unit="file")) == [(0, "notes.txt", path.read_text().strip())]


def test_json_lines_name_their_text_and_id_fields_and_keep_empty_rows(tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"body": "one", "n": 7, "extra": {"deep": [1, 2]}}, {"body": None, "n": 8}, {"n": 9}, {"body": "", "n": 10}]
    path.write_text("\n".join(json.dumps(row) for row in rows[:2]) + "\n\n" + json.dumps(rows[2]) + "\n"
                    + json.dumps(rows[3]) + "\n")
    corpus = open_corpus(path, text_field="body", id_field="n")
    assert _documents(corpus) == [(0, "7", "one"), (1, "8", None), (2, "9", None), (3, "10", "")]
    assert corpus.count() == 4 and corpus.description["text_field"] == "body"
    gz = tmp_path / "docs.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [d.text for d in open_corpus(gz, text_field="body")] == ["one", None, None, ""]


def test_a_json_line_longer_than_the_block_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_sources, "JSON_BLOCK", 64)
    path = tmp_path / "long.jsonl"
    texts = ["short", "x" * 500, "after the long one", "y" * 3000, "end"]
    _write_jsonl(path, [{"text": text} for text in texts])
    assert [d.text for d in open_corpus(path)] == texts


def test_parquet_reads_a_batch_at_a_time_and_counts_from_its_metadata(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_sources, "ROWS_PER_BATCH", 2)
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"content": ["a", "b", None, "d", "e"], "other": [1, 2, 3, 4, 5]}), path, row_group_size=2)
    corpus = open_corpus(path, text_field="content")
    assert corpus.count() == 5
    assert _documents(corpus) == [(0, "docs.parquet#0", "a"), (1, "docs.parquet#1", "b"), (2, "docs.parquet#2", None),
                                  (3, "docs.parquet#3", "d"), (4, "docs.parquet#4", "e")]


def test_a_folder_or_glob_of_mixed_files_reads_them_in_path_order(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("B one.\n\nB two.")
    (folder / "sub" / "a.jsonl").write_text('{"text": "A"}\n')
    pq.write_table(pa.table({"text": ["P"]}), folder / "c.parquet")
    (folder / ".hidden.txt").write_text("not read")
    (folder / "_meta.txt").write_text("not read")
    ids = [d.id for d in open_corpus(folder)]
    assert ids == ["b.txt:1", "b.txt:3", "c.parquet#0", "sub/a.jsonl#0"]
    assert [d.text for d in open_corpus(str(folder / "**" / "*.jsonl"))] == ["A"]


def test_a_dataset_saved_to_disk_is_memory_mapped_and_its_split_named(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"text": ["one", None, "three"], "id": ["x", "y", "z"]})
    data.save_to_disk(str(tmp_path / "one"))
    corpus = open_corpus(tmp_path / "one", id_field="id")
    assert corpus.count() == 3 and _documents(corpus) == [(0, "x", "one"), (1, "y", None), (2, "z", "three")]
    datasets.DatasetDict({"train": data, "test": data.select([2])}).save_to_disk(str(tmp_path / "dict"))
    assert [d.id for d in open_corpus(tmp_path / "dict", split="test")] == ["test#0"]
    with pytest.raises(InputError, match="holds the splits train, test; pass --split NAME"):
        open_corpus(tmp_path / "dict")


def test_named_corpora_and_texts_in_memory(monkeypatch):
    from repo_lens.data.corpora import parse_peoples_daily

    sample = parse_peoples_daily(["迈向/v  充满/v  希望/n  。/w"])
    monkeypatch.setattr("repo_lens.data.peoples_daily", lambda *a, **k: sample)
    [document] = list(open_corpus("peoples-daily"))
    assert document.text == "迈向充满希望。" and document.words == ("迈向", "充满", "希望", "。")
    assert _documents(open_corpus(["a", "b"])) == [(0, "#0", "a"), (1, "#1", "b")]
    assert open_corpus(Corpus.from_texts(["x"], ids=["mine"])).count() == 1
    with pytest.raises(InputError, match="do\\(es\\) not apply to brown"):
        open_corpus("brown", text_field="body")


def test_reading_is_lazy_python_memory_stays_small_for_a_large_file(tmp_path):
    path = tmp_path / "big.jsonl"
    _write_jsonl(path, [{"text": f"document {index} " + "z" * 2000} for index in range(4000)])  # 8 MB
    corpus = open_corpus(path)
    next(iter(corpus))  # pyarrow's modules imported before measuring
    tracemalloc.start()
    count = sum(1 for _ in corpus)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 4000 and peak < 3_000_000, peak  # a block of rows at a time (1 MiB), never the whole file


def test_selection_is_explicit_limit_or_seeded_sample_in_corpus_order():
    corpus = open_corpus([f"text {index}" for index in range(20)])
    assert [d.index for d in Selection(20, limit=3).documents(corpus)] == [0, 1, 2]
    drawn = [d.index for d in Selection(20, sample=5, seed=7).documents(corpus)]
    assert drawn == sorted(drawn) and len(set(drawn)) == 5 and drawn == Selection(20, sample=5, seed=7).indices().tolist()
    assert drawn != [d.index for d in Selection(20, sample=5, seed=8).documents(corpus)]
    everything = Selection(20, sample=50)
    assert everything.size == 20 and len(list(everything.documents(corpus))) == 20
    assert everything.describe() == "all 20 documents"
    for bad, message in (({"limit": 0}, "--limit .* >= 1"), ({"sample": -1}, "--sample .* >= 1"),
                         ({"limit": 2, "sample": 2}, "not both"), ({"seed": -1}, "--seed")):
        with pytest.raises(InputError, match=message):
            Selection(20, **bad)


@pytest.mark.parametrize("case", ["missing", "no-field", "not-text", "not-json", "array-line", "bad-parquet",
                                  "latin1", "unknown-suffix", "fifo", "empty-folder", "saved-no-field",
                                  "split-not-saved", "bad-unit", "not-a-path"])
def test_bad_corpora_are_named_with_the_fix(case, tmp_path):
    def make():
        if case == "missing":
            return tmp_path / "nope.jsonl", {}, "no such file or directory; a corpus is"
        if case == "no-field":
            _write_jsonl(tmp_path / "d.jsonl", [{"body": "x", "title": "t"}])
            return tmp_path / "d.jsonl", {}, "has no field 'text'; its fields are: body, title; pass --text-field NAME"
        if case == "not-text":
            pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "d.parquet")
            return tmp_path / "d.parquet", {}, "holds int64, not text; pass --text-field"
        if case == "not-json":
            (tmp_path / "d.jsonl").write_text("plain words\n")
            return tmp_path / "d.jsonl", {}, "is not JSON lines"
        if case == "array-line":
            (tmp_path / "d.jsonl").write_text("[1, 2]\n")
            return tmp_path / "d.jsonl", {}, "holds a JSON list, not an object"
        if case == "bad-parquet":
            (tmp_path / "d.parquet").write_bytes(b"PAR1 not really")
            return tmp_path / "d.parquet", {}, "is not a readable Parquet file"
        if case == "latin1":
            (tmp_path / "d.txt").write_bytes("café\n".encode("latin-1"))
            return tmp_path / "d.txt", {}, "is not UTF-8 text .*iconv"
        if case == "unknown-suffix":
            (tmp_path / "a.txt").write_text("x")
            (tmp_path / "b.csv").write_text("x")
            return tmp_path, {}, "b.csv is not a corpus file .*glob"
        if case == "fifo":
            os.mkfifo(tmp_path / "pipe")
            return tmp_path / "pipe", {}, "is not a regular file"
        if case == "empty-folder":
            (tmp_path / "empty").mkdir()
            return tmp_path / "empty", {}, "holds no files"
        if case == "saved-no-field":
            pytest.importorskip("datasets").Dataset.from_dict({"body": ["x"]}).save_to_disk(str(tmp_path / "s"))
            return tmp_path / "s", {}, "has no field 'text'; its fields are: body"
        if case == "split-not-saved":
            (tmp_path / "a.txt").write_text("x")
            return tmp_path / "a.txt", {"split": "train"}, "applies to a dataset saved with save_to_disk"
        if case == "bad-unit":
            return tmp_path, {"text_unit": "sentence"}, "is not one of paragraph, file"
        return 42, {}, "not int"

    source, options, message = make()
    with pytest.raises(InputError, match=message):
        list(open_corpus(source, **options))

