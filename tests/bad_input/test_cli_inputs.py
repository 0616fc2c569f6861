"""Issue 13, the command line: every bad argument or file is one ``repo-lens: error: ...`` line on
stderr with a non-zero exit, nothing is written, and no traceback ever reaches the user."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import repo_lens
from repo_lens.cli import main

LOCK = ".repo_lens.lock"  # the run lock's file; taking the lock is not writing a result


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # {model}, {tmp}, {file} (an existing file), {latin1} (a non-UTF-8 file), {run} (a run)
    message: str  # a piece of the one error line
    loads_model: bool = False  # False: refused before the model is loaded (nothing runs, then fails)


ANALYZE = ("analyze", "--model", "{model}", "--quiet", "--device", "cpu")
NIAH = (*ANALYZE, "--study", "niah", "--out", "{tmp}/out")
POSITIONS = (*ANALYZE, "--study", "positions", "--out", "{tmp}/out")
TRACE = ("trace", "--model", "{model}", "--device", "cpu")

CASES = {
    # nonsense numbers
    "cli-tiny-layers-0": Case(("tiny", "{tmp}/ckpt", "--layers", "0"), "argument --layers: must be within [1, 256], got 0"),
    "cli-tiny-layers-negative": Case(("tiny", "{tmp}/ckpt", "--layers", "-2"), "argument --layers: must be within [1, 256], got -2"),
    "cli-tiny-layers-not-a-number": Case(("tiny", "{tmp}/ckpt", "--layers", "two"),
                                         "argument --layers: expected a whole number within [1, 256], got 'two'"),
    "cli-train-steps-negative": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--steps", "-1"),
                                     "argument --steps: must be ≥ 1, got -1"),
    "cli-train-steps-0": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--steps", "0"),
                              "argument --steps: must be ≥ 1, got 0"),
    "cli-train-position-lr-scale-0": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--position-lr-scale",
                                            "0"), "argument --position-lr-scale: must be > 0 and ≤ 1000, got 0"),
    "cli-train-position-lr-scale-nan": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--position-lr-scale",
                                              "nan"), "argument --position-lr-scale: must be > 0 and ≤ 1000, got nan"),
    "cli-train-position-init-std-word": Case(("train", "--preset", "tiny", "--out", "{tmp}/run",
                                               "--position-init-std", "wide"),
                                              "argument --position-init-std: expected a number > 0 and ≤ 10, got 'wide'"),
    "cli-train-threads-0": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--threads", "0"),
                                "argument --threads: must be within [1, 256], got 0"),
    "cli-analyze-samples-0": Case((*POSITIONS, "--samples", "0"), "argument --samples: must be ≥ 1, got 0"),
    "cli-analyze-samples-negative": Case((*POSITIONS, "--samples", "-3"), "argument --samples: must be ≥ 1, got -3"),
    "cli-analyze-samples-fraction": Case((*POSITIONS, "--samples", "2.5"),
                                         "argument --samples: expected a whole number ≥ 1, got '2.5'"),
    "cli-analyze-batch-size-0": Case((*NIAH, "--batch-size", "0"), "argument --batch-size: must be ≥ 1, got 0"),
    "cli-reproduce-batch-size-negative": Case(("reproduce", "--out", "{tmp}/out", "--batch-size", "-4"),
                                              "argument --batch-size: must be ≥ 1, got -4"),
    # comma lists
    "cli-analyze-lengths-empty": Case((*NIAH, "--lengths", ""), "argument --lengths: expected a comma-separated list"),
    "cli-analyze-lengths-blank-item": Case((*NIAH, "--lengths", "512,"),
                                           "argument --lengths: expected a comma-separated list such as 256,512, got '512,'"),
    "cli-analyze-lengths-0": Case((*NIAH, "--lengths", "0,512"), "argument --lengths: every value must be within [1, 2097152], got 0"),
    "cli-analyze-lengths-not-numbers": Case((*NIAH, "--lengths", "long"), "argument --lengths: 'long' is not a whole number"),
    "cli-analyze-lengths-fraction": Case((*NIAH, "--lengths", "256.5"), "argument --lengths: '256.5' is not a whole number"),
    "cli-analyze-depths-above-1": Case((*NIAH, "--depths", "0,1.5"), "argument --depths: every value must be within [0, 1], got 1.5"),
    "cli-analyze-depths-negative": Case((*NIAH, "--depths", "-0.1"), "argument --depths: every value must be within [0, 1], got -0.1"),
    "cli-analyze-depths-nan": Case((*NIAH, "--depths", "nan"), "argument --depths: every value must be within [0, 1], got nan"),
    "cli-analyze-depths-empty": Case((*NIAH, "--depths", " "), "argument --depths: expected a comma-separated list"),
    "cli-analyze-seeds-negative": Case((*NIAH, "--seeds", "-1"),
                                       "argument --seeds: every value must be within [0, 4294967295], got -1"),
    "cli-tiny-seed-negative": Case(("tiny", "{tmp}/ckpt", "--seed", "-1"), "argument --seed: must be within [0, 4294967295]"),
    "cli-train-seed-too-large": Case(("train", "--preset", "tiny", "--out", "{tmp}/run", "--seed", str(2**64)),
                                     f"argument --seed: must be within [0, 4294967295], got {2**64}"),
    "cli-analyze-seeds-empty": Case((*NIAH, "--seeds", ""), "argument --seeds: expected a comma-separated list"),
    # output paths
    "cli-tiny-directory-empty": Case(("tiny", ""), "argument directory: must name a directory, got an empty string"),
    "cli-tiny-directory-is-a-file": Case(("tiny", "{file}"), "{file} is a file, not a directory"),
    "cli-tiny-directory-under-a-file": Case(("tiny", "{file}/ckpt"), "{file} is a file, so nothing can be written under it"),
    "cli-train-out-empty": Case(("train", "--preset", "tiny", "--out", ""), "argument --out: must name a directory"),
    "cli-analyze-out-is-a-file": Case((*ANALYZE, "--study", "niah", "--out", "{file}"),
                                      "argument --out: {file} is a file, not a directory"),
    "cli-analyze-out-under-a-file": Case((*ANALYZE, "--study", "niah", "--out", "{file}/deeper/out"),
                                         "argument --out: {file} is a file, so nothing can be written under it"),
    "cli-reproduce-out-is-a-file": Case(("reproduce", "range_stats", "--out", "{file}"), "argument --out: {file} is a file"),
    "cli-trace-save-onto-a-directory": Case((*TRACE, "--text", "hello", "--save", "{tmp}"),
                                            "argument --save: {tmp} is a directory; give a file name"),
    "cli-trace-save-under-a-file": Case((*TRACE, "--text", "hello", "--save", "{file}/t.safetensors"),
                                        "argument --save: {file} is a file, so nothing can be written under it"),
    "cli-trace-save-empty": Case((*TRACE, "--text", "hello", "--save", ""), "argument --save: must name a file"),
    "cli-trace-truncate-and-beyond-context": Case((*TRACE, "--text", "hi", "--truncate", "--beyond-context"),
                                                  "argument --beyond-context: not allowed with argument --truncate"),
    # text and text files
    "cli-trace-text-invalid-utf8": Case((*TRACE, "--text", "caf\udce9"), "argument --text: is not valid UTF-8"),
    "cli-trace-nothing-to-trace": Case(TRACE, "nothing to trace: pass --text"),
    "cli-trace-text-empty": Case((*TRACE, "--text", " \n"), "argument --text: is empty; pass some text"),
    "cli-trace-model-empty": Case(("trace", "--model", "", "--text", "hi"), "argument --model: must name a checkpoint"),
    "cli-reproduce-model-empty": Case(("reproduce", "--model", "", "--out", "{tmp}/out"), "argument --model: must name"),
    "cli-trace-text-and-file": Case((*TRACE, "--text", "a", "--file", "{file}"), "give either --text or --file, not both"),
    "cli-trace-file-missing": Case((*TRACE, "--file", "{tmp}/missing.txt"), "--file {tmp}/missing.txt: no such file"),
    "cli-trace-file-not-utf8": Case((*TRACE, "--file", "{latin1}"), "--file {latin1} is not UTF-8 text (byte 0xe9 at offset 3)"),
    "cli-analyze-file-missing": Case((*POSITIONS, "--file", "{tmp}/missing.txt"), "--file {tmp}/missing.txt: no such file"),
    "cli-analyze-file-not-utf8": Case((*POSITIONS, "--file", "{latin1}"), "--file {latin1} is not UTF-8 text"),
    "cli-analyze-file-is-a-directory": Case((*POSITIONS, "--file", "{tmp}"), "--file {tmp} is a directory"),
    "cli-analyze-file-without-text": Case((*POSITIONS, "--file", "{blank}"), "{blank} holds no text"),
    # over the context: the CLI's flags, not the API's arguments
    "cli-trace-over-context": Case((*TRACE, "--text", "x" * 600),
                                   "600 tokens, longer than the model's context of 512; shorten it, or pass --truncate "
                                   "to keep the first 512 tokens, or pass --beyond-context", loads_model=True),
    "cli-analyze-niah-over-context": Case((*NIAH, "--lengths", "256,900", "--depths", "0"),
                                          "--lengths 900 is longer than the model's context of 512; use lengths up "
                                          "to 512, or pass --beyond-context", loads_model=True),
    # usage
    "cli-unknown-command": Case(("bogus",), "argument command: invalid choice: 'bogus'"),
    "cli-missing-required-option": Case(("trace", "--text", "hi"), "the following arguments are required: --model"),
    "cli-unknown-study": Case((*ANALYZE, "--study", "vibes", "--out", "{tmp}/out"), "argument --study: invalid choice"),
}


@pytest.fixture
def places(tmp_path, byte_model_dir) -> dict[str, str]:
    (tmp_path / "a-file.txt").write_text("plain text")
    (tmp_path / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    return {"model": str(byte_model_dir), "tmp": str(tmp_path), "file": str(tmp_path / "a-file.txt"),
            "latin1": str(tmp_path / "latin1.txt"), "blank": str(tmp_path / "blank.txt")}


@pytest.fixture
def load_calls(monkeypatch) -> list:
    calls: list = []
    real_load = repo_lens.load
    monkeypatch.setattr(repo_lens, "load", lambda *args, **kwargs: calls.append(args) or real_load(*args, **kwargs))
    return calls


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else b"<dir>"
            for path in sorted(folder.rglob("*")) if path.name != LOCK}


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err.splitlines()


def assert_one_error_line(lines: list[str], expected: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith("repo-lens: error: "), lines
    assert expected in lines[0], lines
    assert "Traceback" not in lines[0] and "=True" not in lines[0]  # the CLI's flags, never the API's arguments


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_argument_is_one_line_and_writes_nothing(case, places, load_calls, tmp_path, capsys):
    before = snapshot(tmp_path)
    code, lines = run_cli([part.format(**places) for part in case.argv], capsys)
    assert code == 2
    assert_one_error_line(lines, case.message.format(**places))
    assert snapshot(tmp_path) == before
    assert bool(load_calls) == case.loads_model


@pytest.fixture
def finished_run(byte_model_dir, tmp_path) -> tuple[list[str], Path]:
    """A finished two-shard `analyze --study positions` run and the command that resumes it."""
    text = tmp_path / "text.txt"
    text.write_text("A first paragraph of plain text.\n\nA second paragraph, a little longer than the first.")
    out = tmp_path / "run"
    argv = [*(part.format(model=byte_model_dir) for part in ANALYZE), "--study", "positions",
            "--file", str(text), "--out", str(out), "--shard-size", "1"]
    assert main(argv) == 0
    return argv, out


@pytest.mark.parametrize("damage", ["cli-resume-corrupt-run-json", "cli-resume-truncated-item",
                                    "cli-resume-item-not-an-object"])
def test_resuming_a_damaged_run_names_the_file(damage, finished_run, capsys):
    argv, out = finished_run
    capsys.readouterr()
    if damage == "cli-resume-corrupt-run-json":
        damaged = out / "run.json"
        damaged.write_text(damaged.read_text()[:7])
    else:
        damaged = sorted((out / "shards").iterdir())[1]  # a shard's counts (tests/studies has the records' cases)
        damaged.write_text(damaged.read_text()[:20] if damage == "cli-resume-truncated-item" else "[1, 2]")
    before = snapshot(out)
    code, lines = run_cli(argv, capsys)
    assert code == 2
    assert_one_error_line(lines, f"{damaged} ")
    assert "delete it" in lines[0] and "choose another --out directory" in lines[0]
    assert snapshot(out) == before


def test_the_context_flags_the_error_names_do_work(byte_model_dir, capsys, tmp_path):
    from repo_lens import Trace

    for flag, tokens in (("--truncate", 512), ("--beyond-context", 600)):
        saved = tmp_path / f"{flag.strip('-')}.safetensors"
        assert main(["trace", "--model", str(byte_model_dir), "--device", "cpu", "--text", "x" * 600, flag,
                     "--save", str(saved)]) == 0, capsys.readouterr().err
        assert f"tokens: {tokens} " in capsys.readouterr().out
        assert len(Trace.load(saved)) == tokens


def test_an_os_error_at_the_boundary_is_one_line_naming_the_path(monkeypatch, capsys):
    def unreadable():
        raise PermissionError(13, "Permission denied", "/srv/models/zoo")

    monkeypatch.setattr("repo_lens.zoo.zoo_entries", unreadable)
    code, lines = run_cli(["zoo"], capsys)
    assert code == 2
    assert_one_error_line(lines, "/srv/models/zoo: Permission denied; check the path, its permissions")


def test_an_internal_error_is_one_line_with_exit_3_and_a_traceback_only_in_debug(monkeypatch, capsys):
    def broken():
        return {}["missing key"]

    monkeypatch.setattr("repo_lens.zoo.zoo_entries", broken)
    monkeypatch.delenv("REPO_LENS_DEBUG", raising=False)
    code, lines = run_cli(["zoo"], capsys)
    assert code == 3
    assert lines == ["repo-lens: internal error: KeyError: 'missing key' (please report; rerun with "
                     "REPO_LENS_DEBUG=1 for the traceback)"]
    monkeypatch.setenv("REPO_LENS_DEBUG", "1")
    with pytest.raises(KeyError, match="missing key"):
        main(["zoo"])


def test_ctrl_c_is_one_line_with_exit_130(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("repo_lens.zoo.zoo_entries", interrupted)
    code, lines = run_cli(["zoo"], capsys)
    assert code == 130
    assert lines == ["repo-lens: interrupted (analyze and train resume where they stopped when rerun)"]


def test_a_real_process_shows_no_traceback(byte_model_dir, tmp_path):
    """The one subprocess, as a user runs it: a --text of bytes that are not UTF-8 (what a shell passes
    for Latin-1 input) gives exit 2 and one error line, no traceback and no trace file."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    environment.pop("REPO_LENS_DEBUG", None)
    saved = tmp_path / "t.safetensors"
    argv = [sys.executable, "-m", "repo_lens.cli", "trace", "--model", str(byte_model_dir), "--device", "cpu",
            "--text", "café".encode("latin-1"), "--save", str(saved)]
    result = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.splitlines() == ["repo-lens: error: argument --text: is not valid UTF-8; pass UTF-8 text, "
                                          "or save it as a UTF-8 file and use --file (see repo-lens trace --help)"]
    assert not saved.exists()



def test_the_api_words_the_same_error_with_its_own_arguments():
    import copy

    from repo_lens.errors import ContextLengthError, InputError

    error = ContextLengthError(600, 512)
    assert isinstance(error, InputError)
    assert str(error) == ("the input is 600 tokens, longer than the model's context of 512; shorten it, or pass "
                          "truncate=True to keep the first 512 tokens, or pass allow_beyond_context=True to run all "
                          "of them (extrapolation beyond the trained length)")
    assert error.explain({}) == "the input is 600 tokens, longer than the model's context of 512; shorten it"
    assert str(copy.deepcopy(error)) == str(error)  # rebuilt from its fields (as when sent between processes)
