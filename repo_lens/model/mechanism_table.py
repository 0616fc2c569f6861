"""The mechanism table, ``mechanisms.json`` beside this file, and the layer kinds it says were renamed.

The registry (:mod:`repo_lens.model.registry`) builds every kind's traits from :func:`read_table`. A kind
that had another name before declares it in its ``formerly`` trait: the old kind, the block family of the
model configs (``ModelConfig.family``) and the loader format of the traces (``meta["format"]``) that wrote
it so. ``ModelConfig`` and the trace reader map such kinds with :func:`current_kinds`; this module imports
neither torch nor the registry, so that the config can ask it.

Example:
    >>> current_kinds(["rope", "grape-m"], family="authors")
    ['rope', 'grape-m-context']
    >>> current_kinds(["rope", "grape-m"], family="llama")
    ['rope', 'grape-m']
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

TABLE_FILE = Path(__file__).with_name("mechanisms.json")  # the built-in mechanisms' traits, one entry each
DECAYS_SECTION = "decays"  # the section of mechanisms.json that declares the decays (not a kind)


def read_table() -> dict[str, Any]:
    """The parsed ``mechanisms.json``: kind -> its traits, and the decays under ``"decays"`` (a fresh copy).

    >>> table = read_table()
    >>> table["rope"]["module"], "forget" in table["decays"]
    ('repo_lens.model.positions.IntegerPositions', True)
    """
    return json.loads(TABLE_FILE.read_text(encoding="utf-8"))


class Rename(NamedTuple):
    """A kind written as ``old`` before it had its own name, ``new``: in model configs of block family
    ``family`` and in traces of models loaded from format ``format``."""

    old: str
    new: str
    family: str
    format: str


@functools.cache
def renames() -> tuple[Rename, ...]:
    """Every built-in kind's ``formerly`` trait, as :class:`Rename` records.

    >>> [(rename.old, rename.new) for rename in renames()]
    [('grape-m', 'grape-m-context'), ('grape-ap', 'grape-ap-rotated')]
    """
    return tuple(Rename(old=entry["formerly"]["kind"], new=kind, family=entry["formerly"]["family"],
                        format=entry["formerly"]["format"])
                 for kind, entry in read_table().items() if kind != DECAYS_SECTION and entry.get("formerly"))


def current_kinds(kinds: Sequence[str], *, family: str | None = None, source_format: str | None = None) -> list[str]:
    """``kinds`` with every kind that was renamed replaced by its current name, where the model is of block
    ``family`` (a model config) or was loaded from ``source_format`` (a trace's ``meta["format"]``); every
    other kind as it is.

    >>> current_kinds(["grape-m"], source_format="grape"), current_kinds(["grape-m"], source_format="repo_lens")
    (['grape-m-context'], ['grape-m'])
    """
    table = {rename.old: rename for rename in renames()
             if (family is not None and rename.family == family)
             or (source_format is not None and rename.format == source_format)}
    return [table[kind].new if isinstance(kind, str) and kind in table else kind for kind in kinds]


def renamed_message(old: Sequence[str], new: Sequence[str], where: str) -> str:
    """The warning for kinds read under their old names: which kinds, what they are read as, and the fix.

    >>> renamed_message(["rope", "grape-m"], ["rope", "grape-m-context"], "a trace")[:60]
    "layer kind 'grape-m' in a trace is read as 'grape-m-context'"
    """
    pairs = {before: after for before, after in zip(old, new) if before != after}
    names = ", ".join(repr(before) for before in pairs)
    current = ", ".join(repr(after) for after in pairs.values())
    return (f"layer kind {names} in {where} is read as {current}, the kind of the equation it ran there "
            f"({names} names another one); write {current} instead (or save the model or trace again)")
