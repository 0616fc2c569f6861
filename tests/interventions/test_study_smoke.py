"""Issue 33, item 3: `repo-lens reproduce position_interventions` end to end, quick, on tiny random checkpoints
(the zoo run itself is in RESULTS.md)."""

from __future__ import annotations

import json

import numpy as np

from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.reproductions import STUDIES


def test_the_study_runs_quick_and_writes_its_tables(tmp_path):
    for mechanism in ("repo", "rope"):
        save_checkpoint(tiny_model(mechanism, n_layers=3, d_model=32, n_heads=2, context=512),
                        tmp_path / f"tiny-{mechanism}", info={"name": f"tiny-{mechanism}"})
    models = [str(tmp_path / "tiny-repo"), str(tmp_path / "tiny-rope")]
    document = STUDIES["position_interventions"].load()(tmp_path / "out", models, quick=True, figures=False,
                                                        progress=False, batch_size=4)
    repo, rope = (document["results"][model] for model in models)
    assert set(repo["ablations"]["layer"]) == {"1", "2"} and set(rope["ablations"]["layer"]) == {"0", "1", "2"}
    assert len(repo["ablations"]["head"]) == 4 and len(rope["ablations"]["head"]) == 6
    # RoPE's positions already are the integers: those edits are not run; patching the same integers changes nothing
    assert rope["ablations"]["all"]["integer"] is None and rope["ablations"]["layer"]["1"]["integer"] is None
    assert np.abs(np.nan_to_num(np.asarray(rope["patching"]["effects"], dtype=float))).max() == 0.0
    assert rope["ablations"]["sweep"]["constant"]["1"] is not None
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["study"] == "position_interventions" and "### One head at a time" in written["markdown"]
    assert (tmp_path / "out" / "table.md").read_text().startswith("### Every edited layer at once")
