"""The studies ``repo-lens analyze`` runs, in one registry: each declares its items, its record and its summary.

A :class:`Study` is a name, a ``record`` function (a batch of inputs -> one dict of columns each), a
``summary`` (the records, streamed back from the run's Parquet shards -> one JSON-able dict) and,
for a study that does not read a corpus, ``items`` (the inputs it makes itself, e.g. NIAH prompts).
A corpus study's inputs are the windows of the corpus' documents
(:class:`repo_lens.data.windows.Window`). The command line's ``--study`` help, its study flags and
the table of studies in the docs come from here.

Your own study registers from your code and runs through the same command, resume and
distribution: ``repo-lens analyze --study-module mypkg.mystudy --study NAME --corpus DATA --out OUT``
(or from an installed package's entry point in the group ``repo_lens.studies``).

Example:
    >>> import numpy as np
    >>> def record(lens, windows, options):
    ...     traces = lens.trace([w.ids for w in windows], progress=False)
    ...     return [{"last_position": float(t.positions[-1, :, -1].mean())} for t in traces]
    >>> def summary(records, options):
    ...     values = [r["last_position"] for r in records]
    ...     return {"mean_last_position": float(np.mean(values)) if values else None}
    >>> mine = register_study(Study("last-position", "mean position the last layer gives a window's last token",
    ...                             record, summary), replace=True)
    >>> get_study("last-position") is mine, "positions" in study_names()
    (True, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from repo_lens.errors import InputError
from repo_lens.studies.builtin import BUILTIN_STUDIES
from repo_lens.studies.study import DEFAULT_SHARD_SIZE, Option, Study

__all__ = ["DEFAULT_SHARD_SIZE", "ENTRY_POINT_GROUP", "Option", "Study", "get_study", "import_study_modules",
           "register_study", "registered", "study_names", "study_table"]

ENTRY_POINT_GROUP = "repo_lens.studies"


_REGISTRY: dict[str, Study] = {study.name: study for study in BUILTIN_STUDIES}


def register_study(study: Study, *, replace: bool = False) -> Study:
    """Add ``study`` to the registry (a name taken by another study is refused unless ``replace``)."""
    if not isinstance(study, Study):
        raise InputError(f"register_study takes a repo_lens.studies.registry.Study, not {type(study).__name__}")
    if study.name in _REGISTRY and not replace and _REGISTRY[study.name] is not study:
        raise InputError(f"a study named {study.name!r} is registered already; choose another name "
                         "(or pass replace=True)")
    _REGISTRY[study.name] = study
    return study


def registered() -> dict[str, Study]:
    """The registered studies by name (the built-ins first)."""
    return dict(_REGISTRY)


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def study_names() -> list[str]:
    """Names of the registered studies and of those installed packages offer by entry point."""
    names = list(registered())
    return names + [name for name in _entry_points() if name not in names]


def import_study_modules(modules: Iterable[str]) -> None:
    """Import the modules that register studies (``--study-module``); an InputError names a module that fails."""
    for module in modules or ():
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise InputError(f"--study-module {module}: cannot import it ({error}); give an importable module "
                             "(on PYTHONPATH or installed) that calls repo_lens.studies.register_study") from None


def get_study(name: str | Study, modules: Iterable[str] = ()) -> Study:
    """The study called ``name``, after importing ``modules``; an entry point of that name is loaded if
    no module registered it. An unknown name is an InputError listing the choices."""
    if isinstance(name, Study):
        return name
    import_study_modules(modules)
    if name not in registered() and name in _entry_points():
        loaded = _entry_points()[name].load()
        if isinstance(loaded, Study):
            register_study(loaded, replace=True)
    if name not in registered():
        raise InputError(f"argument --study: invalid choice: {name!r} (choose from {', '.join(study_names())}; "
                         "a study of your own: --study-module MODULE that registers it)")
    return registered()[name]


def study_table(studies: dict[str, Study] | None = None) -> str:
    """The Markdown table of the registered studies (or of ``studies``); [Corpus studies][corpus-studies]
    holds the built-ins'.

    >>> print(study_table().splitlines()[0])
    | study | inputs | records | options |
    """
    rows = ["| study | inputs | records | options |", "|---|---|---|---|"]
    for study in (studies if studies is not None else registered()).values():
        options = ", ".join(f"`{option.flag}`" for option in study.options) or "–"
        records = study.records_help or study.description
        rows.append(f"| `{study.name}` | {study.inputs_help} | {records} | {options} |")
    return "\n".join(rows)
