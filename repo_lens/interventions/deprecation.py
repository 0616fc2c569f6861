"""The previous release's forms, kept for one release: the DeprecationWarning they give, and the positional
construction of the package's keyword-only dataclasses.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_deprecated("f(x=) is deprecated; pass f(y=)")
    >>> caught[0].category.__name__, str(caught[0].message)
    ('DeprecationWarning', 'f(x=) is deprecated; pass f(y=)')
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from typing import Any, TypeVar, cast

T = TypeVar("T")


def warn_deprecated(message: str) -> None:
    """A DeprecationWarning pointing at the first caller outside ``repo_lens.interventions``."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("repo_lens.interventions"):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]  # None ends the loop
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def keyword_dataclass(cls: type[T]) -> type[T]:
    """For a ``@dataclass(kw_only=True)``: construction by position, the previous release's form, still
    works, with a DeprecationWarning naming the keywords.

    >>> @keyword_dataclass
    ... @dataclasses.dataclass(kw_only=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> Point(x=1)
    Point(x=1, y=0)
    """
    init = cast(Any, cls).__init__
    names = [field.name for field in dataclasses.fields(cast(Any, cls)) if field.init]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__} takes at most {len(names)} arguments ({len(args)} given)")
            given = names[:len(args)]
            for name in given:
                if name in kwargs:
                    raise TypeError(f"{cls.__name__} got {name!r} by position and by keyword")
            warn_deprecated(f"{cls.__name__}(...) by position is deprecated; build it by keyword: "
                            f"{cls.__name__}({', '.join(f'{name}=...' for name in given)})")
            kwargs.update(zip(given, args))
        init(self, **kwargs)

    cast(Any, cls).__init__ = __init__
    return cls
