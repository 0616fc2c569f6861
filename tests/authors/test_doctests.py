"""The docstring examples of the authors' adapters and mechanisms run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "repo_lens.model.loaders.unpickler", "repo_lens.model.loaders.inert", "repo_lens.model.loaders.grape_names",
    "repo_lens.model.loaders.grape_variant", "repo_lens.model.loaders.grape_config", "repo_lens.model.loaders.grape_notes",
    "repo_lens.model.loaders.renames", "repo_lens.model.loaders.fox", "repo_lens.model.loaders.fox_config",
    "repo_lens.model.loaders.cope_names", "repo_lens.model.loaders.cope_options", "repo_lens.model.loaders.word_tokenizer",
    "repo_lens.model.families", "repo_lens.model.authors.norms", "repo_lens.model.authors.kv_shift",
    "repo_lens.model.authors.rotation", "repo_lens.model.authors.frequencies", "repo_lens.model.authors.phases",
    "repo_lens.model.authors.forget_gates", "repo_lens.model.authors.potentials", "repo_lens.model.authors.gated_additive",
    "repo_lens.model.authors.options", "repo_lens.model.authors.pattern", "repo_lens.model.authors.mechanisms",
    "repo_lens.model.authors.cope_relative", "repo_lens.model.authors.cope_gates",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
