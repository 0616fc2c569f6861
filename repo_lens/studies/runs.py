"""Deprecated: resumable batch runs live in :mod:`repo_lens.studies.resumable`; this module, their former
path, re-exports them for one release and warns when imported."""

from __future__ import annotations

import warnings

from repo_lens.studies.resumable import Item, claim_run, run_items, write_summary

__all__ = ["Item", "claim_run", "run_items", "write_summary"]

warnings.warn("repo_lens.studies.runs is deprecated and stops working in the next release: import from "
              "repo_lens.studies.resumable", DeprecationWarning, stacklevel=2)
