"""Studies: analyses run over many prompts, texts or whole corpora, resumable, with their tables and figures.

The one home of every batch run in repo_lens; ``repo-lens analyze``, ``repo-lens reproduce`` and the
scripts in ``analyses/`` all go through it.

- :mod:`repo_lens.studies.runner`: :func:`analyze`, a registered study over a whole corpus (streamed,
  cut into windows, nothing dropped in silence) or over its own items; records as Parquet shards
  (:mod:`repo_lens.studies.shards`), the summary with the run's counts; resumable and shared among
  torchrun / accelerate ranks.
- :mod:`repo_lens.studies.registry`: the studies ``analyze`` knows (:class:`Study`, :class:`Option`,
  :func:`register_study`); :mod:`repo_lens.studies.builtin` registers ``niah``, ``positions`` and
  ``boundaries``, whose records and summaries are in :mod:`repo_lens.studies.items`.
- :mod:`repo_lens.studies.resumable`: resumable item runs (``run.json``, ``items/``, ``results.json``,
  ``results.csv``, ``summary.json``) for lists of items, e.g. ``reproduce``'s.
- :mod:`repo_lens.studies.report`: tables for the terminal and for files (per-layer position
  summary, records as CSV).
- :mod:`repo_lens.studies.increment_tables`: the learned-increments post's three tables on any byte-level lens.
- :mod:`repo_lens.studies.reproductions`: one module per reproduced result of the sources, their
  registry ``STUDIES`` and :func:`~repo_lens.studies.reproductions.reproduce`.

Example:
    >>> from repo_lens.studies import Study, register_study, analyze, open_corpus
    >>> callable(analyze), Study.__name__
    (True, 'Study')
"""

from __future__ import annotations

from typing import Any

from repo_lens.studies.registry import get_study, register_study, study_names
from repo_lens.studies.study import Option, Study

_LAZY = {"analyze": "repo_lens.studies.runner", "StudyResult": "repo_lens.studies.runner",
         "RunOptions": "repo_lens.studies.runner", "WindowSpec": "repo_lens.data.windows",
         "trace_windows": "repo_lens.studies.items", "open_corpus": "repo_lens.data.corpus_sources",
         "Corpus": "repo_lens.data.corpus_sources", "Window": "repo_lens.data.windows"}

__all__ = ["Corpus", "Option", "RunOptions", "Study", "StudyResult", "Window", "WindowSpec", "analyze", "get_study", "open_corpus",
           "register_study", "study_names", "trace_windows"]


def __getattr__(name: str) -> Any:
    """``analyze``, ``open_corpus`` and the rest load with their modules on first use (torch, pyarrow)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'repo_lens.studies' has no attribute {name!r}")
