"""What a study of ``repo-lens analyze`` is: :class:`Study` (its items, record and summary in one place)
and :class:`Option` (a setting it takes). :mod:`repo_lens.studies.registry` holds the registered ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from repo_lens.errors import InputError

DEFAULT_SHARD_SIZE = 256  # documents (or items) per Parquet shard: the unit of resume and of sharing among ranks


@dataclass(frozen=True)
class Option:
    """A setting of a study: ``options[name]`` in ``record`` and ``summary``; ``--NAME`` on the command line
    for a built-in study, ``--study-option NAME=VALUE`` for any. ``kind`` is int, float, bool or str (of each
    item when ``many``: a comma-separated list), within [``low``, ``high``] where given.

    Example:
        >>> Option("lengths", [256], "prompt lengths", kind=int, many=True, low=1).parse("512, 1024")
        [512, 1024]
        >>> Option("eps", 0.2, "tolerance", kind=float, low=0).check(-1)
        Traceback (most recent call last):
        repo_lens.errors.InputError: option eps: every value must be within [0, inf], got -1
    """

    name: str
    default: Any
    help: str
    kind: type = str
    many: bool = False
    low: float | None = None
    high: float | None = None
    example: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """The value of ``text`` as given on the command line."""
        if self.kind is bool:
            if text.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise InputError(f"option {self.name}: expected true or false, got {text!r}")
            return text.strip().lower() in ("true", "1", "yes")
        items = [item.strip() for item in text.split(",")] if self.many else [text.strip()]
        if not all(items):
            raise InputError(f"option {self.name}: expected a comma-separated list such as "
                             f"{self.example or self.default}, got {text!r}")
        try:
            values = [self.kind(item) for item in items]
        except ValueError:
            raise InputError(f"option {self.name}: {text!r} is not {'a list of ' if self.many else ''}"
                             f"{self.kind.__name__}") from None
        return self.check(values if self.many else values[0])

    def check(self, value: Any) -> Any:
        """``value`` if it fits the option, else an InputError naming it and what would fit."""
        values = list(value) if self.many and isinstance(value, (list, tuple)) else [value]
        if self.many and not isinstance(value, (list, tuple)):
            raise InputError(f"option {self.name}: expected a list, got {value!r}")
        for one in values:
            number = self.kind in (int, float) and not isinstance(one, bool) and isinstance(one, (int, float))
            if not (number or isinstance(one, self.kind)) or (self.kind is int and isinstance(one, float)):
                raise InputError(f"option {self.name}: expected {self.kind.__name__}, got {one!r}")
            low = -math.inf if self.low is None else self.low
            high = math.inf if self.high is None else self.high
            if number and not low <= one <= high:
                raise InputError(f"option {self.name}: every value must be within [{low:g}, {high:g}], got {one!r}")
        return list(value) if self.many else value


@dataclass(frozen=True)
class Study:
    """A study of ``repo-lens analyze``.

    ``record(lens, inputs, options) -> list[dict]``: one dict of columns per input (scalars, lists,
    numpy arrays or dicts of them), for a batch of inputs that share a forward pass. The inputs are
    :class:`repo_lens.data.windows.Window` s of the corpus (``ids`` to trace; ``document``,
    ``text``, offsets), or, when ``items`` is given, what ``items(lens, options)`` returns.
    ``summary(records, options) -> dict``: the run's result from the records, streamed in order
    (an iterator; hold only running totals to stay in bounded memory). ``options``: the
    :class:`Option` s below, with ``beyond_context`` added (whether inputs may exceed the context).
    ``figures(summary, options) -> {name: plotly Figure}``: the run's figures, written as ``OUT/NAME.pdf``
    and ``OUT/NAME.svg`` after the summary unless figures are turned off (``--no-figures``).
    """

    name: str
    description: str
    record: Callable[[Any, list, dict[str, Any]], list[dict[str, Any]]]
    summary: Callable[[Iterable[dict[str, Any]], dict[str, Any]], dict[str, Any]] | None = None
    items: Callable[[Any, dict[str, Any]], Sequence[Any]] | None = None
    options: tuple[Option, ...] = ()
    default_corpus: str | None = None
    inputs_help: str = "windows of the corpus' documents"
    records_help: str = ""
    shard_size: int = DEFAULT_SHARD_SIZE
    figures: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None

    @property
    def reads_corpus(self) -> bool:
        return self.items is None

    def resolve_options(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every option's value: ``given`` (checked) over the defaults; an unknown name is an InputError."""
        given = dict(given or {})
        known = {option.name: option for option in self.options}
        unknown = sorted(set(given) - set(known) - {"beyond_context"})
        if unknown:
            choices = ", ".join(known) or "none"
            raise InputError(f"study {self.name} has no option {unknown[0]!r}; its options are: {choices}")
        values = {name: option.check(given[name]) if name in given else option.default for name, option in known.items()}
        return {**values, "beyond_context": bool(given.get("beyond_context", False))}
