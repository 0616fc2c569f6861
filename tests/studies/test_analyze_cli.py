"""`repo-lens analyze`: Parquet records (JSON + CSV for small runs), resumable without redoing finished shards."""

from __future__ import annotations

import csv
import json

import pytest

from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.resumable import run_items


def test_niah_sweep_writes_json_csv_and_resumes(byte_model_dir, tmp_path, capsys):
    out = tmp_path / "niah"
    argv = ["analyze", "--model", str(byte_model_dir), "--study", "niah", "--lengths", "400,480",
            "--depths", "0,1", "--out", str(out), "--quiet", "--device", "cpu", "--shard-size", "1"]
    assert main(argv) == 0
    records = json.loads((out / "results.json").read_text())
    assert [(r["length"], r["depth"]) for r in records] == [(400, 0.0), (400, 1.0), (480, 0.0), (480, 1.0)]
    for record in records:
        assert set(record["per_token"]) == {"needle", "query", "rest"}
        assert record["n_tokens"] <= record["length"]
        # per-token mass times span length, summed over spans, is at most the whole row
        assert sum(record["total"].values()) <= 1.0 + 1e-6
        # ... and with the mass the answer rows put on themselves it is the whole row
        assert sum(record["total"].values()) + record["self_mass"] == pytest.approx(1.0, abs=1e-5)
        for name, total in record["total"].items():
            assert total == pytest.approx(record["per_token"][name] * record["span_lengths"][name])
        # bytes: the answer's digits are the last tokens, one each, and the needle is the same digits
        start, end = record["query_rows"]
        assert end == record["n_tokens"] and end - start == len(record["answer"]) == record["span_lengths"]["needle"]
        assert "token_accuracy" not in record  # only when asked for (analyses/smollm2_niah.py)
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 4 and float(rows[0]["per_token.needle"]) == pytest.approx(records[0]["per_token"]["needle"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["per_token"]["needle"] == pytest.approx(sum(r["per_token"]["needle"] for r in records) / 4)
    assert summary["counts"] == {"items": 4, "records": 4, "shards": 4}

    # an interrupted run: one shard missing; rerunning recomputes only that one
    shards = sorted((out / "records").iterdir())
    stamps = {path.name: path.stat().st_mtime_ns for path in shards}
    shards[1].unlink()
    (out / "shards" / shards[1].with_suffix(".json").name).unlink()
    assert main(argv) == 0
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in sorted((out / "records").iterdir()) if p != shards[1])
    assert json.loads((out / "results.json").read_text()) == records


def test_resume_never_redoes_finished_items(tmp_path):
    calls = []

    def item(key):
        return key, lambda: calls.append(key) or {"value": len(key)}

    run_items(tmp_path, [item("a"), item("bb")], {"kind": "t"}, progress=False)
    run_items(tmp_path, [item("a"), item("bb"), item("ccc")], {"kind": "t"}, progress=False)
    assert calls == ["a", "bb", "ccc"]
    with pytest.raises(InputError, match="holds a run with other settings"):
        run_items(tmp_path, [item("a")], {"kind": "other"}, progress=False)


def test_positions_and_boundaries_studies(byte_model_dir, tmp_path, monkeypatch, capsys):
    text_file = tmp_path / "text.txt"
    text_file.write_text("First paragraph of plain text, long enough for chunks.\n\nSecond one, also long enough.")
    out = tmp_path / "positions"
    assert main(["analyze", "--model", str(byte_model_dir), "--study", "positions", "--file", str(text_file),
                 "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    records = json.loads((out / "results.json").read_text())
    assert len(records) == 2 and json.loads((out / "summary.json").read_text())["layer_kinds"] == [
        "rope", "rope", "repo", "repo"]
    assert records[0]["range_mean_by_layer"][0] == records[0]["n_tokens"] - 1  # RoPE: 0..T-1
    assert [record["document_id"] for record in records] == ["text.txt:1", "text.txt:3"]

    from repo_lens.data.corpora import parse_peoples_daily

    sample = parse_peoples_daily(["迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  。/w",
                                  "中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr"])
    monkeypatch.setattr("repo_lens.data.peoples_daily", lambda *a, **k: sample)
    out = tmp_path / "boundaries"
    capsys.readouterr()
    assert main(["analyze", "--model", str(byte_model_dir), "--study", "boundaries", "--samples", "2",
                 "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # gaps between CJK characters: 迈向充满希望的新世纪 has 9, 中共中央总书记 6 and 国家主席江泽民 6
    assert summary["n_gaps_gold"] == 21
    assert summary["auc_gold_by_layer"][:2] == [0.5, 0.5]  # RoPE increments are all 1: chance
    # stdout is one whole JSON document: the summary but for the per-head arrays (in summary.json)
    printed = capsys.readouterr()
    assert json.loads(printed.out) == {key: value for key, value in summary.items()
                                       if not key.endswith("by_layer_head")}
    assert "auc_gold_by_layer_head" in summary and summary["counts"]["documents_analysed"] == 2
    assert "2 of all 2 documents analysed; 0 longer than 512 tokens cut into windows" in printed.err


def test_the_printed_summary_is_whole_json_however_long(tmp_path, capsys, monkeypatch):
    import repo_lens.studies.items as studies

    long_summary = {"layer_kinds": ["repo"] * 64, "range_mean_by_layer": [1 / 3] * 64,
                    "pattern_by_layer": [[0.125] * 5] * 64, "pattern_by_layer_head": [[[0.5] * 5] * 16] * 64}
    monkeypatch.setattr(studies, "summarize_positions", lambda records, options=None: long_summary)
    directory = tmp_path / "model"
    save_checkpoint(tiny_model("repo", seed=1), directory)
    text_file = tmp_path / "text.txt"
    text_file.write_text("Some text to trace, long enough for a chunk or two of sixteen bytes.")
    assert main(["analyze", "--model", str(directory), "--study", "positions", "--file", str(text_file),
                 "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert len(printed) > 3000  # the old output was cut at 3,000 characters, mid-JSON
    shown = json.loads(printed)
    assert shown.pop("study") == "positions" and shown.pop("counts")["windows"] == 1
    assert shown == {key: value for key, value in long_summary.items() if key != "pattern_by_layer_head"}


def test_niah_beyond_the_training_context_needs_the_flag(tmp_path, capsys):
    directory = tmp_path / "short"
    save_checkpoint(tiny_model("repo", seed=1, context=256), directory)
    argv = ["analyze", "--model", str(directory), "--study", "niah", "--lengths", "400", "--depths", "0.5",
            "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"]
    assert main(argv) == 2
    assert "longer than the model's context of 256" in capsys.readouterr().err
    assert main(argv[:-1] + ["cpu", "--beyond-context"]) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())[0]["n_tokens"] > 256
