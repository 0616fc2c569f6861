"""Weight names translated by an ordered list of (regex, replacement) rules: the first that matches wins."""

from __future__ import annotations

import re
from collections.abc import Iterable

Rules = list[tuple[re.Pattern, str]]


def compile_rules(pairs: Iterable[tuple[str, str]]) -> Rules:
    """Rules from (pattern, replacement) pairs, each pattern anchored at the start of the name."""
    return [(re.compile("^" + pattern), replacement) for pattern, replacement in pairs]


def rename_by_rules(name: str, rules: Rules) -> str:
    """``name`` rewritten by the first rule that matches it (unchanged when none does).

    >>> rename_by_rules("lm_head.weight", compile_rules([(r"lm_head\\.", "unembed.")]))
    'unembed.weight'
    """
    for pattern, replacement in rules:
        renamed, count = pattern.subn(replacement, name)
        if count:
            return renamed
    return name
