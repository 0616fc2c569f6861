"""The settings the grids share (``GridOptions``), and the previous release's call forms, still accepted.

``ablation_grid``, ``patch`` and ``attribute`` take their less common settings in one typed
:class:`GridOptions`; the keywords they replaced (``tokens=``, ``align=``, ``batch_size=``, ``progress=``,
``also=``), the modes' own settings passed beside the mode (``seed=``, ``reference=``) and the
positional construction of the package's dataclasses keep working for one release, with a
DeprecationWarning naming the new form.

Example:
    >>> GridOptions(tokens="needle", progress=False).batch_size
    16
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from repo_lens.errors import InputError
from repo_lens.inputs import check_batch_size
from repo_lens.options import warn_deprecated
from repo_lens.interventions.metrics import Metric
from repo_lens.interventions.modes import Mean, Mode, parse_mode
from repo_lens.validation import check_int

F = TypeVar("F", bound=Callable[..., Any])
# which tokens an edit or a patch writes: a slice, an index or indices, a span name of a Prompt ("needle",
# "~needle", "rest") or several names; None: every token (see repo_lens.interventions.edit_targets)
TokenSelection = slice | int | str | Sequence[int] | Sequence[str] | np.ndarray | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class GridOptions:
    """How a grid runs (``ablation_grid``, ``patch``, ``attribute``).

    ``tokens``: edit or patch only these tokens' entries (a slice, indices, a span name of a Prompt such as
    "needle", "~needle" or "rest"; see ``repo_lens.interventions.edit_targets``).
    ``align``: how a clean and a corrupted prompt line up (``patch``, ``attribute``): None or "index"
    (token by token), or span names, e.g. ["needle", "query", "answer"].
    ``batch_size``: cells per batched forward pass (``patch``, ``ablation_grid``).
    ``progress``: a progress bar over the batches (``patch``, ``ablation_grid``).
    ``also``: further metrics measured on the same runs, by name (``patch``, ``ablation_grid``; their grids
    in ``result.also``).
    """

    tokens: TokenSelection = None
    align: str | Sequence[str] | None = None
    batch_size: int = 16
    progress: bool = True
    also: Mapping[str, Metric] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", check_batch_size(self.batch_size))
        if not isinstance(self.progress, bool):
            raise InputError(f"progress must be True or False, got {self.progress!r}")
        if self.also is not None and not isinstance(self.also, Mapping):
            raise InputError(f"also must be a mapping of names to metrics, e.g. {{'exact': niah_exact_match(p)}}; "
                             f"got {type(self.also).__name__}")

    def refuse(self, function: str, *names: str) -> None:
        """An InputError when a setting ``function`` has no use for (one of ``names``) is not its default."""
        defaults = GridOptions()
        for name in names:
            if getattr(self, name) != getattr(defaults, name):
                raise InputError(f"{function} has no use for GridOptions({name}=...): "
                                 f"{_WHERE_USED[name]}; leave it out")


_WHERE_USED = {"align": "align lines up two prompts, for patch and attribute",
               "batch_size": "batch_size and also are for the batched grids (patch, ablation_grid); attribute "
                             "runs one forward and one backward pass",
               "also": "batch_size and also are for the batched grids (patch, ablation_grid); attribute runs "
                       "one forward and one backward pass"}


def with_mode_settings(mode: Any, function: str, **settings: Any) -> Mode:
    """``mode`` parsed, with ``seed`` and ``reference`` passed beside it (the previous release's form) moved
    into it, and a DeprecationWarning naming the mode to pass instead.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     with_mode_settings("shuffle", "ablate", seed=3)
    Shuffle(seed=3)
    """
    parsed = parse_mode(mode)
    seed, reference = settings.get("seed"), settings.get("reference")
    changes: dict[str, Any] = {}
    if "seed" in settings:
        seed = check_int(seed, "seed", minimum=0)
        if parsed.draws:
            changes["seed"] = seed
    if reference is not None and isinstance(parsed, Mean):
        changes["reference"] = reference
    updated = dataclasses.replace(cast(Any, parsed), **changes) if changes else parsed
    shown = ", ".join(f"{name}=..." if name == "reference" else f"{name}={value!r}" for name, value in changes.items())
    instead = (f"pass mode={type(updated).__name__}({shown})" if changes
               else f"{type(parsed).__name__}() draws nothing and has no reference: leave it out")
    warn_deprecated(f"{function}({', '.join(f'{name}=' for name in settings)}) is deprecated: a mode carries its "
                    f"own settings; {instead}")
    return updated


def old_call_forms(*, keep: int = 0, positional: Sequence[str] = (), mode_keywords: Sequence[str] = (),
                   option_keywords: Sequence[str] = (), mode_at: int | None = None) -> Callable[[F], F]:
    """Accept the previous release's call forms of the decorated function, each with a DeprecationWarning:
    positional arguments after the first ``keep`` taken as the keywords ``positional`` (in order);
    ``mode_keywords`` (``seed``, ``reference``) moved into the mode (the keyword ``mode``, or the
    positional argument ``mode_at``); ``option_keywords`` into ``options=GridOptions(...)``."""

    def decorate(function: F) -> F:
        name = function.__name__

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if len(args) > keep and positional:
                extra = positional[:len(args) - keep]
                warn_deprecated(f"{name}() takes {keep} arguments by position; pass "
                                f"{', '.join(f'{item}=' for item in extra)} by keyword")
                kwargs.update(zip(extra, args[keep:]))
                args = args[:keep]
            moved = {key: kwargs.pop(key) for key in list(kwargs) if key in mode_keywords}  # in the caller's order
            if moved:
                if mode_at is not None and len(args) > mode_at:
                    args = (*args[:mode_at], with_mode_settings(args[mode_at], name, **moved), *args[mode_at + 1:])
                else:
                    kwargs["mode"] = with_mode_settings(kwargs.get("mode"), name, **moved)
            options = {key: kwargs.pop(key) for key in list(kwargs) if key in option_keywords}
            if options:
                if kwargs.get("options") is not None:
                    raise InputError(f"{name}: pass the settings either in options=GridOptions(...) or as the "
                                     f"keywords {sorted(options)}, not both")
                kwargs["options"] = GridOptions(**options)
                warn_deprecated(f"{name}({', '.join(f'{key}=' for key in options)}) is deprecated; pass options="
                                f"GridOptions({', '.join(f'{key}=...' for key in options)})")
            return function(*args, **kwargs)

        return cast(F, wrapper)

    return decorate
