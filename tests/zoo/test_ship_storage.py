"""Shipping a run at a storage precision (``ship(..., storage=)``, ``repo-lens zoo --ship … --storage``) and
shipping one of its snapshots: the card's numbers are measured here again, on the weights the zoo holds and on
the run's own weights, with the run's task."""

from __future__ import annotations

import json

import pytest

import repo_lens
import repo_lens.zoo
import repo_lens.zoo.ship as ship_module
from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.model.loaders.native.packed import CACHE_ENV
from repo_lens.train import ByteLMTask, preset, train

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20]


def tiny_task(cfg):
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A finished bfloat16 run of 4 steps with a snapshot at step 2; the zoo and the task point at test copies."""
    monkeypatch.setattr(repo_lens.zoo, "ZOO_DIR", tmp_path / "zoo")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(ship_module, "build_task", tiny_task)
    cfg = preset("tiny", mechanism="repo", steps=4, eval_every=2, checkpoint_every=2, snapshot_every=2,
                 ship_dtype="bfloat16")
    train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    return tmp_path / "run", cfg


def test_shipping_at_int6_stores_it_and_the_card_gives_the_measured_bits_before_and_after(run, capsys):
    run_dir, cfg = run
    assert main(["zoo", "--ship", str(run_dir), "tiny-int6", "tiny", "--storage", "int6"]) == 0
    folder = repo_lens.zoo.ZOO_DIR / "tiny-int6"
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors.xz"]
    config = json.loads((folder / "config.json").read_text())
    assert config["repo_lens_format"] == 2 and config["storage"] == {"scheme": "int8-rows", "levels": 31}
    task = tiny_task(cfg)
    before = task.evaluate(repo_lens.load(run_dir, device="cpu").model)["val_bpb"]
    after = task.evaluate(repo_lens.load("zoo:tiny-int6", device="cpu").model)["val_bpb"]
    assert before != after
    card = (folder / "README.md").read_text()
    assert ("- weights shipped as int6: each 2-D weight (embeddings, linear weights) as int8 codes in ±31 with a "
            "bfloat16 scale per row, the other tensors bfloat16; metrics are measured on those") in card
    assert ("- quantized to int6 at ship time from the run's bfloat16 weights; held-out metrics of the run's task, "
            "measured on each (bfloat16 → int6):") in card
    assert f"val_bpb {before:.5f} → {after:.5f}" in card
    assert f"| val_bpb | {after:.4f} |" in card  # the metrics table is measured on the shipped weights
    assert config["info"]["metrics"]["val_bpb"] == pytest.approx(after, abs=1e-9)
    assert "-> " in capsys.readouterr().out


def test_shipping_a_snapshot_says_which_step_and_measures_it(run):
    run_dir, cfg = run
    target = ship_module.ship(run_dir / "snapshots" / "step_2", "tiny-step2", "tiny")
    card = (target / "README.md").read_text()
    assert "- steps: 2 × batch 8 (the run's snapshot at step 2 of 4;" in card
    measured = tiny_task(cfg).final_metrics(repo_lens.load(run_dir / "snapshots" / "step_2", device="cpu").model)
    assert f"| val_bpb | {measured['val_bpb']:.4f} |" in card
    assert "- weights shipped as bfloat16; metrics are measured on those" in card
    assert "wall time" not in card  # a snapshot does not record one
    curve = card.split("## Learning curve")[1].strip().splitlines()
    assert [row.split("|")[1].strip() for row in curve[2:]] == ["2"]  # the run's curve up to the snapshot
    config = json.loads((target / "config.json").read_text())
    assert config["repo_lens_format"] == 1 and config["info"]["snapshot"] == {"step": 2, "of": 4}


def test_storage_without_ship_and_an_unknown_storage_are_refused(run, capsys):
    run_dir, _ = run
    assert main(["zoo", "--storage", "int6"]) == 2
    assert "--storage goes with --ship" in capsys.readouterr().err
    with pytest.raises(InputError, match="storage 'int5'"):
        ship_module.ship(run_dir, "tiny-int5", "tiny", storage="int5")
    assert not (repo_lens.zoo.ZOO_DIR / "tiny-int5").exists()


def test_the_card_gives_the_runs_own_window_length(run):
    run_dir, cfg = run
    card = (ship_module.ship(run_dir, "tiny-card", "tiny") / "README.md").read_text()
    assert f"then a random {cfg.context}-byte window." in card and cfg.context != 256
