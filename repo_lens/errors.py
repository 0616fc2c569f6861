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


class WriteError(RepoLensError, OSError):
    """A file could not be written (no space, file too large, permission denied, read-only file
    system, a directory in the way). The message names the path, the cause and the remedy; the
    previous file is intact. ``errno`` is the operating system's code when there was one."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MemoryLimitError(RepoLensError, MemoryError):
    """A forward pass ran out of memory (CPU or GPU). The message names the text length, about how
    much the call needed and the remedies; the model is unchanged and can be used again."""


class RunInUseError(RepoLensError, RuntimeError):
    """Another process is writing into the same run directory; the message names it (pid, host, command)."""
