"""Options objects: the typed, frozen dataclasses, built by keyword, that group a function's less-used
settings (``SpacedTokensStyle``, ``NiahSpec``, ``RunOptions`` …), the check a function runs on the one it
is given, and the older call forms they replace, which keep working for one release with a
DeprecationWarning that names the options object. Every deprecated form of the package warns through
:func:`warn_deprecated`, and a dataclass now built by keyword keeps its positional form for a release
through :func:`keyword_dataclass`.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Look:
    ...     width: int = 600
    ...     title: str | None = None
    >>> @grouped_keywords("look", Look)
    ... def draw(data: list, *, look: Look | None = None) -> int:
    ...     return options_or_default(look, Look, "look").width
    >>> draw([1], look=Look(width=300))
    300
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     draw([1], width=300)
    300
    >>> print(caught[0].message)
    draw(width=...) is deprecated and goes in the next release; pass look=Look(width=...) instead
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from repo_lens.errors import InputError

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def options_or_default(value: T | None, cls: type[T], name: str) -> T:
    """``value`` when it is a ``cls``, ``cls()`` (every default) for None, else an InputError naming the
    parameter ``name`` and the type it takes.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True, kw_only=True)
        ... class Encoding:
        ...     last_k: int = 1
        >>> options_or_default(None, Encoding, "encoding").last_k
        1
        >>> options_or_default({"last_k": 2}, Encoding, "encoding")
        Traceback (most recent call last):
        repo_lens.errors.InputError: encoding must be a Encoding (e.g. encoding=Encoding(last_k=...)), not dict
    """
    if value is None:
        return cls()
    if not isinstance(value, cls):
        example = next((field.name for field in dataclasses.fields(cls)), "") if dataclasses.is_dataclass(cls) else ""
        raise InputError(f"{name} must be a {cls.__name__} (e.g. {name}={cls.__name__}({example}=...)), "
                         f"not {type(value).__name__}")
    return value


def grouped_keywords(into: str, cls: type, names: Sequence[str] | Mapping[str, str] | None = None
                     ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose keywords ``names`` (default: every field of the dataclass ``cls``; a mapping
    gives old keyword -> field) now live in its parameter ``into``, a ``cls``: a call that still passes them
    gets a DeprecationWarning naming ``cls``, and works as the call with ``into=cls(...)`` of those values.
    Passing both is an InputError. See the module's example."""
    fields = dict(names) if isinstance(names, Mapping) else {name: name for name in
                                                             (names or [f.name for f in dataclasses.fields(cls)])}

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            old = [name for name in fields if name in kwargs]
            if old:
                if kwargs.get(into) is not None:
                    raise InputError(f"{function.__name__}: pass {', '.join(old)} inside {into}={cls.__name__}(...), "
                                     f"not beside it")
                values = {fields[name]: kwargs.pop(name) for name in old}
                shown = ", ".join(f"{name}=..." for name in old)
                given = ", ".join(f"{fields[name]}=..." for name in old)
                warnings.warn(f"{function.__name__}({shown}) is deprecated and goes in the next release; pass "
                              f"{into}={cls.__name__}({given}) instead", DeprecationWarning, stacklevel=_caller())
                kwargs[into] = cls(**values)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def keyword_only(positional: int, names: Sequence[str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose parameters ``names``, once also positional after its first ``positional``
    ones, are now keyword-only: a call that still passes them by position gets a DeprecationWarning and
    works as the call by keyword.

    Example:
        >>> @keyword_only(1, ["device"])
        ... def open_model(source: str, *, device: str = "auto") -> str:
        ...     return f"{source} on {device}"
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", DeprecationWarning)
        ...     open_model("zoo:bytes-repo", "cpu")
        'zoo:bytes-repo on cpu'
    """
    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> R:
            extra = args[positional:]
            if extra:
                if len(extra) > len(names):
                    raise TypeError(f"{function.__name__}() takes {positional + len(names)} positional arguments at "
                                    f"most, and {positional} from the next release; {len(args)} were given")
                moved = dict(zip(names, extra))
                clash = sorted(set(moved) & set(kwargs))
                if clash:
                    raise TypeError(f"{function.__name__}() got multiple values for argument {clash[0]!r}")
                shown = ", ".join(f"{name}=..." for name in moved)
                warnings.warn(f"passing {', '.join(moved)} to {function.__name__}() by position is deprecated and "
                              f"goes in the next release; pass them by keyword ({shown})", DeprecationWarning,
                              stacklevel=_caller())
                args, kwargs = args[:positional], {**kwargs, **moved}
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _caller() -> int:
    """The ``stacklevel`` of the first frame outside this module: the call that used the old form, however many
    of these decorators wrap the function."""
    level, frame = 1, sys._getframe(1)  # level 1: the wrapper that warns
    while frame.f_code.co_filename == __file__ and frame.f_back is not None:
        level, frame = level + 1, frame.f_back
    return level


def warn_deprecated(message: str) -> None:
    """A DeprecationWarning pointing at the first caller outside repo_lens (the call that used the old form).

    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_deprecated("f(x=) is deprecated; pass f(y=)")
    >>> caught[0].category.__name__, str(caught[0].message)
    ('DeprecationWarning', 'f(x=) is deprecated; pass f(y=)')
    """
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("repo_lens."):
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
