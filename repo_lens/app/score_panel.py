"""What the "Why this attention" panel shows, assembled from :func:`repo_lens.analysis.score_decomposition`
(no Streamlit and no plotting here): for one head and query row, the keys the query attends to most, each
score split into its content and position parts, each frequency band's term of those scores, and the four
patterns (actual, content only, position only, reference) over every key the query sees."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repo_lens import InputError
from repo_lens.analysis import ScoreDecomposition
from repo_lens.validation import check_int

TOP_KEYS = 8  # keys listed by the panel, most attended first
PATTERNS = ("actual", "content", "position", "reference")  # the order the panel draws them in


@dataclass(frozen=True)
class AttentionPanel:
    """One query row of one head of a score decomposition, as the panel shows it.

    ``keys`` [key]: every key the query sees, ascending; ``patterns[name]`` [key]: that pattern's attention
    on them. ``top`` [k]: the ``k`` keys with the most actual attention, most first (ties: the earlier key);
    ``attention``, ``content``, ``position`` [k]: their actual attention and the two parts of their score;
    ``bands`` [k, band]: each frequency band's term of their scores, None where the layer rotates nothing
    (then ``frequencies`` [band], each band's angle per unit of position, is None too). ``reference``: what
    the reference pattern's positions are ("integer", "constant", "array"). ``position_free``: the position
    part is 0 for every key the query sees (a layer that uses no position)."""

    layer: int
    kind: str
    head: int
    query: int
    keys: np.ndarray
    patterns: dict[str, np.ndarray]
    top: np.ndarray
    attention: np.ndarray
    content: np.ndarray
    position: np.ndarray
    bands: np.ndarray | None
    frequencies: np.ndarray | None
    reference: str
    position_free: bool

    @property
    def score(self) -> np.ndarray:
        """[k] the top keys' pre-softmax scores: content + position."""
        return self.content + self.position

    def rows(self, tokens: list[str] | None = None) -> list[dict[str, object]]:
        """The top keys as table rows: key, token (when ``tokens`` is given), the attention each pattern gives it
        (``attention_actual``, ``attention_content``, …), and its score's ``content``, ``position`` and ``score``.

        Example:
            >>> panel = AttentionPanel(1, "rope", 0, 2, np.arange(3), {"actual": np.array([0.2, 0.5, 0.3])},
            ...                        np.array([1]), np.array([0.5]), np.array([1.5]), np.array([-0.5]), None,
            ...                        None, "integer", False)
            >>> panel.rows(["a", "b", "c"])
            [{'key': 1, 'token': 'b', 'attention_actual': 0.5, 'content': 1.5, 'position': -0.5, 'score': 1.0}]
        """
        rows: list[dict[str, object]] = []
        for index, key in enumerate(self.top.tolist()):
            row: dict[str, object] = {"key": key}
            if tokens is not None:
                row["token"] = tokens[key]
            row.update({f"attention_{name}": float(values[key]) for name, values in self.patterns.items()})  # keys are 0..query
            row.update(content=float(self.content[index]), position=float(self.position[index]),
                       score=float(self.content[index] + self.position[index]))
            rows.append(row)
        return rows


def attention_panel(found: ScoreDecomposition, head: int, query: int, top: int = TOP_KEYS) -> AttentionPanel:
    """Head ``head``'s query row ``query`` of ``found`` (both among those it decomposed, every key up to the
    query among its keys, as ``score_decomposition``'s default keys are), with its ``top`` most attended keys.

    Example:
        >>> import repo_lens
        >>> from repo_lens.analysis import score_decomposition
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=2, seed=0), None)
        >>> found = score_decomposition(lens, list(range(10, 30)), layer=2, heads=[1], queries=[12])
        >>> panel = attention_panel(found, head=1, query=12, top=3)
        >>> len(panel.keys), panel.top.shape, panel.bands.shape
        (13, (3,), (3, 8))
        >>> bool(np.allclose(panel.bands.sum(-1), panel.score, atol=1e-5))
        True
    """
    head_index, row_index = _where(found, head, query)
    top = check_int(top, "top", minimum=1)
    keys = np.asarray(found.keys)
    visible = np.asarray(found.mask[row_index])
    expected = np.arange(query + 1)
    if not np.array_equal(keys[visible], expected):
        raise InputError(f"the decomposition's keys must be every key up to query {query} (0..{query}); it has "
                         f"{len(keys[visible])} of them: decompose with the default keys (keys=None)")
    patterns = {name: np.asarray(found.patterns[name][head_index, row_index])[visible]
                for name in PATTERNS if name in found.patterns}
    order = np.argsort(-patterns["actual"], kind="stable")[:top]  # ties: the earlier key first
    content = np.asarray(found.content[head_index, row_index])[visible]
    position = np.asarray(found.position[head_index, row_index])[visible]
    bands = frequencies = None
    if found.frequencies is not None:
        bands = np.asarray(found.bands[head_index, row_index])[visible][order]
        frequencies = np.asarray(found.frequencies[head_index])
    return AttentionPanel(
        layer=int(found.layer), kind=str(found.kind), head=int(head), query=int(query), keys=expected,
        patterns=patterns, top=expected[order], attention=patterns["actual"][order], content=content[order],
        position=position[order], bands=bands, frequencies=frequencies, reference=str(found.reference),
        position_free=bool(np.all(position == 0.0)))


def _where(found: ScoreDecomposition, head: int, query: int) -> tuple[int, int]:
    """The indices of ``head`` and ``query`` along ``found``'s head and query axes."""
    if type(found).__name__ != "ScoreDecomposition":
        raise InputError(f"found must be a ScoreDecomposition (from score_decomposition), got {type(found).__name__}")
    head, query = check_int(head, "head"), check_int(query, "query")
    heads, queries = np.asarray(found.heads).tolist(), np.asarray(found.queries).tolist()
    if head not in heads:
        raise InputError(f"head {head} was not decomposed; the decomposition has heads {heads}: pass heads=[{head}]")
    if query not in queries:
        raise InputError(f"query row {query} was not decomposed; the decomposition has query rows {queries}: "
                         f"pass queries=[{query}]")
    return heads.index(head), queries.index(query)
