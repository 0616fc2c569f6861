"""Every docstring example in the analyzers runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["boundaries", "categories", "entities", "increments", "lookback", "position_stats", "selection"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"repo_lens.analysis.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
