"""Exceptions raised for bad input. Each message says what was wrong and what would be right."""

from __future__ import annotations


class RepoLensError(Exception):
    """Base class of every error repo_lens raises on purpose."""


class CheckpointError(RepoLensError, ValueError):
    """A checkpoint directory cannot be loaded faithfully (not a checkpoint, bad config,
    missing or surplus weights, unsupported mechanism)."""


class InputError(RepoLensError, ValueError):
    """Bad input to a public function (empty text, too long text, bad index, bad array)."""


class ContextLengthError(InputError):
    """An input longer than the model's context. ``remedies`` names the options that would let it
    run (``truncate``, ``allow_beyond_context``); :meth:`explain` words the message with other names
    for them (the command line's flags).

    >>> ContextLengthError(300, 256, ("allow_beyond_context",)).explain({"allow_beyond_context": "--beyond-context"})
    "the input is 300 tokens, longer than the model's context of 256; shorten it, or pass --beyond-context to run all of them (extrapolation beyond the trained length)"
    """

    def __init__(self, tokens: int, context: int, remedies: tuple[str, ...] = ("truncate", "allow_beyond_context")):
        self.tokens, self.context, self.remedies = tokens, context, tuple(remedies)
        super().__init__(self.explain({name: f"{name}=True" for name in self.remedies}))

    def explain(self, option_names: dict[str, str]) -> str:
        """The message, naming each remedy by ``option_names[remedy]`` (remedies not named are left out)."""
        wordings = {"truncate": "pass {} to keep the first %d tokens" % self.context,
                    "allow_beyond_context": "pass {} to run all of them (extrapolation beyond the trained length)"}
        offered = [wordings[name].format(option_names[name]) for name in self.remedies if name in option_names]
        return (f"the input is {self.tokens} tokens, longer than the model's context of {self.context}; "
                + ", or ".join(["shorten it", *offered]))

    def __reduce__(self):
        return type(self), (self.tokens, self.context, self.remedies)


class TraceFileError(InputError):
    """A file that is not a readable repo_lens trace (corrupt, truncated, foreign or inconsistent);
    the message names the file, the field, what it holds and what a trace holds there."""


class WriteError(RepoLensError, OSError):
    """A file could not be written (no space, file too large, permission denied, read-only file
    system, a directory in the way). The message names the path, the cause and the remedy; the
    previous file is intact. ``errno`` is the operating system's code when there was one."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MemoryLimitError(RepoLensError, MemoryError):
    """A forward pass ran out of memory (CPU or GPU). The message names the text length, about how
    much the call needed and the remedies; the model is unchanged and can be used again."""


class TrainingDivergedError(RepoLensError, FloatingPointError):
    """The training loss became NaN or infinite; the message names the step and the remedy. The run folder keeps
    the state saved before that step, so the same command with a lower learning rate resumes from there."""


class RunInUseError(RepoLensError, RuntimeError):
    """Another process is writing into the same run directory; the message names it (pid, host, command)."""
