"""Resumable batch runs: one JSON file per finished item, then results.json + results.csv (+ summary.json)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from repo_lens.atomic import atomic_write_bytes, ensure_dir, run_lock
from repo_lens.errors import InputError
from repo_lens.studies.report import records_to_csv

Item = tuple[str, Callable[[], dict[str, Any]]]


def _safe_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", key)


def run_items(out_dir: str | Path, items: Sequence[Item], settings: dict[str, Any], progress: bool = True,
              desc: str = "analyze") -> list[dict[str, Any]]:
    """Run each (key, compute) item not already finished in ``out_dir`` and collect all records.

    An interrupted run resumes where it stopped: finished items are read back, not recomputed.
    ``settings`` are stored in run.json; resuming with different settings is refused, so results
    of two configurations never mix. One process writes into ``out_dir`` at a time (the ranks of
    one distributed run share it): a second is refused with :class:`repo_lens.RunInUseError`.

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> records = run_items(out, [("a", lambda: {"x": 1})], {"kind": "demo"}, progress=False)
    >>> records, sorted(p.name for p in Path(out).iterdir())
    ([{'item': 'a', 'x': 1}], ['items', 'results.csv', 'results.json', 'run.json'])
    """
    with run_lock(out_dir):
        return _run_items(Path(out_dir), items, settings, progress, desc)


def _run_items(out: Path, items: Sequence[Item], settings: dict[str, Any], progress: bool,
               desc: str) -> list[dict[str, Any]]:
    ensure_dir(out / "items")
    run_file = out / "run.json"
    finished = any((out / "items").iterdir())
    if run_file.exists() and finished:
        previous = json.loads(run_file.read_text())
        if previous != json.loads(json.dumps(settings)):
            raise InputError(
                f"{out} holds a run with other settings ({previous}); use another --out directory or delete it"
            )
    else:
        atomic_write_bytes(run_file, json.dumps(settings, indent=2).encode())
    records = []
    bar = tqdm(items, desc=desc, unit="item", disable=not progress)
    for key, compute in bar:
        path = out / "items" / f"{_safe_key(key)}.json"
        if path.exists():
            record = json.loads(path.read_text())
        else:
            record = {"item": key, **compute()}
            atomic_write_bytes(path, json.dumps(record, indent=2, default=_plain).encode())
            record = json.loads(path.read_text())
        records.append(record)
    atomic_write_bytes(out / "results.json", json.dumps(records, indent=2).encode())
    atomic_write_bytes(out / "results.csv", records_to_csv(records).encode())
    return records


def write_summary(out_dir: str | Path, summary: dict[str, Any]) -> Path:
    """Write a run's pooled result to ``out_dir/summary.json`` (atomically); returns the path.

    >>> import tempfile
    >>> import json, tempfile
    >>> json.loads(write_summary(tempfile.mkdtemp(), {"mean": 0.5}).read_text())
    {'mean': 0.5}
    """
    path = Path(out_dir) / "summary.json"
    atomic_write_bytes(path, json.dumps(summary, indent=2, default=_plain).encode())
    return path


def _plain(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a result record")
