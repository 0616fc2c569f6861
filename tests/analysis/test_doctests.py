"""Every docstring example in the analyzers and the studies runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [f"repo_lens.analysis.{name}" for name in
           ("boundaries", "categories", "entities", "increments", "lookback", "mass_rows", "position_stats",
            "selection")]
MODULES += [f"repo_lens.studies.{name}" for name in ("runs", "report", "items", "reproductions", "distributed",
                                                     "reproductions.attention", "reproductions.retrieval")]
MODULES += ["repo_lens.train.mixture"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
