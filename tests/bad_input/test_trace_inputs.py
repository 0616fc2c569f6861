"""Bad input at the trace-file, index, text and leftover boundaries (issue 13): one case per bad input.

Case ids start with their class (``trace-file-``, ``index-``, ``text-``, ``leftover-``), so
``pytest --collect-only -q tests/bad_input/test_trace_inputs.py | grep -c trace-file-`` counts a class.
Trace files are written here with safetensors directly (not with Trace.save), so each case
breaks exactly one rule of the format.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from safetensors.numpy import save_file

import repo_lens
from repo_lens import atomic
from repo_lens.analysis import chunk_patterns, select_heads
from repo_lens.analysis.attention_mass import validate_layers
from repo_lens.data.spans import encode_with_offsets
from repo_lens.errors import InputError, TraceFileError
from repo_lens.inputs import check_text
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.registry import default_layer_kinds, mechanism_kinds
from repo_lens.plots import position_scatter_figure, spaced_tokens_figure
from repo_lens.plots.style import check_layer, select_head
from repo_lens.trace import TRACE_MARKER, Trace, flag_nonfinite
from repo_lens.trace_file import MAX_HEADER_BYTES, MAX_JSON_DEPTH

L, H, T = 2, 3, 4
KINDS = default_layer_kinds(mechanism_kinds()[0], L)


def good_parts() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    document = {"format_version": 1, "tokens": ["a", "b", "c", "d"], "layer_kinds": list(KINDS),
                "meta": {"name": "hand-made", "warnings": [], "truncation": None}, "spans": {"needle": [1, 3]}}
    arrays = {"positions": np.arange(L * H * T, dtype=np.float32).reshape(L, H, T),
              "token_ids": np.array([5, 6, 7, 8], dtype=np.int64),
              "extras.increments": np.ones((L, H, T), dtype=np.float32),
              "extras.char_offsets": np.zeros((T, 2), dtype=np.int64)}
    return document, arrays


def write(path: Path, document: Any, arrays: dict[str, np.ndarray], header: str | None = None) -> Path:
    save_file(arrays, str(path), metadata={TRACE_MARKER: json.dumps(document) if header is None else header})
    return path


def edit_document(**changes: Any) -> Callable[[Path], Path]:
    """A file whose trace document has ``changes`` (a value of ``...`` removes the field)."""
    def make(path: Path) -> Path:
        document, arrays = good_parts()
        for name, value in changes.items():
            if value is ...:
                del document[name]
            else:
                document[name] = value
        return write(path, document, arrays)
    return make


def edit_meta(**changes: Any) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        document, arrays = good_parts()
        document["meta"].update(changes)
        return write(path, document, arrays)
    return make


def edit_arrays(**changes: Any) -> Callable[[Path], Path]:
    """A file whose arrays have ``changes`` (names with '__' for '.'; None removes the array)."""
    def make(path: Path) -> Path:
        document, arrays = good_parts()
        for name, value in changes.items():
            name = name.replace("__", ".")
            if value is None:
                del arrays[name]
            else:
                arrays[name] = value
        return write(path, document, arrays)
    return make


def raw_header(text: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        return write(path, None, good_parts()[1], header=text)
    return make


def raw_safetensors_header(text: str) -> Callable[[Path], Path]:
    """A file of one safetensors header, ``text``, and no data."""
    def make(path: Path) -> Path:
        path.write_bytes(len(text.encode()).to_bytes(8, "little") + text.encode())
        return path
    return make


def claimed_header(size: int, file_size: int) -> Callable[[Path], Path]:
    """A (sparse) file whose first 8 bytes claim a safetensors header of ``size`` bytes."""
    def make(path: Path) -> Path:
        with open(path, "wb") as file:
            file.write(size.to_bytes(8, "little"))
            file.truncate(file_size)
        return path
    return make


def directory(path: Path) -> Path:
    path.mkdir()
    return path


FLOAT_POSITIONS = np.zeros((L, H, T), dtype=np.float32)
TRACE_FILES = [
    ("version-zero", edit_document(format_version=0), "'format_version' is 0 (int); expected an int in (1,)"),
    ("version-negative", edit_document(format_version=-5), "'format_version' is -5 (int)"),
    ("version-bool", edit_document(format_version=True), "'format_version' is True (bool)"),
    ("version-float", edit_document(format_version=1.0), "'format_version' is 1.0 (float)"),
    ("version-string", edit_document(format_version="1"), "'format_version' is '1' (str)"),
    ("version-missing", edit_document(format_version=...), "'format_version' is None"),
    ("version-newer", edit_document(format_version=2), "is trace format 2; this repo_lens reads format (1,). Upgrade"),
    ("tokens-one-string", edit_document(tokens="abcd"), "'tokens' is 'abcd' (str); expected a list of 4 strings"),
    ("tokens-too-few", edit_document(tokens=["a", "b"]), "'tokens' is a list of 2 entries; expected 4"),
    ("tokens-not-strings", edit_document(tokens=["a", 2, "c", "d"]), "'tokens[1]' is 2 (int); expected a string"),
    ("tokens-missing", edit_document(tokens=...), "'tokens' is missing"),
    ("kind-unknown", edit_document(layer_kinds=[KINDS[0], "no-such-kind"]),
     "'layer_kinds[1]' is 'no-such-kind' (str); expected a registered kind"),
    ("kind-not-string", edit_document(layer_kinds=[KINDS[0], 3]), "'layer_kinds[1]' is 3 (int)"),
    ("kinds-too-many", edit_document(layer_kinds=list(KINDS) * 2), "'layer_kinds' is a list of 4 kinds; expected 2"),
    ("kinds-one-string", edit_document(layer_kinds=KINDS[0]), "'layer_kinds' is"),
    ("kinds-missing", edit_document(layer_kinds=...), "'layer_kinds' is missing"),
    ("span-past-end", edit_document(spans={"needle": [2, 9]}),
     "'spans.needle' is [2, 9]; expected 0 <= start <= end <= 4"),
    ("span-reversed", edit_document(spans={"needle": [3, 1]}), "'spans.needle' is [3, 1]"),
    ("span-negative", edit_document(spans={"needle": [-1, 2]}), "'spans.needle' is [-1, 2]"),
    ("span-float", edit_document(spans={"needle": [0.5, 2]}),
     "'spans.needle' is [0.5, 2] (list); expected [start, end], two ints"),
    ("span-bool", edit_document(spans={"needle": [False, True]}), "two ints"),
    ("span-three-numbers", edit_document(spans={"needle": [0, 1, 2]}), "two ints"),
    ("spans-a-list", edit_document(spans=[[0, 1]]), "'spans' is [[0, 1]] (list); expected a JSON object"),
    ("meta-a-list", edit_document(meta=["x"]), "'meta' is ['x'] (list); expected a JSON object"),
    ("meta-warnings-a-string", edit_meta(warnings="careful"),
     "'meta.warnings' is 'careful' (str); expected a list of strings"),
    ("meta-truncation-a-number", edit_meta(truncation=5), "'meta.truncation' is 5 (int)"),
    ("unknown-field", edit_document(colour="red"), "trace field 'colour' is present; expected only the fields"),
    ("document-a-list", raw_header("[1, 2]"), "'repo_lens_trace' is [1, 2] (list); expected a JSON object"),
    ("document-invalid-json", raw_header('{"format_version": 1,'), "damaged trace header (invalid JSON"),
    ("document-huge-integer", raw_header('{"format_version": ' + "9" * 5000 + "}"), "damaged trace header (invalid JSON"),
    ("outer-header-nested-deeply", raw_safetensors_header('{"__metadata__": {"repo_lens_trace": "{}"}, "x": '
                                                          + "[" * 1000 + "]" * 1000 + "}"),
     "is not a readable repo_lens trace (corrupt, truncated or not safetensors"),
    ("document-nested-deeply", raw_header("[" * 100_000 + "]" * 100_000),
     f"JSON nested 100000 levels deep; expected at most {MAX_JSON_DEPTH} levels"),
    ("document-nested-in-meta", edit_meta(deep=json.loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))),
     f"JSON nested {MAX_JSON_DEPTH + 3} levels deep"),
    ("ids-float", edit_arrays(token_ids=np.array([5.0, 6.5, 7.0, 8.0], dtype=np.float32)),
     "'token_ids' is an array of dtype float32; expected integer ids"),
    ("ids-integral-float", edit_arrays(token_ids=np.array([5.0, 6.0, 7.0, 8.0])),
     "'token_ids' is an array of dtype float64"),
    ("ids-bool", edit_arrays(token_ids=np.array([True, False, True, True])), "'token_ids' is an array of dtype bool"),
    ("ids-too-few", edit_arrays(token_ids=np.array([5, 6], dtype=np.int64)),
     "'token_ids' is an array of shape (2,); expected shape (4,)"),
    ("ids-negative", edit_arrays(token_ids=np.array([5, -6, 7, 8], dtype=np.int64)),
     "'token_ids' is an array holding the negative id -6"),
    ("ids-missing", edit_arrays(token_ids=None), "'token_ids' is missing"),
    ("positions-integers", edit_arrays(positions=np.zeros((L, H, T), dtype=np.int32)),
     "'positions' is an array of dtype int32; expected float32"),
    ("positions-float64", edit_arrays(positions=np.zeros((L, H, T))), "'positions' is an array of dtype float64"),
    ("positions-two-axes", edit_arrays(positions=np.zeros((L, T), dtype=np.float32)),
     "'positions' is an array of shape (2, 4)"),
    ("positions-no-tokens", edit_arrays(positions=np.zeros((L, H, 0), dtype=np.float32)),
     "shape (n_layers, n_heads, T), each at least 1"),
    ("positions-missing", edit_arrays(positions=None), "'positions' is missing"),
    ("extras-increments-flat", edit_arrays(extras__increments=np.zeros(5, dtype=np.float32)),
     "'extras.increments' is an array of shape (5,); expected the shape of positions, (n_layers, n_heads, T) = "
     "(2, 3, 4)"),
    ("extras-increments-per-token", edit_arrays(extras__increments=np.zeros((T, 2), dtype=np.float32)),
     "'extras.increments' is an array of shape (4, 2)"),
    ("extras-other-wrong-length", edit_arrays(extras__char_offsets=np.zeros((T + 1, 2), dtype=np.int64)),
     "'extras.char_offsets' is an array of shape (5, 2); expected the shape of positions, (n_layers, n_heads, T) = "
     "(2, 3, 4), or one row per token, (T, ...) = (4, ...)"),
    ("extras-scalar", edit_arrays(extras__scale=np.zeros((), dtype=np.float32)),
     "'extras.scale' is an array of shape ()"),
    ("unknown-array", edit_arrays(weights=np.zeros(3, dtype=np.float32)),
     "'weights' is an array the format does not have"),
    ("header-too-large", claimed_header(MAX_HEADER_BYTES + 1, MAX_HEADER_BYTES + 64),
     f"exceeds a trace's limit of {MAX_HEADER_BYTES:,}"),
    ("header-past-the-end", claimed_header(1000, 64), "header claims 1,000 bytes, the file has 64"),
    ("shorter-than-a-header", lambda path: path.write_bytes(b"abc") and path, "3 bytes, too short for safetensors"),
    ("a-directory", directory, "no trace file at"),
]


@pytest.mark.parametrize("make,message", [pytest.param(make, message, id=f"trace-file-{name}")
                                          for name, make, message in TRACE_FILES])
def test_bad_trace_file_is_refused(tmp_path, make, message):
    path = make(tmp_path / "bad.safetensors")
    with pytest.raises(TraceFileError) as caught:
        Trace.load(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)  # the file is named
    assert isinstance(caught.value, InputError)


def _circular_meta() -> dict:
    meta: dict = {"runs": [{}]}
    meta["runs"][0]["parent"] = meta
    return meta


SAVE_META = [
    ("save-circular-meta", _circular_meta(), "meta['runs'][0]['parent'] refers back to itself (a circular reference)"),
    ("save-object-in-meta", {"model": {"module": object()}},
     "meta['model']['module'] is of type object, which JSON cannot hold"),
    ("save-set-in-meta", {"tags": {"a"}}, "meta['tags'] is of type set"),
    ("save-tuple-key", {(1, 2): "pair"}, "meta has the key (1, 2) (tuple), not a str"),
]


@pytest.mark.parametrize("meta,message", [pytest.param(meta, message, id=f"trace-file-{name}")
                                          for name, meta, message in SAVE_META])
def test_save_refuses_meta_json_cannot_hold(tmp_path, meta, message):
    document, arrays = good_parts()
    trace = Trace(tokens=document["tokens"], token_ids=arrays["token_ids"], positions=arrays["positions"],
                  layer_kinds=document["layer_kinds"], meta=meta)
    with pytest.raises(InputError) as caught:
        trace.save(tmp_path / "t.safetensors")
    assert message in str(caught.value) and "meta must hold JSON data" in str(caught.value)
    assert not list(tmp_path.iterdir())  # nothing written, no temp file left


CONSTRUCTED = [
    ("float-ids", dict(token_ids=np.array([5.0, 6.5, 7.0, 8.0])), "token_ids must be integers; got dtype float64"),
    ("bool-ids", dict(token_ids=np.array([True, False, True, True])), "token_ids must be integers; got dtype bool"),
    ("tokens-one-string", dict(tokens="abcd"), "tokens must be a list of str"),
    ("tokens-not-strings", dict(tokens=["a", None, "c", "d"]), "tokens must be a list of str"),
    ("span-float", dict(spans={"needle": (0.5, 2)}), "span 'needle' is (0.5, 2); give (start, end), two ints"),
    ("span-bool", dict(spans={"needle": (True, 2)}), "span 'needle' is (True, 2)"),
    ("span-past-end", dict(spans={"needle": (1, 5)}), "span 'needle' is (1, 5); a span needs 0 <= start <= end <= 4"),
    ("span-reversed", dict(spans={"needle": (3, 2)}), "span 'needle' is (3, 2)"),
    ("span-one-number", dict(spans={"needle": 3}), "span 'needle' is 3"),
]


@pytest.mark.parametrize("changes,message", [pytest.param(changes, message, id=f"trace-file-constructor-{name}")
                                             for name, changes, message in CONSTRUCTED])
def test_trace_constructor_refuses_what_a_file_may_not_hold(changes, message):
    document, arrays = good_parts()
    fields = dict(tokens=document["tokens"], token_ids=arrays["token_ids"], positions=arrays["positions"],
                  layer_kinds=document["layer_kinds"])
    with pytest.raises(InputError) as caught:
        Trace(**{**fields, **changes})
    assert message in str(caught.value)


def test_a_well_formed_hand_made_file_loads_with_every_field(tmp_path):
    document, arrays = good_parts()
    trace = Trace.load(write(tmp_path / "good.safetensors", document, arrays))
    assert trace.tokens == document["tokens"] and trace.layer_kinds == list(KINDS)
    assert trace.spans == {"needle": (1, 3)} and trace.meta == document["meta"]
    np.testing.assert_array_equal(trace.positions, arrays["positions"])
    assert trace.token_ids.dtype == np.int64 and trace.token_ids.tolist() == [5, 6, 7, 8]
    assert sorted(trace.extras) == ["char_offsets", "increments"]
    assert "nonfinite_positions" not in trace.meta


def test_nesting_up_to_the_limit_loads(tmp_path):
    document, arrays = good_parts()
    depth = MAX_JSON_DEPTH - 2  # the document and meta are two levels
    document["meta"]["deep"] = json.loads("[" * depth + "]" * depth)
    assert Trace.load(write(tmp_path / "deep.safetensors", document, arrays)).meta["deep"] == document["meta"]["deep"]


def test_nonfinite_positions_are_flagged_on_load_whoever_wrote_the_file(tmp_path):
    document, arrays = good_parts()
    arrays["positions"][1, 2, 0] = np.nan
    arrays["positions"][1, 2, 3] = np.inf
    arrays["positions"][0, 1, 3] = -np.inf
    path = write(tmp_path / "nan.safetensors", document, arrays)  # no flag in the file's meta
    with pytest.warns(UserWarning, match="3 positions are NaN or infinite"):
        trace = Trace.load(path)
    assert trace.meta["nonfinite_positions"] == [[0, 1], [1, 2]]
    assert trace.meta["nonfinite_counts"] == {"positions": 3, "tokens": 2, "heads": 2}  # tokens 0 and 3
    # the same flag Lens.trace records, and loading a flagged file again does not repeat the warning
    expected: dict = {"warnings": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flag_nonfinite(arrays["positions"], expected)
        trace.save(tmp_path / "again.safetensors")
        again = Trace.load(tmp_path / "again.safetensors")
    assert {key: trace.meta[key] for key in expected} == expected
    assert again.meta["warnings"] == expected["warnings"] and len(expected["warnings"]) == 1


def test_a_nonfinite_flag_without_cause_does_not_survive_loading(tmp_path):
    document, arrays = good_parts()
    document["meta"]["nonfinite_positions"] = [[0, 0]]
    document["meta"]["nonfinite_counts"] = {"positions": 1, "tokens": 1, "heads": 1}
    trace = Trace.load(write(tmp_path / "claims.safetensors", document, arrays))
    assert "nonfinite_positions" not in trace.meta and "nonfinite_counts" not in trace.meta


# ---- indices: every public place that takes a layer or head index ----------------------------------

INDEX_TRACE = Trace(tokens=list("abcd"), token_ids=np.arange(4), layer_kinds=list(KINDS),
                    positions=np.arange(24, dtype=np.float32).reshape(2, 3, 4))
INDEX_SITES: dict[str, Callable[[Any], Any]] = {
    "trace-head-layer": lambda value: INDEX_TRACE.head(value, 0),
    "trace-head-head": lambda value: INDEX_TRACE.head(0, value),
    "scatter-layer": lambda value: position_scatter_figure(INDEX_TRACE, layer=value),
    "scatter-head": lambda value: position_scatter_figure(INDEX_TRACE, layer=0, head=value),
    "spaced-head": lambda value: spaced_tokens_figure(INDEX_TRACE, head=value),
    "spaced-layers": lambda value: spaced_tokens_figure(INDEX_TRACE, layers=[0, value]),
    "select-heads-layers": lambda value: select_heads(INDEX_TRACE.positions, layers=value),
    "select-heads-heads": lambda value: select_heads(INDEX_TRACE.positions, heads=[value]),
    "plots-select-head": lambda value: select_head(INDEX_TRACE.positions, value),
    "plots-check-layer": lambda value: check_layer(value, 2),
    "attention-mass-layers": lambda value: validate_layers([0, value], 2),
}
INDEX_VALUES = [
    ("fraction", 1.5, "1.5 is not an integer index (got float)"),
    ("integral-float", 1.0, "1.0 is not an integer index (got float); give the int 1, not 1.0"),
    ("numpy-fraction", np.float64(1.5), "is not an integer index (got float64)"),
    ("numpy-integral-float", np.float32(1.0), "give the int 1, not np.float32(1.0)"),
    ("string", "1", "'1' is not an integer index (got str)"),
    ("bool", True, "True is not an integer index (got bool)"),
    ("none", None, "None is not an integer index (got NoneType)"),
    ("out-of-range", 7, "7 does not exist"),
]


@pytest.mark.parametrize("site,value,message", [
    pytest.param(site, value, message, id=f"index-{site}-{name}")
    for site in INDEX_SITES for name, value, message in INDEX_VALUES
    if (site, name) != ("select-heads-layers", "none")  # layers=None means every layer
])
def test_bad_index_is_refused_not_truncated(site, value, message):
    with pytest.raises(InputError) as caught:
        INDEX_SITES[site](value)
    assert message in str(caught.value)
    assert "pass an int in 0.." in str(caught.value) or "has layers 0.." in str(caught.value) \
        or "has heads 0.." in str(caught.value)


@pytest.mark.parametrize("site", INDEX_SITES)
def test_integer_indices_still_work(site):
    INDEX_SITES[site](np.int64(1))
    INDEX_SITES[site](-1)


# ---- text: characters UTF-8 cannot encode ------------------------------------------------------------

LONE_SURROGATE = "ab\ud800cd"
ESCAPED_BYTE = "héllo\udcff"  # what Python makes of the command-line bytes b"h\xc3\xa9llo\xff"
TEXT_SITES: dict[str, Callable[[str], Any]] = {
    "byte-encode": ByteTokenizer().encode,
    "byte-offsets": ByteTokenizer().offsets,
    "check-text": lambda text: check_text(text, has_tokenizer=True),
    "encode-with-offsets": lambda text: encode_with_offsets(ByteTokenizer(), text),
}
TEXTS = [
    ("lone-surrogate", LONE_SURROGATE, "character 2 is a lone surrogate U+D800"),
    ("escaped-byte", ESCAPED_BYTE,
     "character 5 stands for the undecodable byte 0xff (invalid UTF-8, as the command line"),
    ("low-surrogate-alone", "\udc00x", "character 0 is a lone surrogate U+DC00"),
]


@pytest.mark.parametrize("site,text,message", [
    pytest.param(site, text, message, id=f"text-{site}-{name}") for site in TEXT_SITES for name, text, message in TEXTS
])
def test_text_utf8_cannot_encode_is_refused(site, text, message):
    with pytest.raises(InputError) as caught:
        TEXT_SITES[site](text)
    assert message in str(caught.value) and "not valid UTF-8" in str(caught.value)


@pytest.fixture(scope="module")
def byte_lens(byte_model_dir):
    return repo_lens.load(byte_model_dir, device="cpu")


@pytest.fixture(scope="module")
def word_lens(repo_dir):
    return repo_lens.load(repo_dir, device="cpu")


@pytest.mark.parametrize("lens_name,inputs,message", [
    pytest.param("byte_lens", LONE_SURROGATE, "lone surrogate U+D800", id="text-byte-lens-trace-lone-surrogate"),
    pytest.param("byte_lens", ["fine", ESCAPED_BYTE], "undecodable byte 0xff", id="text-byte-lens-batch-escaped-byte"),
    pytest.param("word_lens", "hello \ud83d world", "character 6 is a lone surrogate U+D83D",
                 id="text-hf-tokenizer-trace-lone-surrogate"),
])
def test_lens_trace_refuses_text_utf8_cannot_encode(request, lens_name, inputs, message):
    lens = request.getfixturevalue(lens_name)
    with pytest.raises(InputError) as caught:
        lens.trace(inputs, progress=False)
    assert message in str(caught.value)


def test_valid_text_with_surrogate_pairs_joined_traces(byte_lens):
    assert len(byte_lens.trace("位置 😀", progress=False)) == len("位置 😀".encode("utf-8"))


# ---- leftovers: temp files of interrupted saves, and huge equal values -------------------------------

def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process now
    return child.pid


def _temp_name(target: str, host: str, pid: int) -> str:
    return f".{target}.{host}-{pid}-0123456789ab.tmp"


def _stale(path: Path) -> None:
    old = time.time() - atomic.STALE_FOREIGN_TEMP_S - 60
    os.utime(path, (old, old))


LEFTOVERS = [
    # (case, temp name from the directory's name maker, make it old?, removed by the next save?)
    ("dead-writer-removed", lambda: _temp_name("trace.safetensors", atomic._HOST_TAG, _dead_pid()), False, True),
    ("dead-writer-other-target-removed", lambda: _temp_name("figure.png", atomic._HOST_TAG, _dead_pid()), False, True),
    ("live-writer-kept", lambda: _temp_name("trace.safetensors", atomic._HOST_TAG, os.getppid()), False, False),
    ("own-process-kept", lambda: _temp_name("trace.safetensors", atomic._HOST_TAG, os.getpid()), False, False),
    ("other-host-recent-kept", lambda: _temp_name("trace.safetensors", "ffffff" if atomic._HOST_TAG != "ffffff"
                                                  else "000000", _dead_pid()), False, False),
    ("other-host-stale-removed", lambda: _temp_name("trace.safetensors", "ffffff" if atomic._HOST_TAG != "ffffff"
                                                    else "000000", 1), True, True),
    ("impossible-pid-removed", lambda: _temp_name("trace.safetensors", atomic._HOST_TAG, 10**30), False, True),
    ("old-style-name-kept", lambda: ".trace.safetensors.0123456789ab.tmp", True, False),
    ("not-hidden-kept", lambda: _temp_name("trace.safetensors", atomic._HOST_TAG, _dead_pid())[1:], False, False),
    ("user-file-kept", lambda: ".notes.tmp", True, False),
]


@pytest.mark.parametrize("name_of,old,removed", [pytest.param(name_of, old, removed, id=f"leftover-{case}")
                                                 for case, name_of, old, removed in LEFTOVERS])
def test_next_save_removes_only_leftovers_of_dead_writers(tmp_path, name_of, old, removed):
    planted = tmp_path / name_of()
    planted.write_bytes(b"\0" * 1024)
    if old:
        _stale(planted)
    atomic.atomic_write_text(tmp_path / "next.txt", "saved")
    assert planted.exists() is not removed
    assert (tmp_path / "next.txt").read_text() == "saved"


def test_leftover_symlink_is_never_followed_or_removed(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep")
    folder = tmp_path / "out"
    folder.mkdir()
    link = folder / _temp_name("trace.safetensors", atomic._HOST_TAG, _dead_pid())
    link.symlink_to(outside)
    atomic.atomic_write_text(folder / "next.txt", "saved")
    assert link.is_symlink() and outside.read_bytes() == b"keep"


WRITER = """
import sys, time
from repo_lens.atomic import atomic_write
def slow(temp):
    with open(temp, "wb") as file:
        file.write(b"x" * 4_000_000)
        file.flush()
        print("writing", flush=True)
        time.sleep(60)
atomic_write(sys.argv[1], slow)
"""


def test_leftover_of_a_save_killed_mid_write_is_removed_by_the_next_save(tmp_path):
    target = tmp_path / "big.bin"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        leftovers = [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
        assert len(leftovers) == 1 and leftovers[0].stat().st_size == 4_000_000
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()  # reaped, so its pid names no process
        writer.stdout.close()
    assert leftovers[0].exists() and not target.exists()  # kill -9 left the full-size temp file behind
    atomic.atomic_write_text(tmp_path / "other.txt", "the next save")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.txt"]


@pytest.mark.parametrize("value", [
    pytest.param(1.7e308, id="leftover-chunk-patterns-equal-near-max"),
    pytest.param(-1.7e308, id="leftover-chunk-patterns-equal-near-min"),
    pytest.param(np.finfo(np.float64).max, id="leftover-chunk-patterns-equal-at-max"),
])
def test_chunk_patterns_call_huge_equal_values_constant(value):
    z = np.full((1, 2, 32), value)
    z[0, 1] = value - np.arange(32) * (abs(value) * 1e-3)  # strictly decreasing, spread far beyond eps
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way
        patterns = chunk_patterns(z, size=16, eps=0.2)
    assert patterns[0, 0].tolist() == ["constant", "constant"]
    assert patterns[0, 1].tolist() == ["mono", "mono"]

