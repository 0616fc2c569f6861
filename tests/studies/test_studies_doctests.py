"""Every docstring example in repo_lens.studies runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["runs", "report", "items", "reproductions"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"repo_lens.studies.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
