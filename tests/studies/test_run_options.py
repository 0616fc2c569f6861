"""analyze's and plan_run's keyword forms from before WindowSpec and RunOptions still run the same study,
with a DeprecationWarning that names the options object."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from repo_lens.data.windows import WindowSpec
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.runner import RunOptions, analyze, plan_run

TEXTS = ["A first document, longer than one window of 32 bytes, cut into several.", "", "Short.",
         "A third text of some length for the selection to choose from."]


@pytest.fixture(scope="module")
def lens():
    return Lens(tiny_model("repo", n_layers=2, context=64), ByteTokenizer())


def test_analyze_keywords_become_its_windows_and_run_options(lens, tmp_path):
    new = analyze(lens, "positions", TEXTS, out=tmp_path / "new", windows=WindowSpec(size=32, overlap=8),
                  run=RunOptions(limit=3, shard_size=2, batch_size=2, progress=False, settings={"model": "tiny"}))
    with pytest.warns(DeprecationWarning) as caught:
        old = analyze(lens, "positions", TEXTS, out=tmp_path / "old", window=32, overlap=8, limit=3, shard_size=2,
                      batch_size=2, progress=False, settings={"model": "tiny"})
    messages = " | ".join(str(warning.message) for warning in caught)
    assert "pass windows=WindowSpec(size=..., overlap=...) instead" in messages
    assert "pass run=RunOptions(limit=..., shard_size=..., batch_size=..., progress=..., settings=...) instead" in messages
    pd.testing.assert_frame_equal(old.records(), new.records())
    assert old.counts == new.counts and old.counts["documents_selected"] == 3 and old.counts["windows"] > 3
    run_json = json.loads((tmp_path / "old" / "run.json").read_text())
    assert run_json == json.loads((tmp_path / "new" / "run.json").read_text())
    assert run_json["model"] == "tiny" and run_json["windows"] == {"size": 32, "stride": 24}
    assert run_json["selection"]["limit"] == 3 and run_json["shard_size"] == 2


def test_plan_run_keywords_become_its_run_options(lens):
    new = plan_run(lens, "positions", TEXTS, run=RunOptions(sample=2, seed=5, shard_size=1))
    with pytest.warns(DeprecationWarning, match=r"plan_run\(sample=..., seed=..., shard_size=...\) is deprecated"):
        old = plan_run(lens, "positions", TEXTS, sample=2, seed=5, shard_size=1)
    assert old.settings == new.settings and (old.total, old.n_shards) == (new.total, new.n_shards) == (2, 2)
    assert old.selection.indices().tolist() == new.selection.indices().tolist()
