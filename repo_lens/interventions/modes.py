"""The ablation modes of :func:`repo_lens.interventions.ablate`, parsed and checked."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from repo_lens.errors import InputError

MODES = ("integer", "constant", "mean", "shuffle", "interpolate", "affine", "rank", "scaled", "random", "window")
TARGETS = ("integer", "constant")
DEFAULT_WINDOW = 8  # tokens: "window" permutes positions within consecutive blocks of this many tokens
_HELP = ('mode is one of "integer", "constant", "mean", "shuffle", "affine", "rank", "scaled", "random", '
         '"window" (or ("window", width) with a width of at least 2 tokens), or ("interpolate", p) with p in [0, 1] '
         '(optionally ("interpolate", p, "constant") to move toward a constant instead of the integers)')


@dataclass(frozen=True)
class Mode:
    """A parsed mode: ``name`` in MODES; for "interpolate", ``p`` and the ``toward`` target
    (z' = (1 − p)·z + p·target, the RePo authors' ``dynamic_pe_pdrop`` when toward="integer"); for
    "window", ``width``, the size of the blocks whose tokens are permuted."""

    name: str
    p: float = 1.0
    toward: str = "integer"
    width: int = DEFAULT_WINDOW

    @property
    def label(self) -> str:
        """A short name for tables, e.g. ``interpolate 0.5``."""
        if self.name == "window":
            return f"window {self.width}"
        if self.name != "interpolate":
            return self.name
        return f"interpolate {self.p:g}" + ("" if self.toward == "integer" else f" to {self.toward}")


def parse_mode(mode: Any) -> Mode:
    """``mode`` as a :class:`Mode`; anything else is an InputError that lists the modes.

    >>> parse_mode("integer").name, parse_mode(("interpolate", 0.25)).p
    ('integer', 0.25)
    >>> parse_mode(("interpolate", 1, "constant")).label, parse_mode(("window", 4)).width
    ('interpolate 1 to constant', 4)
    """
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        if mode in MODES and mode != "interpolate":
            return Mode(mode)
        extra = "; interpolate needs p: pass (\"interpolate\", p)" if mode == "interpolate" else ""
        raise InputError(f"unknown mode {mode!r}{extra}; {_HELP}")
    if isinstance(mode, (tuple, list)) and len(mode) in (2, 3) and mode[0] == "interpolate":
        p = mode[1]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0 <= p <= 1:
            raise InputError(f"interpolation weight p must be a number in [0, 1], got {p!r}; {_HELP}")
        toward = mode[2] if len(mode) == 3 else "integer"
        if toward not in TARGETS:
            raise InputError(f"interpolation target {toward!r} is not one of {TARGETS}; {_HELP}")
        return Mode("interpolate", float(p), toward)
    if isinstance(mode, (tuple, list)) and len(mode) == 2 and mode[0] == "window":
        width = mode[1]
        if isinstance(width, bool) or not isinstance(width, int) or width < 2:
            raise InputError(f"window width must be an integer of at least 2 tokens, got {width!r}; {_HELP}")
        return Mode("window", width=width)
    raise InputError(f"unknown mode {mode!r:.60}; {_HELP}")
