"""analyses/smollm2_niah.py on a tiny byte model: the cells of `repo-lens analyze --study niah`, run by the
same resumable runner, plus answer accuracy, a per-length table and resumption with a larger grid."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.data import niah_single

SCRIPT = Path(__file__).resolve().parents[2] / "analyses" / "smollm2_niah.py"


def load_script():
    spec = importlib.util.spec_from_file_location("smollm2_niah", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cells_table_and_resumption(byte_model_dir, tmp_path, capsys):
    script = load_script()
    out = tmp_path / "niah"

    def argv(*depths: str) -> list[str]:
        return ["--out", str(out), "--model", str(byte_model_dir), "--lengths", "400", "9999", "--depths", *depths,
                "--threads", "1", "--no-figure"]

    assert script.main(argv("0", "1")) == 0
    printed = capsys.readouterr().out
    assert "skipping length 9999: beyond the model's context of 512" in printed

    cells = json.loads((out / "results.json").read_text())
    assert [(c["item"], c["length"], c["depth"]) for c in cells] == [
        ("niah_len=400_depth=0.0_seed=0", 400, 0.0), ("niah_len=400_depth=1.0_seed=0", 400, 1.0)]
    lens = repo_lens.load(str(byte_model_dir), device="cpu")
    for cell in cells:
        # the accuracy extra, recomputed here from the logits of the same prompt
        prompt = niah_single(lens.tokenizer, 400, cell["depth"], seed=0)
        start, end = prompt.query
        with torch.no_grad():
            logits = lens.model(torch.as_tensor(np.asarray(prompt.ids))[None])[0]
        predicted = logits[start - 1:end - 1].argmax(-1).numpy()
        hits = predicted == np.asarray(prompt.ids[start:end])
        assert cell["token_accuracy"] == pytest.approx(hits.mean()) and cell["exact"] == float(hits.all())
        assert sum(cell["total"].values()) + cell["self_mass"] == pytest.approx(1.0, abs=1e-5)
        assert cell["seconds"] >= 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [row["item"] for row in rows] == [c["item"] for c in cells]
    assert float(rows[1]["per_token.needle"]) == pytest.approx(cells[1]["per_token"]["needle"])

    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == str(byte_model_dir) and summary["accuracy"] is True
    assert summary["grid"] == {"400": {"depths": [0.0, 1.0], "seeds": [0]}}
    (row,) = summary["table"]
    assert row["cells"] == 2 and row["needle"] == pytest.approx(np.mean([c["per_token"]["needle"] for c in cells]))
    assert row["needle_over_rest"] == pytest.approx(row["needle"] / row["rest"])
    assert row["token_accuracy"] == pytest.approx(np.mean([c["token_accuracy"] for c in cells]))

    # a larger grid: only the new cell is computed, the finished ones are read back untouched
    stamps = {path.name: path.stat().st_mtime_ns for path in (out / "items").iterdir()}
    assert script.main(argv("0", "0.5", "1")) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "items").iterdir() if p.name in stamps} == stamps
    resumed = json.loads((out / "results.json").read_text())
    assert [c["depth"] for c in resumed] == [0.0, 0.5, 1.0] and resumed[0] == cells[0] and resumed[2] == cells[1]
    assert json.loads((out / "summary.json").read_text())["grid"]["400"]["depths"] == [0.0, 0.5, 1.0]
    capsys.readouterr()

    # other settings in the same directory are refused, nothing is overwritten
    before = (out / "results.json").read_bytes()
    assert script.main(argv("0", "0.5", "1") + ["--no-accuracy"]) == 2
    assert "holds a run with other settings" in capsys.readouterr().err
    assert (out / "results.json").read_bytes() == before


def test_figure_has_a_line_per_span_and_per_length():
    script = load_script()
    cells = [{"length": length, "depth": depth, "seed": 0,
              "per_token": {"needle": 0.01 * depth + 0.001, "query": 0.005, "rest": 1e-4}}
             for length in (256, 512) for depth in (0.0, 1.0)]
    figure = script.figure(cells, "title")
    names = [trace.name for trace in figure.data]
    assert names == ["needle", "query", "rest", "needle @ 256 tokens", "needle @ 512 tokens"]
    assert list(figure.data[0].y) == pytest.approx([0.006, 0.006])  # mean over the two depths
    assert list(figure.data[3].y) == pytest.approx([0.001, 0.011])  # needle by depth at 256 tokens
