"""The app's word-boundary view and ``analyze --study boundaries`` score the same increments
(:func:`repo_lens.analysis.trace_increments`), so they give the same AUC on the same text, for
every registered position mechanism."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis import is_cjk_char, jieba_words
from repo_lens.app.documents import CHINESE, Preset, build_document, trace_document
from repo_lens.app.results import boundary_result
from repo_lens.data import Sentence
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.registry import mechanism_kinds
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.items import boundary_items, summarize_boundaries
from repo_lens.studies.resumable import run_items


@pytest.mark.parametrize("kind", mechanism_kinds())
def test_the_app_and_the_study_give_the_same_boundary_auc(kind, tmp_path):
    model = tiny_model(kind, n_layers=3, d_model=32, n_heads=2, context=1024, seed=1)
    lens = Lens(model, tokenizer=ByteTokenizer(), meta={"name": f"tiny-{kind}"})

    doc = build_document(lens, Preset.CHINESE, CHINESE, {})
    app = boundary_result(trace_document(lens, doc, truncate=True), doc)

    items = boundary_items(lens, [Sentence(words=jieba_words(CHINESE), tags=[], text=CHINESE)])
    study = summarize_boundaries(run_items(tmp_path, items, {"study": "boundaries"}, progress=False))

    assert study["n_gaps_jieba"] == app.n_scored > 0
    # one count per concept: bytes give every character its own first token, so every gap between two
    # Chinese characters is scored, and the word ends counted are those among them (the AUC's positives)
    cjk = [is_cjk_char(left) and is_cjk_char(right) for left, right in zip(CHINESE, CHINESE[1:])]
    words = jieba_words(CHINESE)
    ends = [is_cjk_char(word[-1]) and is_cjk_char(after[0]) for word, after in zip(words, words[1:])]
    assert (app.n_scored, app.n_boundaries) == (sum(cjk), sum(ends))
    np.testing.assert_allclose(app.auc, np.asarray(study["auc_jieba_by_layer_head"], dtype=float), rtol=0, atol=1e-12)
