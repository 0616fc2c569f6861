"""The entity-grouping test of "Learned position increments" (Brendan Long): is the space inside "New York"
smaller than inside "York New"?

The post's script (``entity_grouping_analysis.py``) builds, for each of its 79 two-word entities (countries,
cities, people, institutions, places: :data:`ENTITY_PAIRS`) and each of its five carriers ("A B", "the A B",
"I visited A B", "near A B", "they went to A B": :data:`CARRIER_SENTENCES`), the byte string
EOS + carrier, reads δ at the space between the two words, averages it over the carriers, and compares
real with reversed order per entity: a two-sided Wilcoxon signed-rank test on the 79 paired means
(p = 1 where every difference is within 1e-8 of 0, as at a byte-identity layer). Here that is
``entity_grouping_test(real, reversed_, carrier_axis=1)`` on (79, 5, L) arrays. Without ``carrier_axis``
every prompt is one pair (n = entities × carriers), a finer but different test.
:data:`FAKE_ENTITY_PAIRS` are our invented names for the post's negative remark ("Zorblax Quimby").
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.stats import wilcoxon

from repo_lens.analysis._checks import as_char_spans, as_float_array, as_list
from repo_lens.errors import InputError

CARRIER_SENTENCES: tuple[str, ...] = ("{a} {b}", "the {a} {b}", "I visited {a} {b}", "near {a} {b}", "they went to {a} {b}")

ZERO_DIFFERENCE = 1e-8  # the script's np.allclose(diff, 0): differences this small count as none
# and differences within float32 rounding of the values: one byte's δ traced in two sequences of different lengths
# differs by a few ulp (the matrix products take other paths), which is no difference
FLOAT32_ROUNDING = 1e-6

# The post's 79 two-word entities, in its order: ENTITIES in experiments/selective_pe/entity_grouping_analysis.py,
# github.com/brendanlong/learned-position-increments-experiment.
ENTITY_PAIRS: tuple[tuple[str, str], ...] = (
    ("United", "States"), ("United", "Kingdom"), ("South", "Korea"), ("North", "Korea"), ("South", "Africa"),
    ("Saudi", "Arabia"), ("Sri", "Lanka"), ("Costa", "Rica"), ("New", "Zealand"), ("Sierra", "Leone"),
    ("El", "Salvador"), ("Czech", "Republic"), ("Burkina", "Faso"), ("Dominican", "Republic"), ("San", "Marino"),
    ("Great", "Britain"), ("Ivory", "Coast"), ("Cape", "Verde"), ("Hong", "Kong"), ("Puerto", "Rico"),
    ("New", "York"), ("Los", "Angeles"), ("San", "Francisco"), ("Las", "Vegas"), ("New", "Orleans"),
    ("San", "Diego"), ("Santa", "Monica"), ("Buenos", "Aires"), ("Mexico", "City"), ("New", "Delhi"),
    ("Tel", "Aviv"), ("Saint", "Petersburg"), ("Cape", "Town"), ("Kansas", "City"), ("Albert", "Einstein"),
    ("Isaac", "Newton"), ("Marie", "Curie"), ("Charles", "Darwin"), ("William", "Shakespeare"),
    ("Abraham", "Lincoln"), ("George", "Washington"), ("Winston", "Churchill"), ("Nelson", "Mandela"),
    ("Steve", "Jobs"), ("Bill", "Gates"), ("Mark", "Twain"), ("Julius", "Caesar"), ("Thomas", "Edison"),
    ("Martin", "Luther"), ("World", "War"), ("Cold", "War"), ("Wall", "Street"), ("Silicon", "Valley"),
    ("White", "House"), ("Supreme", "Court"), ("United", "Nations"), ("World", "Bank"), ("Red", "Cross"),
    ("Roman", "Empire"), ("Middle", "Ages"), ("Big", "Bang"), ("Black", "Sea"), ("Red", "Sea"),
    ("Mount", "Everest"), ("Niagara", "Falls"), ("Pacific", "Ocean"), ("Atlantic", "Ocean"), ("Indian", "Ocean"),
    ("Great", "Wall"), ("Solar", "System"), ("Milky", "Way"), ("North", "America"), ("South", "America"),
    ("Star", "Wars"), ("Harry", "Potter"), ("New", "Testament"), ("Old", "Testament"), ("Holy", "Land"),
    ("Far", "East"),
)

FAKE_ENTITY_PAIRS: tuple[tuple[str, str], ...] = (
    ("Zorblax", "Quimby"), ("Vendral", "Oskip"), ("Plumford", "Taziel"), ("Gribble", "Nocton"),
    ("Marvex", "Dunhollow"),
)


class EntityPrompt(NamedTuple):
    """One prompt: ``text[boundary]`` is the space between the entity's two words."""

    text: str
    boundary: int
    first: str
    second: str
    carrier: int
    reversed: bool

    @property
    def space_byte(self) -> int:
        """Index of the space in ``text.encode("utf-8")``: where a byte model's increment is read."""
        return len(self.text[: self.boundary].encode("utf-8"))


def entity_prompts(
    pairs: Sequence[tuple[str, str]] = ENTITY_PAIRS, carriers: Sequence[str] = CARRIER_SENTENCES
) -> tuple[list[EntityPrompt], list[EntityPrompt]]:
    """(real, reversed): aligned lists of prompts, one per entity and carrier sentence, with the
    character index of the space between the two words. Score each prompt by the increment of
    the token holding that space (byte models) or of the first token of the second word (subword
    models whose tokens carry the leading space): see :func:`token_at_char`.

    Example:
        >>> real, rev = entity_prompts([("New", "York")], ["I visited {a} {b}"])
        >>> real[0].text, real[0].boundary, rev[0].text
        ('I visited New York', 13, 'I visited York New')
    """
    pairs = [tuple(as_list(pair, "each entity pair", "('New', 'York')")) for pair in
             as_list(pairs, "pairs", "[('New', 'York')]")]
    carriers = as_list(carriers, "carriers", "['I visited {a} {b}']")
    if not pairs or not carriers:
        raise InputError("entity_prompts needs at least one entity pair and one carrier sentence")
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(w, str) and w and " " not in w for w in pair):
            raise InputError(f"entity pair {pair!r} must be two non-empty words without spaces")
    for carrier in carriers:
        if carrier.count("{a} {b}") != 1 or carrier.count("{") != 2:
            raise InputError(f"carrier {carrier!r} must contain '{{a}} {{b}}' exactly once and no other field")
    real: list[EntityPrompt] = []
    rev: list[EntityPrompt] = []
    for a, b in pairs:
        for index, carrier in enumerate(carriers):
            offset = carrier.index("{a} {b}")
            for first, second, out, flipped in ((a, b, real, False), (b, a, rev, True)):
                text = carrier.format(a=first, b=second)
                out.append(EntityPrompt(text, offset + len(first), first, second, index, flipped))
    return real, rev


def token_at_char(token_char_spans: Sequence[tuple[int, int]] | np.ndarray, char: int) -> int:
    """Index of the first token whose (non-empty) char span contains ``char``; if none does
    (tokenizers that trim whitespace from offsets), the first token starting after ``char``.

    Example:
        >>> token_at_char([(0, 3), (3, 8)], 3)   # 'New' + 'ĠYork': the space is in token 1
        1
        >>> token_at_char([(0, 3), (4, 8)], 3)   # trimmed offsets
        1
    """
    if isinstance(char, (bool, np.bool_)) or not isinstance(char, (int, np.integer)) or char < 0:
        raise InputError(f"char must be a character index, an int >= 0; got {char!r:.40}")
    spans = as_char_spans(token_char_spans)
    covering = np.nonzero((spans[:, 0] <= char) & (char < spans[:, 1]))[0]
    if covering.size:
        return int(covering[0])
    after = np.nonzero((spans[:, 0] > char) & (spans[:, 1] > spans[:, 0]))[0]
    if after.size:
        return int(after[0])
    raise InputError(f"no token covers or follows char {char}; the text was probably truncated")


@dataclass(frozen=True)
class EntityGroupingResult:
    """Real vs reversed increments at the entity's word boundary; arrays have the inputs'
    trailing shape (e.g. (L, H)), ``differences`` the full (n, ...) shape."""

    mean_real: np.ndarray
    mean_reversed: np.ndarray
    differences: np.ndarray  # real - reversed, per prompt
    share_smaller: np.ndarray  # share of prompts whose real-order increment is smaller
    statistic: np.ndarray  # Wilcoxon W
    p_value: np.ndarray  # two-sided Wilcoxon signed-rank p (1.0 where all differences are within 1e-8 of 0)
    n: int


def entity_grouping_test(real: np.ndarray, reversed_: np.ndarray, carrier_axis: int | None = None) -> EntityGroupingResult:
    """Paired comparison of boundary increments for real vs reversed entity order ("Learned position
    increments", Brendan Long).

    ``real`` and ``reversed_`` are (n, ...) increments at the word boundary, row i of each from
    the same entity (and carrier), e.g. (n, L). ``carrier_axis``: average over this axis first (the
    carriers), so that each entity is one pair — the post's script does this: pass (79, 5, L) arrays with
    ``carrier_axis=1`` (prompts from :func:`entity_prompts` reshape to that, entities first). The test is
    scipy's two-sided Wilcoxon signed-rank test on real − reversed (zero differences dropped, scipy's
    default); where every difference is within 1e-8 of zero (the script's ``np.allclose(diff, 0)``, e.g. a
    byte-identity layer, whose δ at a space cannot depend on the words) or within float32 rounding of the
    values (1e-6 of their size: the same byte traced in prompts of other lengths) p is 1.0.

    Example:
        >>> import numpy as np
        >>> r = entity_grouping_test(np.array([1.0, 1.2, 0.9, 1.1, 1.0, 0.8]), np.array([1.5, 1.6, 1.4, 1.2, 1.3, 1.1]))
        >>> float(r.share_smaller), round(float(r.p_value), 4)
        (1.0, 0.0312)
        >>> entity_grouping_test(np.ones((3, 5, 2)), np.ones((3, 5, 2)), carrier_axis=1).p_value.tolist()
        [1.0, 1.0]
        >>> float(entity_grouping_test(np.full(6, 2.0) + 1e-7 * np.arange(6), np.full(6, 2.0)).p_value)  # rounding
        1.0
    """
    a = as_float_array(real, "real", shape_hint="pass shape (n_prompts, ...)")
    b = as_float_array(reversed_, "reversed_", shape_hint="pass shape (n_prompts, ...)")
    if a.shape != b.shape:
        raise InputError(
            f"real has shape {a.shape} but reversed_ has {b.shape}; pass paired increments "
            "(row i of both from the same entity and carrier)"
        )
    if carrier_axis is not None:
        if isinstance(carrier_axis, bool) or not isinstance(carrier_axis, (int, np.integer)) \
                or not 1 <= carrier_axis < a.ndim:
            raise InputError(f"carrier_axis must be an axis after the first (1..{a.ndim - 1}) of arrays shaped "
                             f"{a.shape}, or None; got {carrier_axis!r}")
        a, b = a.mean(axis=int(carrier_axis)), b.mean(axis=int(carrier_axis))
    if a.shape[0] < 2:
        raise InputError(f"need at least 2 paired prompts for a Wilcoxon test; got {a.shape[0]}")
    diff = a - b
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-zero columns: scipy divides by zero
        test = wilcoxon(diff, axis=0)
    rounding = FLOAT32_ROUNDING * np.maximum(np.abs(a), np.abs(b)).max(axis=0)
    no_difference = np.all(np.abs(diff) <= np.maximum(ZERO_DIFFERENCE, rounding), axis=0)
    p_value = np.where(no_difference, 1.0, np.asarray(test.pvalue, dtype=float))
    return EntityGroupingResult(
        mean_real=a.mean(axis=0),
        mean_reversed=b.mean(axis=0),
        differences=diff,
        share_smaller=(diff < 0).mean(axis=0),
        statistic=np.asarray(test.statistic, dtype=float),
        p_value=np.asarray(p_value),
        n=a.shape[0],
    )
