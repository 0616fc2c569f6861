"""vocabulary_category(ies), vocabulary_table, vocabulary_increments: the learned-increments post's delta-graft
vocabulary table ("Learned position increments", Brendan Long; analyze_deltas.py), against a reference
written here from the script's definition (its categorize rules, torch's median and std, its top / bottom
ordering and its δ > 2 artifact rule) and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from repo_lens.analysis import (
    VOCABULARY_CATEGORIES,
    document_separator,
    lower_median,
    vocabulary_categories,
    vocabulary_category,
    vocabulary_increments,
    vocabulary_table,
)
from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model

SENTENCE = {".", "!", "?", '."', '!"', '?"', ".)", "...", ".'"}
OTHER = {",", ";", ":", "\u2014", "-", "(", ")", '"', "'", "\u2019", "\u201d", "\u201c"}
FUNCTION = set("the a an of to and in is it that for on as with was at by be this or".split())


def reference_category(token: str) -> str:
    text = token.replace("Ġ", " ").replace("Ċ", "\n")
    core = text.strip()
    if core in SENTENCE:
        return "sentence_punct"
    if core in OTHER:
        return "other_punct"
    if core.lower() in FUNCTION:
        return "function_word"
    if core.isalpha() and not text.startswith(" "):
        return "subword_continuation"
    if core.isalpha() and text.startswith(" "):
        return "word_start"
    return "other"


TOKENS = ["<|endoftext|>", "Ġthe", "The", "ĠTHE", "ing", "ĠYork", "Ċ", "ĊĠ", ".", 'Ġ."', "Ġ...", ",", "Ġ\u2014",
          "\u201c", "Ġ42", "42", "Ġcafé", "Ã©", "ĠNew", "Ċthe", "Ġ", "", "ĠOr", "Ġ(", "lyĠ", "Ġa.", "...."]


def test_categories_follow_the_scripts_rules():
    assert [vocabulary_category(token) for token in TOKENS] == [reference_category(token) for token in TOKENS]
    assert vocabulary_categories(TOKENS).tolist() == [reference_category(token) for token in TOKENS]
    assert set(VOCABULARY_CATEGORIES) == {reference_category(t) for t in TOKENS}
    # hand-checked: 'lyĠ' is letters with a trailing space (a continuation), '....' is not in the script's set
    assert vocabulary_category("lyĠ") == "subword_continuation" and vocabulary_category("....") == "other"
    assert vocabulary_category("ĠOr") == "function_word" and vocabulary_category("Ġcafé") == "word_start"


def reference_table(deltas: np.ndarray, tokens: list[str], top_k: int) -> dict:
    """analyze_deltas.py with torch: δ > 2 set aside, torch.median per category in first-seen order sorted by
    -median, the nan-masked descending argsort for the top and the reversed tail for the bottom."""
    d = torch.tensor(deltas)
    exploded = d > 2.0
    cats: dict[str, list[float]] = {}
    for i in range(len(tokens)):
        if not bool(exploded[i]):
            cats.setdefault(reference_category(tokens[i]), []).append(float(d[i]))
    order = sorted(cats.items(), key=lambda kv: -torch.tensor(kv[1]).median().item())
    masked = d.clone()
    masked[exploded] = float("nan")
    ranked = torch.argsort(torch.nan_to_num(masked, nan=-1.0), descending=True, stable=True)
    n_exp = int(exploded.sum())
    kept = d[~exploded]
    return {"categories": [(name, torch.tensor(vals).median().item(), len(vals)) for name, vals in order],
            "top": ranked[:top_k].tolist(),
            "bottom": list(reversed(ranked[len(ranked) - n_exp - top_k: len(ranked) - n_exp].tolist())),
            "summary": (kept.median().item(), kept.mean().item(), kept.std().item())}


def test_table_matches_the_script_with_torch():
    rng = np.random.default_rng(3)
    tokens = [TOKENS[i] for i in rng.integers(0, len(TOKENS), size=400)]
    deltas = rng.normal(1.0, 0.05, size=400)
    deltas[rng.choice(400, size=7, replace=False)] = rng.uniform(2.5, 40.0, size=7)  # unused-token artifacts
    got = vocabulary_table(deltas, tokens, eos_id=0, top_k=20)
    expected = reference_table(deltas, tokens, 20)
    assert [(c, pytest.approx(m), int(n)) for c, m, n in zip(got.categories, got.median, got.count)] \
        == expected["categories"]
    assert got.top.tolist() == expected["top"] and got.bottom.tolist() == expected["bottom"]
    assert (got.summary["median"], got.summary["mean"], got.summary["std"]) == pytest.approx(expected["summary"])
    assert got.unused.size == 7 and got.eos_delta == deltas[0]


def test_table_hand_case_and_lower_median():
    assert lower_median(np.array([1.0, 2.0, 3.0, 4.0])) == 2.0  # torch.median: the lower middle value
    tokens = ["Ġthe", "Ġof", ".", "ing", "Ġcat", "!"]
    table = vocabulary_table(np.array([1.02, 1.04, 1.10, 0.95, 3.0, 1.08]), tokens, top_k=2, eos_id=None)
    assert table.categories == ("sentence_punct", "function_word", "subword_continuation")
    assert table.median.tolist() == [1.08, 1.02, 0.95] and table.count.tolist() == [2, 2, 1]
    assert table.unused.tolist() == [4] and table.top.tolist() == [2, 5] and table.bottom.tolist() == [3, 0]
    assert table.eos_delta is None
    assert table.as_dict(tokens)["top"][0] == {"id": 2, "delta": 1.10, "token": "."}


def test_table_bad_input():
    with pytest.raises(InputError, match="deltas covers 2 tokens but tokens covers 3"):
        vocabulary_table(np.ones(2), ["a", "b", "c"])
    with pytest.raises(InputError, match="NaN"):
        vocabulary_table(np.array([1.0, np.nan]), ["a", "b"])
    with pytest.raises(InputError, match="rank 2"):
        vocabulary_table(np.ones((2, 2)), ["a", "b"])
    with pytest.raises(InputError, match="every δ exceeds unused_above"):
        vocabulary_table(np.full(2, 3.0), ["a", "b"])
    with pytest.raises(InputError, match="eos_id must be a vocabulary id in 0..1"):
        vocabulary_table(np.ones(2), ["a", "b"], eos_id=2)
    with pytest.raises(InputError, match="top_k must be an int >= 0"):
        vocabulary_table(np.ones(2), ["a", "b"], top_k=-1)
    with pytest.raises(InputError, match="empty"):
        vocabulary_table(np.zeros(0), [])
    with pytest.raises(InputError, match="token 1 is int"):
        vocabulary_categories(["a", 5])


def test_vocabulary_increments_of_a_shared_delta_mlp_are_the_embedding_deltas():
    """lpi (a shared DeltaMLP on the embeddings, as the graft): δ of every id is softplus(DeltaMLP(E[id]))."""
    model = tiny_model("lpi", n_layers=3, seed=4)
    lens = Lens(model, ByteTokenizer())
    with torch.no_grad():
        direct = F.softplus(model.shared_delta(model.embed.weight)).squeeze(-1).numpy()
    got = vocabulary_increments(lens, batch_size=64)
    assert got.shape == (3, 257)
    learned = [layer for layer, kind in enumerate(lens.layer_kinds) if kind == "lpi"]
    np.testing.assert_allclose(got[learned], np.broadcast_to(direct, (len(learned), 257)), rtol=1e-5)
    np.testing.assert_allclose(got[0], 1.0)  # the RoPE layer below: steps of one
    alone = vocabulary_increments(lens, ids=[97, 5], prefix=[])  # the prefix changes no embedding δ
    np.testing.assert_allclose(alone[learned], got[learned][:, [97, 5]], rtol=1e-5)
    assert np.isnan(alone[0]).all()  # a RoPE layer's first token has no step
    assert document_separator(lens.tokenizer) == 256


def test_vocabulary_increments_bad_input():
    lens = Lens(tiny_model("lpi", n_layers=3), ByteTokenizer())
    with pytest.raises(InputError, match=r"ids must lie in 0..256"):
        vocabulary_increments(lens, ids=[300])
    with pytest.raises(InputError, match="non-empty 1-D list of token ids"):
        vocabulary_increments(lens, ids=[])
    with pytest.raises(InputError, match="no end-of-text token"):
        document_separator(object())
