"""Studies: analyses run over many prompts or models, resumable, with their tables and figures.

The one home of every batch run in repo_lens; ``repo-lens analyze``, ``repo-lens reproduce`` and the
scripts in ``analyses/`` all go through it.

- :mod:`repo_lens.studies.runs`: resumable item runs (``run.json``, ``items/``, ``results.json``,
  ``results.csv``, ``summary.json``).
- :mod:`repo_lens.studies.report`: tables for the terminal and for files (per-layer position
  summary, records as CSV).
- :mod:`repo_lens.studies.items`: the item builders and summaries of ``repo-lens analyze``
  (NIAH attention mass, position ranges and patterns, Chinese word boundaries).
- :mod:`repo_lens.studies.increment_tables`: seeds/002's three tables on any byte-level lens.
- :mod:`repo_lens.studies.reproductions`: one module per reproduced result of the sources, their
  registry ``STUDIES`` and :func:`~repo_lens.studies.reproductions.reproduce`.
"""
