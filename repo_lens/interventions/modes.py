"""What an edit writes in place of the positions: the ``Mode`` types.

Each mode is a frozen dataclass built by keyword: ``Integer()``, ``Constant()``, ``Mean(reference=...)``,
``Shuffle(seed=...)``, ``Interpolate(p=0.5, toward="constant")``, ``Affine()``, ``Rank()``, ``Scaled()``,
``Random(seed=...)``, ``Window(width=8, seed=...)``, ``Shift(offset=...)`` and ``Stretch(factor=...)``.
The name of a mode without required settings is accepted as a shorthand (``mode="integer"`` is
``Integer()``); :func:`parse_mode` reads either.

Example:
    >>> parse_mode(Interpolate(p=0.25, toward="constant")).label, parse_mode("window")
    ('interpolate 0.25 to constant', Window(width=8, seed=0))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from repo_lens.errors import InputError
from repo_lens.options import warn_deprecated
from repo_lens.validation import check_int

DEFAULT_WINDOW = 8  # tokens: Window permutes positions within consecutive blocks of this many tokens
TARGETS = ("integer", "constant")
Target = Literal["integer", "constant"]
# the names accepted as a shorthand for the mode of that name with its default settings
ModeName = Literal["integer", "constant", "mean", "shuffle", "affine", "rank", "scaled", "random", "window"]
HELP = ("mode is one of Integer(), Constant(), Mean(reference=None), Shuffle(seed=0), Interpolate(p, toward="
        "\"integer\" or \"constant\") with p in [0, 1], Affine(), Rank(), Scaled(), Random(seed=0), Window(width=8, "
        "seed=0) with a width of at least 2 tokens, Shift(offset) or Stretch(factor) (from "
        "repo_lens.interventions), or the name of one without settings, e.g. \"integer\"")


class _ModeCall(type):
    """Lets ``Mode(name, p, toward, width)``, the form of the previous release, build the matching mode."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Mode:
            return _legacy_mode(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Mode(metaclass=_ModeCall):
    """What an edit writes: one of the frozen dataclasses of this module. ``name``: the mode's name;
    ``draws``: whether it draws at random (from its ``seed`` and each prompt's own tokens)."""

    name: ClassVar[str] = ""
    draws: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """A short name for tables, e.g. ``interpolate 0.5``."""
        return self.name


def _seed(value: Any) -> int:
    return check_int(value, "seed", minimum=0)


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} must be a finite number, got {value!r}; {HELP}")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Integer(Mode):
    """The registry's integer values: one unit per token, RoPE's positions 0..T−1."""

    name: ClassVar[str] = "integer"


@dataclass(frozen=True, kw_only=True)
class Constant(Mode):
    """The registry's constant value: no positional signal (NoPE-like)."""

    name: ClassVar[str] = "constant"


@dataclass(frozen=True, kw_only=True, eq=False)
class Mean(Mode):
    """Each token index's mean over ``reference`` (inputs at least as long; None: the inputs themselves).
    Compared by identity: its reference may hold tensors."""

    name: ClassVar[str] = "mean"
    reference: Any = None


@dataclass(frozen=True, kw_only=True)
class Shuffle(Mode):
    """The tokens' values permuted, the same permutation in every layer and head, drawn from ``seed`` and
    each prompt's own tokens."""

    name: ClassVar[str] = "shuffle"
    draws: ClassVar[bool] = True
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", _seed(self.seed))


@dataclass(frozen=True, kw_only=True)
class Interpolate(Mode):
    """z' = (1 − p)·z + p·target, ``toward`` "integer" (the RePo authors' ``dynamic_pe_pdrop``) or "constant".

    >>> Interpolate(p=1, toward="constant").label
    'interpolate 1 to constant'
    """

    name: ClassVar[str] = "interpolate"
    p: float
    toward: Target = "integer"

    def __post_init__(self) -> None:
        p = self.p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0 <= p <= 1:
            raise InputError(f"interpolation weight p must be a number in [0, 1], got {p!r}; {HELP}")
        if self.toward not in TARGETS:
            raise InputError(f"interpolation target {self.toward!r} is not one of {TARGETS}; {HELP}")
        object.__setattr__(self, "p", float(p))

    @property
    def label(self) -> str:
        return f"interpolate {self.p:g}" + ("" if self.toward == "integer" else f" to {self.toward}")


@dataclass(frozen=True, kw_only=True)
class Affine(Mode):
    """Each head's least-squares line a + b·t through its own positions."""

    name: ClassVar[str] = "affine"


@dataclass(frozen=True, kw_only=True)
class Rank(Mode):
    """The positions' order kept, the spacing made even over the head's own range."""

    name: ClassVar[str] = "rank"


@dataclass(frozen=True, kw_only=True)
class Scaled(Mode):
    """The integer positions rescaled to the head's own range [min z, max z]."""

    name: ClassVar[str] = "scaled"


@dataclass(frozen=True, kw_only=True)
class Random(Mode):
    """A control: the positions moved along a random direction as far as :class:`Affine` moves them; a new
    direction in each layer and head, drawn from ``seed`` and each prompt's own tokens."""

    name: ClassVar[str] = "random"
    draws: ClassVar[bool] = True
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", _seed(self.seed))


@dataclass(frozen=True, kw_only=True)
class Window(Mode):
    """A control: the tokens' values permuted within consecutive blocks of ``width`` tokens (at least 2).

    >>> Window(width=4).label
    'window 4'
    """

    name: ClassVar[str] = "window"
    draws: ClassVar[bool] = True
    width: int = DEFAULT_WINDOW
    seed: int = 0

    def __post_init__(self) -> None:
        width = self.width
        if isinstance(width, bool) or not isinstance(width, int) or width < 2:
            raise InputError(f"window width must be an integer of at least 2 tokens, got {width!r}; {HELP}")
        object.__setattr__(self, "seed", _seed(self.seed))

    @property
    def label(self) -> str:
        return f"window {self.width}"


@dataclass(frozen=True, kw_only=True)
class Shift(Mode):
    """z' = z + ``offset``: every position moved by the same amount (a rotation or an additive bias sees only
    differences, so a model whose positions are all relative computes the same up to float rounding).

    >>> Shift(offset=2).label, Shift(offset=-0.5).label
    ('shift +2', 'shift -0.5')
    """

    name: ClassVar[str] = "shift"
    offset: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "offset", _finite(self.offset, "offset"))

    @property
    def label(self) -> str:
        return f"shift {self.offset:+g}"


@dataclass(frozen=True, kw_only=True)
class Stretch(Mode):
    """z' = ``factor``·z: every distance between positions multiplied by ``factor`` (below 1: position
    interpolation, "Extending Context Window of Large Language Models via Positional Interpolation",
    arXiv:2306.15595).

    >>> Stretch(factor=0.5).label
    'stretch 0.5'
    """

    name: ClassVar[str] = "stretch"
    factor: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", _finite(self.factor, "factor"))

    @property
    def label(self) -> str:
        return f"stretch {self.factor:g}"


SHORTHANDS: dict[str, type[Mode]] = {cls.name: cls for cls in (Integer, Constant, Mean, Shuffle, Affine, Rank,
                                                                Scaled, Random, Window)}
MODES = ("integer", "constant", "mean", "shuffle", "interpolate", "affine", "rank", "scaled", "random", "window",
         "shift", "stretch")


def parse_mode(mode: Any) -> Mode:
    """``mode`` as a :class:`Mode`: a mode itself, or the name of a mode without required settings
    (``"integer"``, ``"window"``, …). The tuples of the previous release (``("interpolate", p)``,
    ``("interpolate", p, "constant")``, ``("window", w)``) still work, with a DeprecationWarning naming
    the mode to pass instead; anything else is an InputError that lists the modes.

    >>> parse_mode("integer"), parse_mode(Interpolate(p=0.25)).p
    (Integer(), 0.25)
    """
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        if mode in SHORTHANDS:
            return SHORTHANDS[mode]()
        extra = "; interpolate needs p: pass Interpolate(p=...)" if mode == "interpolate" else ""
        raise InputError(f"unknown mode {mode!r}{extra}; {HELP}")
    if isinstance(mode, (tuple, list)) and len(mode) in (2, 3) and mode[0] == "interpolate":
        toward: Any = mode[2] if len(mode) == 3 else "integer"  # checked by Interpolate
        parsed: Mode = Interpolate(p=mode[1], toward=toward)
    elif isinstance(mode, (tuple, list)) and len(mode) == 2 and mode[0] == "window":
        parsed = Window(width=mode[1])
    else:
        raise InputError(f"unknown mode {mode!r:.60}; {HELP}")
    warn_deprecated(f"mode={tuple(mode)!r} is deprecated; pass mode={parsed!r} "
                    "(from repo_lens.interventions)")
    return parsed


def _legacy_mode(name: str, p: float = 1.0, toward: str = "integer", width: int = DEFAULT_WINDOW) -> Mode:
    """``Mode(name, p, toward, width)`` of the previous release, as the mode of that name."""
    if name == "interpolate":
        mode: Mode = Interpolate(p=p, toward=toward)  # type: ignore[arg-type]  # checked by Interpolate
    elif name == "window":
        mode = Window(width=width)
    else:
        mode = parse_mode(name)
    warn_deprecated(f"Mode({name!r}, ...) is deprecated; build the mode by keyword: {mode!r} "
                    "(from repo_lens.interventions)")
    return mode
