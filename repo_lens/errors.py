"""Exceptions raised for bad input. Each message says what was wrong and what would be right."""

from __future__ import annotations


class RepoLensError(Exception):
    """Base class of every error repo_lens raises on purpose."""


class CheckpointError(RepoLensError, ValueError):
    """A checkpoint directory cannot be loaded faithfully (not a checkpoint, bad config,
    missing or surplus weights, unsupported mechanism)."""


class InputError(RepoLensError, ValueError):
    """Bad input to a public function (empty text, too long text, bad index, bad array)."""


class TraceFileError(RepoLensError, ValueError):
    """A file that is not a readable repo_lens trace (corrupt, truncated or foreign)."""
