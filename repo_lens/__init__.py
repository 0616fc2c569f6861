"""repo_lens: look at the positions language models learn.

Example:
    >>> import repo_lens
    >>> lens = repo_lens.load("zoo:bytes-repo")  # a shipped model; or a checkpoint folder, a .gguf file, a Hub id
    >>> trace = lens.trace("The needle is in the haystack")
    >>> trace.positions.shape                    # (layer, head, token): 6 layers, 4 heads, 29 byte tokens
    (6, 4, 29)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from repo_lens.errors import (CheckpointError, ContextLengthError, InputError, MemoryLimitError, RepoLensError,
                              RunInUseError, TraceFileError, WriteError)

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.loading import HubAccess, checkpoint_files, load, source_kind
    from repo_lens.trace import Trace

__all__ = ["CheckpointError", "ContextLengthError", "HubAccess", "InputError", "Lens", "MemoryLimitError", "RepoLensError",
           "RunInUseError", "Trace", "TraceFileError", "WriteError", "analysis", "checkpoint_files", "data",
           "interventions", "load", "plots", "source_kind", "studies", "zoo"]
__version__ = "0.1.0"
# torch and transformers load only when a model or trace is used, so the numpy-only analyzers import fast
# (the TYPE_CHECKING imports above name the same modules, for type checkers and tests/test_architecture.py)
_LAZY_EXPORTS = {"Lens": "repo_lens.lens", "Trace": "repo_lens.trace", "load": "repo_lens.loading",
                 "checkpoint_files": "repo_lens.loading", "source_kind": "repo_lens.loading",
                 "HubAccess": "repo_lens.loading"}
# `import repo_lens` then `repo_lens.plots.export(...)` works without importing the subpackage first
_LAZY_SUBPACKAGES = ("analysis", "data", "interventions", "plots", "studies", "zoo")


def __getattr__(name: str) -> Any:
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"repo_lens.{name}")
    raise AttributeError(f"module 'repo_lens' has no attribute {name!r}")
