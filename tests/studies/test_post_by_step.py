"""The learned-increments post's findings along a training run (``post_findings_by_step``): the steps found in a
run folder, the run's recorded bits/byte, the findings of each step against references computed straight from
the weights, and the step from which each finding lasts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
import torch.nn.functional as F

from repo_lens.analysis import POST_BYTE_CATEGORIES
from repo_lens.errors import InputError
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.loaders.native.format import save_checkpoint
from repo_lens.studies.reproductions.post_by_step import (BOUNDARY_BYTES, LETTERS, finding_holds, first_lasting_step,
                                                          post_findings_by_step, run_steps)
from tests.studies.test_post_reproductions import HELD_OUT

MAX_DELTA = 10.0


def per_layer_model(seed: int, boundaries_saturate: bool) -> LensModel:
    """A tiny ``lpi-resid`` byte model. With ``boundaries_saturate``, layer 0's DeltaMLP reads one embedding
    direction that the boundary bytes point along and every other byte against: boundary δ → max_delta,
    the rest → max_delta · sigmoid(−3)."""
    cfg = ModelConfig(family="llama", vocab_size=257, d_model=32, n_layers=2, n_heads=2, d_mlp=64,
                      max_position_embeddings=128, layer_mechanisms=["lpi-resid"] * 2, lpi_max_delta=MAX_DELTA)
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    if boundaries_saturate:
        boundary = sorted({byte for name in BOUNDARY_BYTES for byte in POST_BYTE_CATEGORIES.get(name, ())} | {256})
        direction = torch.zeros(32)
        direction[0] = 1.0
        mlp = model.blocks[0].attn.mechanism.delta_mlp
        with torch.no_grad():
            sign = -torch.ones(257)
            sign[boundary] = 1.0
            model.embed.weight.copy_(sign[:, None] * direction + 0.01 * torch.randn(257, 32))
            mlp.fc_in.weight.zero_()
            mlp.fc_in.weight[0] = 5.0 * direction
            mlp.fc_out.weight.zero_()
            mlp.fc_out.weight[0, 0] = 1.0
            mlp.fc_out.bias.fill_(-3.0)
    return model


def layer0_deltas(model: LensModel) -> np.ndarray:
    """δ of layer 0 for each byte id as a document's first byte: its input is the byte's embedding alone."""
    mechanism = model.blocks[0].attn.mechanism
    x = model.embed.weight.detach().float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps) * mechanism.norm.weight
    mlp = mechanism.delta_mlp
    logits = F.linear(F.gelu(F.linear(normed, mlp.fc_in.weight, mlp.fc_in.bias)), mlp.fc_out.weight, mlp.fc_out.bias)
    return (MAX_DELTA * torch.sigmoid(logits)).squeeze(-1).detach().numpy().astype(np.float64)


@pytest.fixture(scope="module")
def by_step_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    models = {10: per_layer_model(1, boundaries_saturate=False), 20: per_layer_model(2, boundaries_saturate=True)}
    for step, model in models.items():
        save_checkpoint(model, run / "snapshots" / f"step_{step}", info={"step": step})
    (run / "snapshots" / "step_15").mkdir()  # no config.json: not a loadable step
    (run / "train_state").mkdir()
    history = [{"step": 10, "val_bpb": 7.5}, {"step": 20, "val_bpb": 7.25}]
    (run / "train_state" / "progress.json").write_text(json.dumps({"step": 20, "history": history}))
    document = post_findings_by_step(run / "out", [str(run)], quick=True, figures=False, progress=False,
                                     held_out=HELD_OUT)
    return run, models, document


@pytest.mark.slow
def test_each_step_is_analysed_with_the_runs_recorded_bits_per_byte(by_step_run):
    run, _, document = by_step_run
    steps = document["runs"][str(run)]["steps"]
    assert list(steps) == ["10", "20"]
    assert [steps[s]["val_bpb"] for s in steps] == [7.5, 7.25]
    saved = json.loads((run / "out" / "results.json").read_text())
    assert saved["markdown"] == document["markdown"]
    assert "| 10 | 7.500 |" in document["markdown"] and "| 20 | 7.250 |" in document["markdown"]


@pytest.mark.slow
def test_layer0_saturation_against_the_weights(by_step_run):
    run, models, document = by_step_run
    steps = document["runs"][str(run)]["steps"]
    for step, model in models.items():
        delta = layer0_deltas(model)
        boundary = [delta[list(POST_BYTE_CATEGORIES[name])].mean() if name in POST_BYTE_CATEGORIES else delta[256]
                    for name in BOUNDARY_BYTES]
        row = steps[str(step)]["findings"]
        assert row["saturation"] == pytest.approx(np.mean(boundary) / MAX_DELTA, rel=1e-4)
        assert row["letters"] == pytest.approx(delta[list(POST_BYTE_CATEGORIES[LETTERS])].mean() / MAX_DELTA, rel=1e-4)
    assert steps["20"]["findings"]["saturation"] > 0.99 and steps["20"]["findings"]["letters"] < 0.06
    assert steps["20"]["findings"]["holds"]["saturation"] and not steps["10"]["findings"]["holds"]["saturation"]
    assert document["runs"][str(run)]["appears"]["saturation"] == 20


def test_a_finding_appears_where_it_starts_to_last():
    assert first_lasting_step([1, 2, 3], [False, True, True]) == 2
    assert first_lasting_step([1, 2, 3], [True, True, False]) is None
    assert first_lasting_step([1, 2, 3], [None, None, None]) is None


def test_the_per_layer_findings_follow_the_posts_layers():
    rows = [0, 1, 2, 3, 4, 5]
    row = {"category_rho": 0.9, "auc": [0.5, 0.54, 0.68, 0.37, 0.63, 0.47],
           "entity_p": [1.0, 0.28, 3e-5, 6e-5, 3e-8, 3e-7], "entity_real_smaller": [False, True, True, True, True, True]}
    assert finding_holds(row, rows) == {"categories": True, "saturation": None, "boundaries": True, "entities": True}
    flipped = {**row, "auc": [0.5, 0.54, 0.68, 0.52, 0.63, 0.47],  # L3 no longer below chance
               "entity_real_smaller": [False, True, False, False, True, True]}  # only L4, L5 left
    assert finding_holds(flipped, rows) == {"categories": True, "saturation": None, "boundaries": False,
                                            "entities": False}


def test_a_folder_without_steps_is_refused(tmp_path):
    with pytest.raises(InputError, match="snapshots/step_N"):
        run_steps(tmp_path)
    with pytest.raises(InputError, match="not a folder"):
        run_steps(tmp_path / "missing")
    snapshot = tmp_path / "snapshots" / "step_10"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert run_steps(tmp_path) == [(10, snapshot)]
    with pytest.raises(InputError, match=r"no model at steps \[30\]; it has \[10\]"):
        post_findings_by_step(tmp_path / "out", [str(tmp_path)], quick=True, figures=False, held_out=HELD_OUT, steps=[30])
    with pytest.raises(InputError, match=r"no model at steps \[30\]; it has \[10\]"):  # steps of this run
        post_findings_by_step(tmp_path / "out", [str(tmp_path)], quick=True, figures=False, held_out=HELD_OUT,
                              steps={str(tmp_path): [30]})
    with pytest.raises(InputError, match=r"steps names runs \['elsewhere'\] that are not among runs"):
        post_findings_by_step(tmp_path / "out", [str(tmp_path)], quick=True, figures=False, held_out=HELD_OUT,
                              steps={"elsewhere": [10]})
    for wrong in (10, [10.5], ["10"], [True]):
        with pytest.raises(InputError, match=r"pass a list of whole training steps"):
            post_findings_by_step(tmp_path / "out", [str(tmp_path)], quick=True, figures=False, held_out=HELD_OUT,
                                  steps={str(tmp_path): wrong})


def test_a_zoo_model_is_one_row_at_its_cards_step():
    from repo_lens.studies.reproductions import STUDIES

    study = STUDIES["increment_post_by_step"]
    (name,) = study.default_models
    [(step, folder)] = run_steps(name)
    card = json.loads((folder / "config.json").read_text())["info"]
    assert step == card["steps"] > 0 and folder.name == name.removeprefix("zoo:")


@pytest.mark.study
def test_zoo_default_quick(tmp_path):
    """The default: the zoo's model of the post, one row at its card's step, its bits/byte from the card."""
    from repo_lens.studies.reproductions import STUDIES

    study = STUDIES["increment_post_by_step"]
    (name,) = study.default_models
    document = study.load()(tmp_path, [name], quick=True, figures=False, progress=False)
    [(step, entry)] = document["runs"][name]["steps"].items()
    card = repo_lens.load(name, device="cpu").meta["info"]
    assert int(step) == card["steps"] and entry["val_bpb"] == card["metrics"]["val_bpb"]
    row = entry["findings"]
    assert 0 < row["letters"] <= 1 and 0 < row["saturation"] <= 1 and len(row["auc"]) == 6


def test_the_results_page_table_is_the_stored_study():
    """RESULTS.md's findings-by-step rows are the stored study's rows (analyses/results/increment_post_by_step),
    recomputed here from its per-step analyses."""
    import gzip

    from repo_lens.studies.reproductions.post_by_step import _step_line, findings_row

    root = Path(__file__).resolve().parents[2]
    document = json.loads(gzip.open(root / "analyses/results/increment_post_by_step/results.json.gz").read())
    results_page = (root / "RESULTS.md").read_text()
    for found in document["runs"].values():
        for step, entry in found["steps"].items():
            row = findings_row(entry["result"], 10.0)
            line = _step_line(step, {**entry, "findings": row})
            assert f"\n{line}\n" in results_page, line
