"""``repo-lens analyze`` from Python: a registered study over a whole corpus (or over its own items),
resumable, shared among torchrun / accelerate ranks, its records a Parquet dataset.

Every document of the corpus is analysed unless a selection is asked for (``limit``: the first N,
``sample`` + ``seed``: N at random); a document longer than the window is cut into windows
(:mod:`repo_lens.data.windows`), never truncated; an empty document is skipped and counted. The
documents go in shards of ``shard_size``: each shard's records are written to
``OUT/records/part-NNNNNN.parquet`` as soon as it is done, so an interrupted run resumes at the
first unfinished shard, and the ranks of a distributed run share the unfinished shards. The summary
streams over the records; ``OUT/summary.json`` holds it with the run's counts (documents analysed,
skipped, cut, windows, tokens), and a small run (at most ``SMALL_RUN`` records) also gets
``results.json`` and ``results.csv``.

Example:
    >>> import tempfile
    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> lens = Lens(tiny_model("repo", context=64), ByteTokenizer())
    >>> texts = ["A first document, longer than one window of 64 bytes: it is cut into two.", "", "Short."]
    >>> result = analyze(lens, "positions", texts, out=tempfile.mkdtemp(), run=RunOptions(progress=False))
    >>> {key: result.counts[key] for key in ("documents_analysed", "documents_skipped", "documents_cut", "windows")}
    {'documents_analysed': 2, 'documents_skipped': 1, 'documents_cut': 1, 'windows': 3}
    >>> result.records()[["document", "window", "token_start", "token_end"]].values.tolist()
    [[0, 0, 0, 64], [0, 1, 64, 73], [2, 0, 0, 6]]
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from repo_lens.atomic import atomic_write_bytes, ensure_dir
from repo_lens.data.corpus_sources import Corpus, Selection, open_corpus
from repo_lens.data.windows import (
    WINDOW_COLUMNS,
    Window,
    WindowSpec,
    document_windows,
    special_prefix,
)
from repo_lens.errors import InputError, RepoLensError
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.inputs import check_batch_size
from repo_lens.protocol import LensProtocol
from repo_lens.run_lock import run_lock
from repo_lens.studies import distributed
from repo_lens.studies.distributed import Ranks, idle_ranks_warning, ranks_from_env, share, shard_size_for_ranks
from repo_lens.studies.registry import Study, get_study
from repo_lens.studies.report import records_to_csv
from repo_lens.studies.resumable import claim_run, write_summary
from repo_lens.studies.shards import (
    RECORDS,
    SHARDS,
    chosen_shard_size,
    done_shards,
    harmonize,
    iter_records,
    read_records,
    record_files,
    shard_counts,
    write_shard,
)
from repo_lens.validation import check_int

if TYPE_CHECKING:
    import pandas

SMALL_RUN = 1000  # records up to which a run also writes results.json and results.csv
RUN_FORMAT = 2  # run.json's layout: Parquet shards (1 was one JSON file per item)
SKIPPED_EXAMPLES = 10  # ids of skipped documents named in the summary


@dataclass(frozen=True)
class Plan:
    """Everything a run fixes before its first shard: the study, its options, the inputs and how they are cut."""

    study: Study
    options: dict[str, Any]
    settings: dict[str, Any]
    shard_size: int
    total: int  # documents selected, or the study's items
    corpus: Corpus | None = None
    selection: Selection | None = None
    items: list[Any] | None = None
    size: int = 0
    stride: int = 0
    prefix: tuple[int, ...] = ()

    @property
    def n_shards(self) -> int:
        return -(-self.total // self.shard_size)

    def shard_length(self, index: int) -> int:
        return min(self.shard_size, self.total - index * self.shard_size)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run of :func:`analyze` goes, besides what it analyses and how documents are cut: which documents
    (``limit``: the first N, or ``sample`` N at random drawn with ``seed``; default all), ``shard_size`` documents
    (or items) per shard (default the study's), ``batch_size`` inputs per forward pass (same records; not part
    of the run's settings), a ``progress`` bar, ``settings`` (more to store in run.json, e.g. the model's name)
    and ``figures`` (write the study's figures, if it has any, as vector PDF and SVG beside summary.json).

    Example:
        >>> RunOptions(sample=100, seed=3, progress=False).shard_size is None
        True
    """

    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    shard_size: int | None = None
    batch_size: int = 1
    progress: bool = True
    settings: Mapping[str, Any] | None = None
    figures: bool = True


@dataclass
class StudyResult:
    """What a run left in ``out``: its ``summary`` (with the ``counts``; None on ranks other than 0) and
    its records, a Parquet dataset (:meth:`records`, :attr:`record_files`)."""

    out: Path
    summary: dict[str, Any] | None
    counts: dict[str, Any] | None = None
    small: bool = False
    written: list[str] = field(default_factory=list)

    @property
    def record_files(self) -> list[Path]:
        return record_files(self.out)

    def records(self, columns: list[str] | None = None) -> pandas.DataFrame:
        """The records as a pandas DataFrame (one row per window or item)."""
        return read_records(self.out, columns)

    def status(self) -> str:
        """One line for the terminal: what was analysed, skipped and cut, and where it went."""
        counts = self.counts or {}
        files = ", ".join(self.written)
        if "documents_selected" not in counts:
            return f"{counts.get('records', 0)} items -> {self.out}/{files}"
        skipped = counts["documents_skipped"]
        reasons = ", ".join(f"{reason}: {n}" for reason, n in counts["skipped_by_reason"].items())
        return (f"{counts['documents_analysed']} of {counts['selection']} analysed"
                f"{f'; {skipped} skipped ({reasons})' if skipped else ''}; {counts['documents_cut']} longer than "
                f"{counts['window_tokens']} tokens cut into windows (stride {counts['stride']}); {counts['windows']} "
                f"windows, {counts['tokens']} tokens -> {self.out}/{files}")


def prepare_corpus(source: Any, study: Study, **fields: Any) -> Corpus:
    """The corpus of a run, opened, counted and checked to hold some text (the study's default corpus when
    ``source`` is None); an InputError before any model loads."""
    if source is None:
        if study.default_corpus is None:
            raise InputError(f"study {study.name} reads a corpus: pass --corpus PATH (corpus=...); {_corpus_fix()}")
        source = study.default_corpus
    corpus = open_corpus(source, **{name: value for name, value in fields.items() if value is not None})
    if corpus.count() == 0 or not any(document.text and document.text.strip() for document in corpus):
        held = f"{corpus.count()} empty document(s)" if corpus.count() else "no documents"
        raise InputError(f"{corpus.description['source']} holds no text ({held}); {_corpus_fix()}")
    return corpus


def _corpus_fix() -> str:
    from repo_lens.data.corpus_sources import FIX

    return FIX


@grouped_keywords("run", RunOptions, names=("limit", "sample", "seed", "shard_size", "settings"))
def plan_run(lens: LensProtocol, study: str | Study, corpus: Any = None, *, options: dict[str, Any] | None = None,
             windows: WindowSpec | None = None, run: RunOptions | None = None, ranks: Ranks | None = None) -> Plan:
    """Check a run's inputs and fix its :class:`Plan` (nothing is written yet): the selection, shard size and
    settings of ``run`` (:class:`RunOptions`). Without ``run.shard_size`` the study's is used, made smaller
    when the ranks of a distributed run (``ranks``, default: the launcher's) would otherwise not all get a
    share."""
    run = options_or_default(run, RunOptions, "run")
    limit, sample, seed, shard_size, settings = run.limit, run.sample, run.seed, run.shard_size, run.settings
    study = get_study(study)
    ranks = ranks_from_env() if ranks is None else ranks
    windows = windows or WindowSpec()
    options = study.resolve_options({**(options or {}), "beyond_context": windows.beyond_context})
    if shard_size is not None:
        shard_size = check_int(shard_size, "--shard-size", minimum=1)
    base = {"format": RUN_FORMAT, "study": study.name, **(settings or {}), "options": options}
    if not study.reads_corpus:
        given = [name for name, value in (("corpus", corpus), ("limit", limit), ("sample", sample)) if value is not None]
        if given:
            raise InputError(f"--{given[0]} applies to studies that read a corpus, not {study.name}, which makes "
                             "its own inputs; leave it out")
        items = list(study.items(lens, options)) if study.items is not None else []
        size = shard_size or shard_size_for_ranks(study.shard_size, len(items), ranks)
        return Plan(study, options, {**base, "shard_size": size, "items": len(items)}, size, len(items), items=items)
    corpus = prepare_corpus(corpus, study)
    selection = Selection(corpus.count(), limit, sample, seed)
    prefix = tuple(special_prefix(lens.tokenizer))
    size, stride = windows.resolve(lens.context_length, len(prefix))
    shard_size = shard_size or shard_size_for_ranks(study.shard_size, selection.size, ranks)
    base.update(shard_size=shard_size, corpus={**corpus.description, "documents": corpus.count()},
                selection={"limit": limit, "sample": sample, "seed": seed if sample else None},
                windows={"size": size, "stride": stride})
    return Plan(study, options, base, shard_size, selection.size, corpus, selection, None, size, stride, prefix)


@grouped_keywords("windows", WindowSpec, names={"window": "size", "stride": "stride", "overlap": "overlap",
                                               "beyond_context": "beyond_context"})
@grouped_keywords("run", RunOptions)
def analyze(lens: LensProtocol, study: str | Study, corpus: Any = None, *, out: str | Path,
            options: dict[str, Any] | None = None, windows: WindowSpec | None = None,
            run: RunOptions | None = None) -> StudyResult:
    """Run ``study`` (a registered name or a :class:`Study`) with ``lens`` over ``corpus`` into ``out``.

    ``corpus``: anything :func:`repo_lens.data.corpus_sources.open_corpus` opens (a path, a glob, a
    named corpus, a list of texts, a Corpus); None for the study's default corpus, or for a study
    that makes its own items. ``windows``: how long documents are cut
    (:class:`repo_lens.data.windows.WindowSpec`: size, stride or overlap, beyond_context; default: windows
    of the model's context, side by side). ``run``: the selection of documents, shards, batch size,
    progress bar, settings to store and figures (:class:`RunOptions`); the figures need Chromium, and one
    that cannot be rendered is named under the summary's ``figures_not_rendered``, with a warning. Rerun
    the same call to resume; under torchrun each rank runs it and computes its share.
    """
    run = options_or_default(run, RunOptions, "run")
    windows = options_or_default(windows, WindowSpec, "windows")
    batch_size = check_batch_size(run.batch_size)
    progress, figures = run.progress, run.figures
    out = Path(out)
    ranks = ranks_from_env()
    plan = plan_run(lens, study, corpus, options=options, windows=windows,
                    run=replace(run, shard_size=chosen_shard_size(out, run.shard_size)), ranks=ranks)
    idle = idle_ranks_warning(plan.n_shards, plan.total, ranks)
    if idle and ranks.is_main:
        warnings.warn(idle, stacklevel=2)
    with run_lock(out), distributed.session() as session:
        ensure_dir(out / SHARDS)
        claim_run(out, plan.settings, started=bool(done_shards(out)))
        pending = [index for index in range(plan.n_shards) if index not in done_shards(out)]
        session.barrier()  # every rank has listed the unfinished shards before any rank writes one
        _run_shards(lens, plan, out, set(share(pending, session.ranks)), batch_size, progress, session.ranks)
        session.barrier()  # every rank has written its share
        missing = sorted(set(range(plan.n_shards)) - done_shards(out))
        if missing:
            raise RepoLensError(f"{len(missing)} shard(s) of {out} were not written (first: {missing[0]}); a rank "
                                "failed: run the same command again to compute only those")
        if not session.ranks.is_main:
            return StudyResult(out, None)
        return _finish(lens, plan, out, figures)


def _shards(plan: Plan, last: int) -> Iterator[tuple[int, list[Any]]]:
    """(index, inputs) of the shards up to ``last``: documents of the selection, or the study's items."""
    source = (plan.selection.documents(plan.corpus) if plan.corpus is not None and plan.selection is not None
              else iter(plan.items or []))
    index, group = 0, []
    for one in source:
        group.append(one)
        if len(group) == plan.shard_size:
            yield index, group
            if index == last:
                return
            index, group = index + 1, []
    if group:
        yield index, group


def _run_shards(lens: LensProtocol, plan: Plan, out: Path, mine: set[int], batch_size: int, progress: bool, ranks: Ranks) -> None:
    """Compute and write this rank's shards, reading the corpus once up to its last one."""
    unit = "doc" if plan.corpus is not None else "item"
    label = f"analyze {plan.study.name}" + (f" [rank {ranks.rank}/{ranks.world_size}]" if ranks.distributed else "")
    total = sum(plan.shard_length(index) for index in mine)
    with tqdm(total=total, desc=label, unit=unit, disable=not progress) as bar:
        if not mine:
            return
        for index, inputs in _shards(plan, max(mine)):
            if index not in mine:
                continue
            done_before = bar.n
            tick = partial(_advance, bar, len(inputs))
            if plan.corpus is not None:
                records, counts = _corpus_shard(lens, plan, inputs, batch_size, tick)
            else:
                records, counts = _study_records(lens, plan, inputs, batch_size, tick), {"items": len(inputs)}
            write_shard(out, index, records, counts)
            bar.update(done_before + len(inputs) - bar.n)  # whole documents again, whatever the rounding


def _advance(bar: tqdm, size: int, share: float) -> None:
    """Move the progress bar by a batch's ``share`` of a shard of ``size`` documents."""
    bar.update(size * share)


def _corpus_shard(lens: LensProtocol, plan: Plan, documents: list, batch_size: int,
                  tick: Callable[[float], Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The records of a shard of documents (one per window) and its counts."""
    counts: dict[str, Any] = {"documents": len(documents), "skipped": {}, "skipped_ids": [], "cut": 0, "windows": 0,
                              "tokens": 0, "tokens_traced": 0}
    windows: list[Window] = []
    for document in documents:
        reason = "no text" if document.text is None else "empty" if not document.text.strip() else None
        cut: list[Window] = []
        if reason is None:
            try:
                cut = document_windows(lens.tokenizer, document, plan.size, plan.stride, list(plan.prefix))
            except InputError:
                reason = "not encodable"
        if reason is not None:
            counts["skipped"][reason] = counts["skipped"].get(reason, 0) + 1
            counts["skipped_ids"] = (counts["skipped_ids"] + [document.id])[:SKIPPED_EXAMPLES]
            continue
        counts["cut"] += len(cut) > 1
        counts["windows"] += len(cut)
        counts["tokens"] += cut[-1].token_end
        counts["tokens_traced"] += sum(len(window.ids) for window in cut)
        windows.extend(cut)
    records = _study_records(lens, plan, windows, batch_size, tick, longest_first=True)
    return [{**window.columns(), **record} for window, record in zip(windows, records)], counts


def _study_records(lens: LensProtocol, plan: Plan, inputs: list, batch_size: int, tick: Callable[[float], Any] | None = None,
                   longest_first: bool = False) -> list[dict]:
    """The study's record of each input, ``batch_size`` inputs per call (the longest windows together);
    ``tick(share)`` after each batch with its share of the inputs (for the progress bar)."""
    order = list(range(len(inputs)))
    if longest_first:
        order.sort(key=lambda index: -len(inputs[index].ids))
    records: list[dict[str, Any]] = [{}] * len(inputs)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        made = plan.study.record(lens, [inputs[index] for index in batch], plan.options)
        if not isinstance(made, list) or len(made) != len(batch) or not all(isinstance(r, dict) for r in made):
            raise RepoLensError(f"study {plan.study.name}'s record returned {type(made).__name__} "
                                f"{len(made) if isinstance(made, list) else ''} for {len(batch)} inputs; return a list "
                                "of one dict per input")
        clash = sorted(set(WINDOW_COLUMNS) & {key for record in made for key in record}) if plan.corpus else []
        if clash:
            raise RepoLensError(f"study {plan.study.name}'s records use the column {clash[0]!r}, which every corpus "
                                f"record has already ({', '.join(WINDOW_COLUMNS)}); rename it")
        for index, record in zip(batch, made):
            records[index] = record
        if tick is not None:
            tick(len(batch) / len(inputs))
    return records


def _finish(lens: LensProtocol, plan: Plan, out: Path, figures: bool = True) -> StudyResult:
    """Rank 0, once every shard is written: one schema over the shards, the counts, the summary streamed
    over the records, the study's figures, and results.json / results.csv for a small run."""
    harmonize(out)
    counts = _merged_counts(plan, shard_counts(out, plan.n_shards))
    body = plan.study.summary(iter_records(out), plan.options) if plan.study.summary else {}
    summary = {"study": plan.study.name, "layer_kinds": getattr(lens, "layer_kinds", None), **body, "counts": counts}
    written = [f"{RECORDS}/ ({len(record_files(out))} Parquet shard(s))"]
    if figures and plan.study.figures is not None:
        summary.update(_write_study_figures(plan, out, summary))
        written += summary["figures"]
    small = counts["records"] <= SMALL_RUN
    if small:
        records = list(iter_records(out))
        atomic_write_bytes(out / "results.json", json.dumps(records, indent=2).encode())
        atomic_write_bytes(out / "results.csv", records_to_csv(records).encode())
        written += ["results.json", "results.csv"]
    write_summary(out, summary)
    return StudyResult(out, summary, counts, small, [*written, "summary.json"])


def _write_study_figures(plan: Plan, out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The study's figures of ``summary`` written to ``out`` (PDF + SVG): ``figures`` (the file names) and, for
    files that could not be rendered (no Chromium), ``figures_not_rendered`` with the reason and a warning."""
    from repo_lens.studies.reproductions.common import write_figures

    assert plan.study.figures is not None  # called for a study with figures
    names, not_rendered = write_figures(out, plan.study.figures(summary, plan.options))
    if not not_rendered:
        return {"figures": names}
    warnings.warn(f"{len(not_rendered)} figure file(s) of {plan.study.name} in {out} not rendered: "
                  f"{next(iter(not_rendered.values()))}", stacklevel=3)
    return {"figures": names, "figures_not_rendered": not_rendered}


def _merged_counts(plan: Plan, shards: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's counts from its shards' counts."""
    total = {key: sum(shard.get(key, 0) for shard in shards) for key in ("records", "documents", "items")}
    if plan.corpus is None or plan.selection is None:
        return {"items": total["items"], "records": total["records"], "shards": len(shards)}
    reasons: dict[str, int] = {}
    for shard in shards:
        for reason, count in shard["skipped"].items():
            reasons[reason] = reasons.get(reason, 0) + count
    skipped = sum(reasons.values())
    selection = plan.selection
    return {
        "documents_in_corpus": selection.total, "selection": selection.describe(),
        "documents_selected": selection.size, "documents_analysed": total["documents"] - skipped,
        "documents_skipped": skipped, "skipped_by_reason": reasons,
        "skipped_examples": [one for shard in shards for one in shard["skipped_ids"]][:SKIPPED_EXAMPLES],
        "documents_cut": sum(shard["cut"] for shard in shards), "windows": sum(shard["windows"] for shard in shards),
        "window_tokens": plan.size, "stride": plan.stride, "tokens": sum(shard["tokens"] for shard in shards),
        "tokens_traced": sum(shard["tokens_traced"] for shard in shards), "records": total["records"],
        "shards": len(shards)}
