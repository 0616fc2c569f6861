"""Resumable batch runs: one JSON file per finished item, then results.json + results.csv (+ summary.json)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from repo_lens.atomic import atomic_write_bytes, ensure_dir
from repo_lens.errors import InputError, RepoLensError
from repo_lens.run_lock import run_lock
from repo_lens.studies import distributed
from repo_lens.studies.distributed import Session, share
from repo_lens.studies.report import records_to_csv

Item = tuple[str, Callable[[], dict[str, Any]]]


def _safe_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", key)


def run_items(out_dir: str | Path, items: Sequence[Item], settings: dict[str, Any], progress: bool = True,
              desc: str = "analyze", block: int = 1) -> list[dict[str, Any]]:
    """Run each (key, compute) item not already finished in ``out_dir`` and collect all records.

    An interrupted run resumes where it stopped: finished items are read back, not recomputed.
    ``settings`` are stored in run.json; resuming with different settings is refused, so results
    of two configurations never mix (before any item is written only ``settings["study"]`` must
    match: a folder holds one study). One process writes into ``out_dir`` at a time (the ranks of
    one distributed run share it): a second is refused with :class:`repo_lens.RunInUseError`.

    Under ``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1) each rank computes its share of
    the unfinished items (:func:`repo_lens.studies.distributed.share`; ``block`` consecutive items
    stay together, e.g. a batch) into the same ``out_dir/items/``; once all are written every rank
    returns all records and rank 0 alone writes results.json / results.csv, the same bytes as one
    process would. A rank killed midway loses only its unfinished items: rerun the same command.

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> records = run_items(out, [("a", lambda: {"x": 1})], {"kind": "demo"}, progress=False)
    >>> records, sorted(p.name for p in Path(out).iterdir())
    ([{'item': 'a', 'x': 1}], ['items', 'results.csv', 'results.json', 'run.json'])
    """
    with run_lock(out_dir), distributed.session() as ranks_of_run:
        return _run_items(Path(out_dir), items, settings, progress, desc, ranks_of_run, block)


def _run_items(out: Path, items: Sequence[Item], settings: dict[str, Any], progress: bool,
               desc: str, session: Session, block: int) -> list[dict[str, Any]]:
    ensure_dir(out / "items")
    claim_run(out, settings, started=any((out / "items").iterdir()))
    paths = [out / "items" / f"{_safe_key(key)}.json" for key, _ in items]
    unique = dict(zip(paths, items))  # a key repeated is computed once
    pending = [(path, key, compute) for path, (key, compute) in unique.items() if not path.exists()]
    session.barrier()  # every rank has listed what is missing before any rank writes an item
    ranks = session.ranks
    label = f"{desc} [rank {ranks.rank}/{ranks.world_size}]" if ranks.distributed else desc
    for path, key, compute in tqdm(share(pending, ranks, block), desc=label, unit="item", disable=not progress):
        record = {"item": key, **compute()}
        atomic_write_bytes(path, json.dumps(record, indent=2, default=_plain).encode())
    session.barrier()  # every rank has written its share
    missing = [path.name for path in unique if not path.exists()]
    if missing:
        raise RepoLensError(f"{len(missing)} item(s) of {out} were not written ({', '.join(missing[:5])}); "
                            "a rank failed: run the same command again to compute only those")
    records = [_read_record(path) for path in paths]
    if ranks.is_main:
        atomic_write_bytes(out / "results.json", json.dumps(records, indent=2).encode())
        atomic_write_bytes(out / "results.csv", records_to_csv(records).encode())
    return records


def claim_run(out: Path, settings: dict[str, Any], started: bool) -> None:
    """Write ``settings`` to ``out/run.json``, or check them against the run already there: resuming
    with other settings is refused once a result is written (``started``), and a folder holds one
    study (``settings["study"]``) even before; before any result the new settings replace the old."""
    run_file = out / "run.json"
    previous = _read_run_json(run_file, "to write the run's settings anew") if run_file.exists() else None
    if previous is not None and previous != json.loads(json.dumps(settings, default=_plain)):
        other_study = not isinstance(previous, dict) or previous.get("study") != settings.get("study")
        if started or other_study:  # a folder holds one study; its settings may change only before any item
            raise InputError(
                f"{out} holds a run with other settings ({previous}); use another --out directory or delete it"
            )
    if previous is None or not started:
        atomic_write_bytes(run_file, json.dumps(settings, indent=2, default=_plain).encode())


def _read_record(path: Path) -> dict[str, Any]:
    record = _read_run_json(path, "to recompute the item")
    if not isinstance(record, dict):
        raise InputError(f"{path} holds no item record (a JSON object); delete it to recompute the item, "
                         "or choose another --out directory")
    return record


def _read_run_json(path: Path, remedy: str) -> Any:
    """A run's JSON file, or an InputError naming it (a corrupt or truncated file is deleted or the run moved)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"{path} is corrupt or truncated ({error}); delete it {remedy}, "
                         "or choose another --out directory") from None


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
    """JSON's ``default``: numpy arrays and scalars as lists and numbers; anything else is refused."""
    from repo_lens.studies.shards import plain_value

    converted = plain_value(value)
    if converted is value:
        raise TypeError(f"cannot store {type(value).__name__} in a result record")
    return converted
