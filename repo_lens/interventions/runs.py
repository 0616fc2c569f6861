"""Deprecated: this module moved to :mod:`repo_lens.interventions.edited_runs`, and its ``capture`` is now
``capture_edited``. Its names still work for one release, each with a DeprecationWarning.

Example:
    >>> import warnings
    >>> from repo_lens.interventions import edited_runs, runs
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     moved = runs.as_batch
    >>> moved is edited_runs.as_batch, "repo_lens.interventions.edited_runs" in str(caught[-1].message)
    (True, True)
"""

from __future__ import annotations

from typing import Any

from repo_lens.interventions import edited_runs as _edited_runs
from repo_lens.options import warn_deprecated

_NAMES = ("Batch", "Captured", "Hook", "Input", "Inputs", "Prefix", "alignment", "as_batch", "as_single",
          "block_inputs", "first_changed", "rows_of", "run_from", "run_prefix", "shared_prefix", "suffix_inputs",
          "transplant", "with_unread_rows")


def __getattr__(name: str) -> Any:
    """The names of :mod:`repo_lens.interventions.edited_runs` (``capture``: ``capture_edited``), deprecated here."""
    if name == "capture":
        warn_deprecated("repo_lens.interventions.runs.capture is deprecated; use "
                        "repo_lens.interventions.edited_runs.capture_edited")
        return _edited_runs.capture_edited
    if name in _NAMES:
        warn_deprecated(f"repo_lens.interventions.runs is deprecated; import {name} from "
                        "repo_lens.interventions.edited_runs")
        return getattr(_edited_runs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
