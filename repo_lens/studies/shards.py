"""A study's records as a dataset: Parquet shards written one at a time, read back as one table.

A run directory holds ``records/part-NNNNNN.parquet`` (one per shard of documents that gave records,
written atomically by the rank that computed it) and ``shards/part-NNNNNN.json`` (the shard's counts,
written last: a shard is done when its JSON is there). ``records/`` opens directly as one dataset:
``pandas.read_parquet(OUT / "records")``, ``polars.read_parquet(OUT / "records/*.parquet")``,
``datasets.load_dataset("parquet", data_files=str(OUT / "records/*.parquet"))``.

Example:
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> write_shard(out, 0, [{"n": 1, "by_layer": np.array([0.5, 1.0])}], {"documents": 1})
    >>> write_shard(out, 1, [{"n": 2, "by_layer": None}], {"documents": 1})
    >>> harmonize(out); [record for record in iter_records(out)]
    [{'n': 1, 'by_layer': [0.5, 1.0]}, {'n': 2, 'by_layer': None}]
    >>> sorted(done_shards(out)), read_records(out).shape
    ([0, 1], (2, 2))
"""

from __future__ import annotations

import json
from functools import partial
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens.atomic import atomic_write, atomic_write_bytes
from repo_lens.errors import InputError, RepoLensError

if TYPE_CHECKING:
    import pandas
    import pyarrow

RECORDS, SHARDS = "records", "shards"
READ_BATCH = 1024  # records in memory at a time when streaming them back


def shard_stem(index: int) -> str:
    return f"part-{index:06d}"


def plain_value(value: Any) -> Any:
    """``value`` with numpy arrays and scalars made Python lists and numbers (nested in lists and dicts too)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(key): plain_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (np.ndarray, np.generic, dict, list, tuple)):
        return [plain_value(item) for item in value]
    return list(value) if isinstance(value, tuple) else value


def records_table(records: list[dict[str, Any]]) -> pyarrow.Table:
    """The records as a ``pyarrow.Table``, one column per key any record has (null where one lacks it).

    >>> records_table([{"a": 1}, {"a": 2, "b": "x"}]).to_pylist()
    [{'a': 1, 'b': None}, {'a': 2, 'b': 'x'}]
    """
    import pyarrow as pa

    keys = list(dict.fromkeys(key for record in records for key in record))
    columns = {}
    for key in keys:
        try:
            columns[key] = pa.array([plain_value(record.get(key)) for record in records])
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise RepoLensError(f"the study's column {key!r} holds values Parquet cannot store ({error}); a record "
                                "holds numbers, strings, booleans, numpy arrays, and lists or dicts of them") from None
    return pa.table(columns)


def write_shard(out: Path, index: int, records: list[dict[str, Any]], counts: dict[str, Any]) -> None:
    """Write shard ``index``: its records (when it has any) to ``records/``, then its counts to ``shards/``."""
    import pyarrow.parquet as pq

    stem = shard_stem(index)
    if records:
        table = records_table(records)
        atomic_write(Path(out) / RECORDS / f"{stem}.parquet", lambda temp: pq.write_table(table, temp))
    counts = {**counts, "records": len(records)}
    atomic_write_bytes(Path(out) / SHARDS / f"{stem}.json", json.dumps(counts, indent=1).encode())


def done_shards(out: Path) -> set[int]:
    """Indices of the shards whose counts are written (finished)."""
    folder = Path(out) / SHARDS
    if not folder.is_dir():
        return set()
    return {int(path.stem.removeprefix("part-")) for path in folder.glob("part-*.json")}


def shard_counts(out: Path, count: int) -> list[dict[str, Any]]:
    """The counts of shards 0..count-1, in order."""
    counts = []
    for index in range(count):
        path = Path(out) / SHARDS / f"{shard_stem(index)}.json"
        try:
            one = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
            one = error
        if not isinstance(one, dict):
            why = f"is corrupt or truncated ({one})" if isinstance(one, ValueError) else "holds no shard's counts"
            raise InputError(f"{path} {why}; delete it (and records/{path.stem}.parquet) to recompute that shard, "
                             "or choose another --out directory")
        counts.append(one)
    return counts


def chosen_shard_size(out: Path, shard_size: int | None) -> int | None:
    """``shard_size`` when given; else the shard size of the run already in ``out`` (from its
    ``run.json``), so that a run resumes with the shards it started with, whatever the number of ranks
    now; None for a new run (the study's default then applies).

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> chosen_shard_size(out, None), chosen_shard_size(out, 8)
    (None, 8)
    >>> _ = (out / "run.json").write_text('{"study": "positions", "shard_size": 50}')
    >>> chosen_shard_size(out, None)
    50
    """
    if shard_size is not None:
        return shard_size
    try:
        previous = json.loads((Path(out) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no run yet, or a corrupt run.json, which claiming the run reports
        return None
    size = previous.get("shard_size") if isinstance(previous, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else None


def record_files(out: Path) -> list[Path]:
    """The run's Parquet shards, in order."""
    return sorted((Path(out) / RECORDS).glob("part-*.parquet"))


def harmonize(out: Path) -> None:
    """Give every shard one schema (columns a shard lacks are null; ``null`` and int columns widen as
    needed), rewriting only the shards that differ, so ``records/`` reads as one dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = record_files(out)
    if len(files) < 2:
        return
    schemas = [_read(path, pq.read_schema) for path in files]
    unified = pa.unify_schemas(schemas, promote_options="permissive")
    for path, schema in zip(files, schemas):
        if not schema.equals(unified, check_metadata=False):
            table = pa.Table.from_pylist(pq.read_table(path).to_pylist(), schema=unified)
            atomic_write(path, partial(pq.write_table, table))


def iter_records(out: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The run's records, streamed shard by shard, ``READ_BATCH`` at a time."""
    import pyarrow.parquet as pq

    for path in record_files(out):
        for batch in _read(path, lambda one: pq.ParquetFile(one).iter_batches(batch_size=READ_BATCH, columns=columns)):
            yield from batch.to_pylist()


def _read(path: Path, read: Any) -> Any:
    """``read(path)``, or an InputError naming a shard that is no readable Parquet and the remedy."""
    import pyarrow as pa

    try:
        return read(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path} is not a readable Parquet shard ({error}); delete it and {SHARDS}/{path.stem}.json "
                         "to recompute that shard, or choose another --out directory") from None


def read_records(out: Path, columns: list[str] | None = None) -> pandas.DataFrame:
    """The run's records as one pandas DataFrame (``pandas.read_parquet`` of ``records/``)."""
    import pandas as pd

    if not record_files(out):
        return pd.DataFrame()
    return pd.read_parquet(Path(out) / RECORDS, columns=columns)
