"""Corpus studies (issue 35): every document analysed in windows, the records a Parquet dataset, the
counts in the summary, resume, a study registry that a user's own study joins, bad input named."""

from __future__ import annotations

import importlib
import json
import textwrap
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.studies import registry, shards
from repo_lens.studies.registry import Option, Study, register_study, study_table
from repo_lens.data.windows import WindowSpec
from repo_lens.studies.runner import RunOptions, analyze

CONTEXT = 64
LENGTHS = (0, 10, 63, 64, 65, 200, 129, 5)  # bytes per document: empty, shorter, equal and longer than the context


def _texts() -> list[str]:
    words = ["positions", "drift", "while", "heads", "attend", "to", "needles", "in", "haystacks"]
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, size=60))[:length] for length in LENGTHS]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ctx64")
    save_checkpoint(tiny_model("repo", seed=1, context=CONTEXT), directory, info={"name": "tiny-64"})
    return directory


@pytest.fixture(scope="module")
def lens():
    return Lens(tiny_model("repo", seed=1, context=CONTEXT), ByteTokenizer())


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"text": text, "name": f"doc-{index}"}) + "\n"
                            for index, text in enumerate(_texts())))
    return path


def _analyze(model, corpus, out, *extra) -> list[str]:
    return ["analyze", "--study", "positions", "--corpus", str(corpus), "--model", str(model), "--out", str(out),
            "--device", "cpu", "--quiet", *extra]


def test_every_document_is_analysed_in_windows_and_the_parquet_reads_in_pandas(small_model, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_analyze(small_model, corpus, out, "--id-field", "name", "--shard-size", "3")) == 0
    frame = pd.read_parquet(out / "records")
    expected = [(index, -(-length // CONTEXT)) for index, length in enumerate(LENGTHS) if length]
    assert sorted(frame.groupby("document").size().items()) == expected  # every non-empty document, all its windows
    for _, rows in frame.groupby("document"):
        assert rows.token_start.tolist() == [0, *rows.token_end.tolist()[:-1]]  # side by side, no token left out
        assert rows.token_end.max() == LENGTHS[rows.document.iloc[0]]
    assert (frame.n_tokens <= CONTEXT).all() and frame.document_id.iloc[0] == "doc-1"
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    assert (counts["documents_in_corpus"], counts["documents_analysed"], counts["documents_skipped"]) == (8, 7, 1)
    assert counts["skipped_by_reason"] == {"empty": 1} and counts["skipped_examples"] == ["doc-0"]
    assert counts["documents_cut"] == 3 and counts["windows"] == len(frame) and counts["tokens"] == sum(LENGTHS)
    assert counts["shards"] == 3 and len(list((out / "records").glob("*.parquet"))) == 3
    printed = capsys.readouterr()
    assert json.loads(printed.out)["counts"] == counts
    assert "7 of all 8 documents analysed; 1 skipped (empty: 1); 3 longer than 64 tokens cut" in printed.err
    # the records are the study's own numbers for each window, traced alone
    lens = Lens(tiny_model("repo", seed=1, context=CONTEXT), ByteTokenizer())
    row = frame[(frame.document == 5) & (frame.window == 1)].iloc[0]
    window_text = _texts()[5].encode()[row.token_start:row.token_end]
    from repo_lens.analysis import range_stats

    expected_ranges = range_stats(lens.trace(list(window_text), progress=False).positions)
    np.testing.assert_allclose(np.stack(row.range_by_layer_head), expected_ranges, rtol=1e-5)


def test_windows_overlap_with_a_stride_and_a_selection_is_counted(small_model, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_analyze(small_model, corpus, out, "--overlap", "16", "--sample", "3", "--seed", "4")) == 0
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["documents_selected"] == 3 and counts["selection"] == "3 of 8 documents at random (--sample 3 --seed 4)"
    frame = pd.read_parquet(out / "records")
    assert frame.document.nunique() <= 3 and counts["stride"] == 48 and counts["window_tokens"] == 64
    long = frame[frame.document.isin([5])]
    if len(long):
        assert long.token_start.tolist() == list(range(0, 48 * len(long), 48))
    out = tmp_path / "limited"
    assert main(_analyze(small_model, corpus, out, "--limit", "2")) == 0
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["selection"] == "the first 2 of 8 documents (--limit 2)" and counts["documents_analysed"] == 1


def test_an_interrupted_run_resumes_at_its_unfinished_shards(lens, tmp_path, monkeypatch):
    out, calls = tmp_path / "run", []
    study = register_study(Study("count-windows", "windows seen", lambda lens, windows, options: [
        calls.append(window.document.index) or {"length": len(window.ids)} for window in windows],
        lambda records, options: {"total": sum(record["length"] for record in records)}), replace=True)
    real_write = shards.write_shard

    def fail_on_third(out, index, records, counts):
        if index == 2:
            raise OSError(28, "No space left on device")
        real_write(out, index, records, counts)

    monkeypatch.setattr("repo_lens.studies.runner.write_shard", fail_on_third)
    with pytest.raises(OSError):
        analyze(lens, study, _texts(), out=out, run=RunOptions(shard_size=2, progress=False))
    assert sorted(path.name for path in (out / "shards").iterdir()) == ["part-000000.json", "part-000001.json"]
    monkeypatch.setattr("repo_lens.studies.runner.write_shard", real_write)
    calls.clear()
    result = analyze(lens, study, _texts(), out=out, run=RunOptions(shard_size=2, progress=False))
    assert sorted(set(calls)) == [4, 5, 6, 7]  # only the documents of shards 2 and 3
    assert result.summary["total"] == sum(LENGTHS) and result.counts["windows"] == len(result.records())
    with pytest.raises(InputError, match="holds a run with other settings"):
        analyze(lens, study, _texts(), out=out, run=RunOptions(shard_size=2, progress=False),
                windows=WindowSpec(stride=32))


USER_STUDY = '''
    """A study of my own: how far the last layer's positions run past the window's length."""
    import numpy as np
    from repo_lens.studies import Option, Study, register_study, trace_windows

    def record(lens, windows, options):
        records = []
        for window, trace in zip(windows, trace_windows(lens, windows, options)):
            stretch = float(np.ptp(trace.positions[-1], axis=-1).mean()) / len(trace)
            records.append({"stretch": stretch, "long": stretch > options["threshold"],
                            **({"note": "first"} if window.window == 0 and window.document.index == 2 else {})})
        return records

    def summary(records, options):
        values = [record["stretch"] for record in records]
        return {"mean_stretch": float(np.mean(values)), "windows": len(values)}

    register_study(Study("stretch", "positions' spread per token in the last layer", record, summary,
                         options=(Option("threshold", 0.5, "stretch above which a window is long", float, low=0),)))
'''


def test_a_users_study_registers_from_its_module_and_runs_through_the_cli(small_model, corpus, tmp_path,
                                                                          monkeypatch, capsys):
    (tmp_path / "mystudy.py").write_text(textwrap.dedent(USER_STUDY))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    argv = ["analyze", "--study-module", "mystudy", "--study", "stretch", "--study-option", "threshold=0.25",
            "--corpus", str(corpus), "--model", str(small_model), "--out", str(out), "--device", "cpu", "--quiet",
            "--shard-size", "2"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    frame = pd.read_parquet(out / "records")  # "note" only in one shard: every shard gets the column
    assert summary["windows"] == len(frame) == summary["counts"]["windows"] and frame.note.notna().sum() == 1
    assert (frame.long == (frame.stretch > 0.25)).all()
    assert json.loads((out / "run.json").read_text())["options"] == {"threshold": 0.25, "beyond_context": False}
    assert main(argv) == 0  # resumes: nothing left to compute, the same summary
    assert json.loads(capsys.readouterr().out) == summary
    assert main([*argv[:6], "threshold=bad", *argv[7:]]) == 2
    assert "option threshold: 'bad' is not float" in capsys.readouterr().err


def test_a_study_from_an_entry_point(lens, tmp_path, monkeypatch):
    study = Study("from-package", "a study an installed package offers",
                  lambda lens, windows, options: [{"n": len(window.ids)} for window in windows])
    point = SimpleNamespace(name="from-package", load=lambda: study)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"from-package": point})
    assert "from-package" in registry.study_names()
    result = analyze(lens, "from-package", ["one text", "two"], out=tmp_path / "run", run=RunOptions(progress=False))
    assert result.records().n.tolist() == [8, 3] and result.summary["counts"]["documents_analysed"] == 2


def test_the_records_open_as_a_datasets_dataset(lens, tmp_path):
    datasets = pytest.importorskip("datasets")
    result = analyze(lens, "positions", _texts(), out=tmp_path / "run", run=RunOptions(progress=False, shard_size=3))
    loaded = datasets.load_dataset("parquet", data_files=[str(path) for path in result.record_files],
                                   split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(loaded) == result.counts["windows"] and loaded[0]["document"] == 1


def test_a_checkpoint_with_a_bos_reads_it_at_the_start_of_every_window(olmo2_dir, tmp_path):
    import repo_lens

    hf = repo_lens.load(str(olmo2_dir), device="cpu")
    text = " ".join(["the needle is in the haystack ."] * 40)
    result = analyze(hf, "positions", [text], out=tmp_path / "run", run=RunOptions(progress=False),
                     windows=WindowSpec(size=50))
    frame = result.records()
    assert len(frame) > 1 and (frame.n_tokens <= 51).all() and frame.token_start.iloc[1] == 50
    assert result.counts["tokens_traced"] == result.counts["tokens"] + len(frame)  # one BOS per window


def test_the_registry_drives_the_help_and_the_docs_table():
    from repo_lens.cli import build_parser

    help_text = build_parser()._subparsers._group_actions[0].choices["analyze"].format_help()
    for name in ("niah", "positions", "boundaries", "bands"):
        assert f"{name}:" in help_text
    assert "--lengths" in help_text and "--chunk" in help_text and "--query-rows" in help_text
    page = (importlib.import_module("pathlib").Path(__file__).resolve().parents[2] / "docs" / "guide"
            / "corpus-studies.md").read_text()
    builtin = {name: study for name, study in registry.registered().items() if name in ("niah", "positions",
                                                                                          "boundaries", "bands")}
    table = study_table(builtin)
    assert table in page, "docs/guide/corpus-studies.md's table differs from study_table(); paste it in"


@pytest.mark.parametrize("argv, message, loads", [
    (["--study", "vibes"], "argument --study: invalid choice: 'vibes'", False),
    (["--study", "positions", "--corpus", "{tmp}/missing.jsonl"], "missing.jsonl: no such file", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--text-field", "body"],
     "has no field 'body'; its fields are: text, name; pass --text-field", False),
    (["--study", "positions", "--corpus", "{empty}"], "holds no text", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--lengths", "64"], "--lengths applies to the niah study", False),
    (["--study", "niah", "--corpus", "{jsonl}"], "--corpus applies to studies that read a corpus, not niah", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--study-option", "chunk"], "write NAME=VALUE", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--study-option", "size=3"], "has no option 'size'", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--sample", "2", "--limit", "2"], "not both", False),
    (["--study", "positions", "--corpus", "{jsonl}", "--stride", "100"], "--stride 100 is longer than the window",
     True),
    (["--study", "positions", "--corpus", "{jsonl}", "--window", "65"], "use --window 64 or less", True),
    (["--study", "positions", "--corpus", "{jsonl}", "--overlap", "64"], "--overlap 64 leaves no new tokens", True),
    (["--study-module", "no_such_module_here", "--study", "x"], "--study-module no_such_module_here: cannot import",
     False),
])
def test_bad_input_is_one_error_line_naming_the_fix(argv, message, loads, small_model, corpus, tmp_path, capsys,
                                                     monkeypatch):
    import repo_lens

    loaded = []
    real_load = repo_lens.load
    monkeypatch.setattr(repo_lens, "load", lambda *args, **kwargs: loaded.append(args) or real_load(*args, **kwargs))
    (tmp_path / "empty.txt").write_text("\n\n")
    places = {"{tmp}": str(tmp_path), "{jsonl}": str(corpus), "{empty}": str(tmp_path / "empty.txt")}
    argv = [places.get(part, part.replace("{tmp}", str(tmp_path))) for part in argv]
    assert main(["analyze", *argv, "--model", str(small_model), "--out", str(tmp_path / "out"), "--quiet",
                 "--device", "cpu"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert bool(loaded) == loads
    assert not (tmp_path / "out" / "records").exists()


def test_options_are_checked_from_python_too(lens, tmp_path):
    with pytest.raises(InputError, match="option chunk: every value must be within \\[2, inf\\], got 1"):
        analyze(lens, "positions", ["text"], out=tmp_path / "a", options={"chunk": 1}, run=RunOptions(progress=False))
    with pytest.raises(InputError, match="has no option 'lengths'"):
        analyze(lens, "positions", ["text"], out=tmp_path / "b", options={"lengths": [3]},
                run=RunOptions(progress=False))
    with pytest.raises(InputError, match="register_study takes"):
        register_study("not a study")
    with pytest.raises(InputError, match="registered already"):
        register_study(Study("positions", "clash", lambda lens, inputs, options: []))
    assert Option("n", 1, "", int, low=0).parse("3") == 3


def test_the_registry_starts_with_the_builtin_studies_and_niah_sweeps_lengths_depths_and_seeds(lens):
    from repo_lens.studies.builtin import BUILTIN_STUDIES, NIAH

    assert [study.name for study in BUILTIN_STUDIES] == ["niah", "positions", "boundaries", "bands"]
    assert all(registry.registered()[study.name] is study for study in BUILTIN_STUDIES)
    options = {"lengths": [16, 32], "depths": [0.0, 1.0], "seeds": [7], "beyond_context": False}
    assert NIAH.items(lens, options) == [{"length": length, "depth": depth, "seed": 7}
                                         for length in (16, 32) for depth in (0.0, 1.0)]  # lengths outermost
    with pytest.raises(InputError, match=f"--lengths 65 is longer than the model's context of {CONTEXT}"):
        NIAH.items(lens, {**options, "lengths": [64, 65]})
    assert len(NIAH.items(lens, {**options, "lengths": [64, 65], "beyond_context": True})) == 4



def test_a_damaged_parquet_shard_is_named_on_resume(small_model, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    argv = _analyze(small_model, corpus, out, "--shard-size", "4")
    assert main(argv) == 0
    damaged = sorted((out / "records").iterdir())[1]
    damaged.write_bytes(damaged.read_bytes()[:100])
    capsys.readouterr()
    assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{damaged} is not a readable Parquet shard" in line and "delete it and shards/part-000001.json" in line


def test_word_boundaries_over_windows_cut_the_gold_words_with_the_text(lens, tmp_path, monkeypatch):
    from repo_lens.data.corpora import Sentence

    words = ["中国", "人民", "新年", "讲话", "希望"] * 5  # 50 CJK characters, 150 bytes: windows of 21, 21 and 8
    monkeypatch.setattr("repo_lens.data.peoples_daily", lambda *a, **k: [Sentence(words, ["n"] * 25, "".join(words))])
    result = analyze(lens, "boundaries", out=tmp_path / "run", run=RunOptions(progress=False))
    frame = result.records()
    assert frame.char_end.tolist() == [21, 42, 50] and (frame.token_end - frame.token_start).tolist() == [63, 63, 24]
    # every gap between two characters of a window is scored; the gaps at the two cuts are in no window
    assert result.summary["n_gaps_gold"] == result.summary["n_gaps_jieba"] == 49 - 2
    labels = [label for window in frame.gold_labels for label in window]
    assert sum(labels) == len([end for end in range(2, 50, 2) if end not in (21, 42)])  # word ends inside windows
