"""Bad inputs an adversarial probe found answered with an internal exception, a silent wrong result
or a hang (issue 13): one case each, by class (``api-``, ``checkpoint-``, ``trace-file-``, ``cli-``).

Every case must raise the project's own error type with a message naming what was wrong; a case
that could block (a FIFO, /dev/zero, a config asking for 10**12 layers) runs under an alarm.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy, save_file as save_numpy

import repo_lens
from repo_lens.analysis import (attention_mass, attention_mass_batch, cjk_boundary_labels, entity_prompts,
                                chunk_patterns, position_increments, range_stats, subword_categories,
                                token_at_char)
from repo_lens.cli import main
from repo_lens.data import niah_multikey, niah_single
from repo_lens.errors import CheckpointError, InputError, TraceFileError, WriteError
from repo_lens.trace import TRACE_MARKER, Trace
from conftest import within


@pytest.fixture(scope="module")
def lens(byte_model_dir):
    return repo_lens.load(byte_model_dir, device="cpu")


@pytest.fixture(scope="module")
def trace(lens):
    return lens.trace("hello world", progress=False)


def fields(trace: Trace, **changes: Any) -> dict[str, Any]:
    base = dict(tokens=list(trace.tokens), token_ids=trace.token_ids, positions=trace.positions,
                layer_kinds=list(trace.layer_kinds))
    base.update(changes)
    return base


# --- api ------------------------------------------------------------------------------------------------
# (id, call(lens, trace, tmp_path, byte_model_dir), error type, message fragment)

API_CASES: list[tuple[str, Callable, type, str]] = [
    ("api-load-device-none", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device=None), InputError,
     "device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (a str), not NoneType"),
    ("api-load-device-list", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device=["cpu"]), InputError,
     "not list"),
    ("api-load-device-bool", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device=True), InputError, "not bool"),
    ("api-load-device-meta", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="meta"), InputError,
     "device 'meta' is not supported"),
    ("api-load-device-xla", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="xla"), InputError,
     "device 'xla' is not supported"),
    ("api-load-dtype-torch-int8", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="cpu", dtype=torch.int8),
     InputError, "dtype torch.int8 cannot hold the weights"),
    ("api-load-dtype-torch-bool", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="cpu", dtype=torch.bool),
     InputError, "dtype torch.bool cannot hold the weights"),
    ("api-load-dtype-complex", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="cpu", dtype=torch.complex64),
     InputError, "use a floating dtype"),
    ("api-load-dtype-float8", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="cpu", dtype=torch.float8_e4m3fn),
     InputError, "cannot hold the weights"),
    ("api-load-dtype-list", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device="cpu", dtype=["fp32"]),
     InputError, "unknown dtype ['fp32']"),
    ("api-load-max-memory-str", lambda lens, t, tmp, ckpt: repo_lens.load(ckpt, device_map="auto", max_memory="lots"),
     InputError, "max_memory must be a dict"),
    ("api-load-source-empty", lambda lens, t, tmp, ckpt: repo_lens.load(""), InputError, "source '' is empty"),
    ("api-load-source-nul", lambda lens, t, tmp, ckpt: repo_lens.load("/tmp/a\x00b"), InputError,
     "holds a NUL character"),
    ("api-load-source-name-too-long", lambda lens, t, tmp, ckpt: repo_lens.load(str(tmp / ("x" * 5000))), InputError,
     "File name too long"),
    ("api-load-source-unknown-user", lambda lens, t, tmp, ckpt: repo_lens.load("~no-such-user-probe/ckpt"),
     InputError, "cannot use the source '~no-such-user-probe/ckpt'"),
    ("api-load-source-bytes", lambda lens, t, tmp, ckpt: repo_lens.load(os.fsencode(ckpt)), InputError,
     "source must be 'zoo:NAME', a path or a Hub id 'org/name'"),
    ("api-trace-ragged-ids", lambda lens, t, tmp, ckpt: lens.trace([[1, 2], [3]], progress=False), InputError,
     "ragged nested sequence"),
    ("api-trace-truncate-str", lambda lens, t, tmp, ckpt: lens.trace("a" * 600, truncate="no", progress=False),
     InputError, "truncate must be True or False, not 'no'"),
    ("api-trace-beyond-context-str",
     lambda lens, t, tmp, ckpt: lens.trace("a" * 600, allow_beyond_context="yes", progress=False),
     InputError, "allow_beyond_context must be True or False"),
    ("api-trace-batch-none", lambda lens, t, tmp, ckpt: lens.trace_batch(None), InputError,
     "trace_batch takes a list of texts or token-id sequences, not NoneType"),
    ("api-trace-batch-one-string", lambda lens, t, tmp, ckpt: lens.trace_batch("abc", batch_size=2), InputError,
     "for one text use trace(text)"),
    ("api-display-tokens-negative", lambda lens, t, tmp, ckpt: lens.display_tokens([-1]), InputError,
     "token ids must lie in 0..256"),
    ("api-display-tokens-beyond-vocabulary", lambda lens, t, tmp, ckpt: lens.display_tokens([10**6]), InputError,
     "token ids must lie in 0..256"),
    ("api-display-tokens-float", lambda lens, t, tmp, ckpt: lens.display_tokens([1.5]), InputError,
     "token ids must be integers"),
    ("api-display-tokens-text", lambda lens, t, tmp, ckpt: lens.display_tokens("ab"), InputError,
     "expected token ids, not text"),
    ("api-trace-ctor-tokens-none", lambda lens, t, tmp, ckpt: Trace(**fields(t, tokens=None)), InputError,
     "tokens must be a list of str"),
    ("api-trace-ctor-tokens-int", lambda lens, t, tmp, ckpt: Trace(**fields(t, tokens=5)), InputError,
     "tokens must be a list of str"),
    ("api-trace-ctor-ids-negative", lambda lens, t, tmp, ckpt: Trace(**fields(t, token_ids=-t.token_ids - 1)),
     InputError, "token_ids must lie in 0..2**63-1"),
    ("api-trace-ctor-ids-beyond-int64",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, token_ids=np.full(len(t), 2**64 - 1, dtype=np.uint64))),
     InputError, "token_ids must lie in 0..2**63-1"),
    ("api-trace-ctor-positions-str", lambda lens, t, tmp, ckpt: Trace(**fields(t, positions="abc")), InputError,
     "positions must be real numbers"),
    ("api-trace-ctor-positions-complex",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, positions=t.positions.astype(np.complex64))), InputError,
     "got dtype complex64"),
    ("api-trace-ctor-positions-object",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, positions=t.positions.astype(object))), InputError,
     "got dtype object"),
    ("api-trace-ctor-positions-bool", lambda lens, t, tmp, ckpt: Trace(**fields(t, positions=t.positions > 0)),
     InputError, "got dtype bool"),
    ("api-trace-ctor-positions-beyond-float32",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, positions=np.full(t.positions.shape, 1e300))), InputError,
     "beyond float32's range"),
    ("api-trace-ctor-kinds-none", lambda lens, t, tmp, ckpt: Trace(**fields(t, layer_kinds=None)), InputError,
     "layer_kinds must be a list of layer kinds"),
    ("api-trace-ctor-kinds-one-string",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, layer_kinds="x" * t.n_layers)), InputError,
     "layer_kinds must be a list of layer kinds"),
    ("api-trace-ctor-kinds-unknown",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, layer_kinds=["bogus"] * t.n_layers)), InputError,
     "layer_kinds holds 'bogus', not a registered kind"),
    ("api-trace-ctor-kinds-ints",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, layer_kinds=list(range(t.n_layers)))), InputError,
     "layer_kinds holds 0, not a registered kind"),
    ("api-trace-ctor-meta-none", lambda lens, t, tmp, ckpt: Trace(**fields(t, meta=None)), InputError,
     "meta must be a dict, got NoneType"),
    ("api-trace-ctor-meta-list", lambda lens, t, tmp, ckpt: Trace(**fields(t, meta=[1])), InputError,
     "meta must be a dict, got list"),
    ("api-trace-ctor-spans-none", lambda lens, t, tmp, ckpt: Trace(**fields(t, spans=None)), InputError,
     "spans must be a dict, got NoneType"),
    ("api-trace-ctor-spans-list", lambda lens, t, tmp, ckpt: Trace(**fields(t, spans=[(0, 1)])), InputError,
     "spans must be a dict, got list"),
    ("api-trace-ctor-span-name-int", lambda lens, t, tmp, ckpt: Trace(**fields(t, spans={1: (0, 1)})), InputError,
     "span names must be non-empty strings; got 1"),
    ("api-trace-ctor-extras-none", lambda lens, t, tmp, ckpt: Trace(**fields(t, extras=None)), InputError,
     "extras must be a dict, got NoneType"),
    ("api-trace-ctor-extras-wrong-shape",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, extras={"increments": np.zeros((2, 2))})), InputError,
     "extras['increments'] has shape (2, 2)"),
    ("api-trace-ctor-extras-str", lambda lens, t, tmp, ckpt: Trace(**fields(t, extras={"x": "abc"})), InputError,
     "extras['x'] must be a numeric or bool array"),
    ("api-trace-ctor-extras-object",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, extras={"x": np.array([None] * len(t))})), InputError,
     "got dtype object"),
    ("api-trace-ctor-extras-empty-name",
     lambda lens, t, tmp, ckpt: Trace(**fields(t, extras={"": np.zeros(len(t))})), InputError,
     "extras names must be non-empty strings"),
    ("api-trace-save-extras-mutated-to-strings",
     lambda lens, t, tmp, ckpt: _mutated_extras(t).save(tmp / "t.safetensors"), InputError,
     "got dtype <U1"),
    ("api-trace-save-path-none", lambda lens, t, tmp, ckpt: t.save(None), InputError,
     "the output path must be a str or os.PathLike, not NoneType"),
    ("api-trace-save-path-int", lambda lens, t, tmp, ckpt: t.save(5), InputError, "not int"),
    ("api-trace-save-path-empty", lambda lens, t, tmp, ckpt: t.save(""), InputError, "is not a usable file name"),
    ("api-trace-save-path-nul", lambda lens, t, tmp, ckpt: t.save(str(tmp / "a\x00b")), InputError,
     "is not a usable file name"),
    ("api-trace-save-onto-fifo", lambda lens, t, tmp, ckpt: t.save(_fifo(tmp / "fifo.safetensors")), WriteError,
     "it is a FIFO, not a regular file"),
    ("api-trace-load-path-none", lambda lens, t, tmp, ckpt: Trace.load(None), TraceFileError,
     "the trace path must be a str or os.PathLike"),
    ("api-trace-load-path-int", lambda lens, t, tmp, ckpt: Trace.load(7), TraceFileError,
     "the trace path must be a str or os.PathLike"),
    ("api-position-increments-origin-str", lambda lens, t, tmp, ckpt: position_increments(t.positions, origin="0"),
     InputError, "origin must be one real number"),
    ("api-position-increments-origin-array",
     lambda lens, t, tmp, ckpt: position_increments(t.positions, origin=np.zeros(3)), InputError,
     "origin must be one real number"),
    ("api-position-increments-origin-bool",
     lambda lens, t, tmp, ckpt: position_increments(t.positions, origin=True), InputError,
     "origin must be one real number"),
    ("api-attention-mass-layers-int",
     lambda lens, t, tmp, ckpt: attention_mass(lens, list(range(40)), {"n": (1, 3)}, (36, 40), layers=1),
     InputError, "layers must be a list of layer indices (or None for all), not 1"),
    ("api-attention-mass-layers-str",
     lambda lens, t, tmp, ckpt: attention_mass(lens, list(range(40)), {"n": (1, 3)}, (36, 40), layers="01"),
     InputError, "layers must be a list of layer indices"),
    ("api-attention-mass-batch-none", lambda lens, t, tmp, ckpt: attention_mass_batch(lens, None), InputError,
     "prompts must be a list of (ids, spans, query) triples, not NoneType"),
    ("api-token-at-char-negative", lambda lens, t, tmp, ckpt: token_at_char([(0, 1), (1, 2)], -1), InputError,
     "char must be a character index, an int >= 0; got -1"),
    ("api-token-at-char-fractional", lambda lens, t, tmp, ckpt: token_at_char([(0, 1), (1, 2)], 0.5), InputError,
     "got 0.5"),
    ("api-token-at-char-spans-none", lambda lens, t, tmp, ckpt: token_at_char(None, 0), InputError,
     "token_char_spans has shape ()"),
    ("api-token-at-char-spans-fractional", lambda lens, t, tmp, ckpt: token_at_char([(0, 1.5), (1.5, 2)], 0),
     InputError, "token_char_spans must hold ints (character indices); got dtype float64"),
    ("api-cjk-boundary-labels-words-none",
     lambda lens, t, tmp, ckpt: cjk_boundary_labels("中文", [(0, 1), (1, 2)], None), InputError,
     "words must be a list, not NoneType"),
    ("api-cjk-boundary-labels-words-ints",
     lambda lens, t, tmp, ckpt: cjk_boundary_labels("中文", [(0, 1), (1, 2)], [1, 2]), InputError,
     "words must be strings"),
    ("api-cjk-boundary-labels-spans-fractional",
     lambda lens, t, tmp, ckpt: cjk_boundary_labels("中文", [(0.5, 1), (1, 2)], ["中文"]), InputError,
     "got dtype float64"),
    ("api-subword-categories-none", lambda lens, t, tmp, ckpt: subword_categories(None), InputError,
     "tokens must be a list, not NoneType"),
    ("api-entity-prompts-pairs-none", lambda lens, t, tmp, ckpt: entity_prompts(None), InputError,
     "pairs must be a list, not NoneType"),
    ("api-entity-prompts-pair-int", lambda lens, t, tmp, ckpt: entity_prompts([5]), InputError,
     "each entity pair must be a list, not int"),
    ("api-range-stats-bool-positions", lambda lens, t, tmp, ckpt: range_stats(t.positions > 0), InputError,
     "positions is a bool array"),
    ("api-chunk-patterns-bool-positions", lambda lens, t, tmp, ckpt: chunk_patterns(t.positions > 0, size=2),
     InputError, "positions is a bool array"),
    ("api-attention-mass-span-integral-numpy-float",
     lambda lens, t, tmp, ckpt: attention_mass(lens, list(range(40)), {"n": (np.float64(1.0), 3)}, (36, 40)),
     InputError, "span 'n' must be a pair of integers (start, end)"),
    ("api-niah-length-beyond-2-21", lambda lens, t, tmp, ckpt: niah_single(lens.tokenizer, 10**12), InputError,
     "length must be a positive number of tokens, at most 2,097,152; got 1000000000000"),
    ("api-niah-more-needles-than-tokens", lambda lens, t, tmp, ckpt: niah_multikey(lens.tokenizer, 900, num_keys=10**6),
     InputError, "a prompt of 900 tokens cannot hold them"),
    ("api-niah-depth-none", lambda lens, t, tmp, ckpt: niah_single(lens.tokenizer, 600, None), InputError,
     "needle depth None must be a fraction in [0.0, 1.0] or a list of them"),
    ("api-niah-haystack-int", lambda lens, t, tmp, ckpt: niah_single(lens.tokenizer, 600, haystack=5), InputError,
     "haystack must be text, a list of sentences or None (RULER noise); got int"),
    ("api-position-increments-bool-positions", lambda lens, t, tmp, ckpt: position_increments(t.positions > 0),
     InputError, "positions is a bool array"),
    ("api-attention-mass-batch-dict", lambda lens, t, tmp, ckpt: attention_mass_batch(lens, {"a": 1}), InputError,
     "prompts must be a list of (ids, spans, query) triples, not dict"),
]


def _mutated_extras(trace: Trace) -> Trace:
    copy = Trace(**fields(trace))
    copy.extras["labels"] = np.array(["a"] * len(copy))
    return copy


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("call,error,message", [pytest.param(*rest, id=name) for name, *rest in API_CASES])
def test_bad_api_input_is_refused(call, error, message, lens, trace, tmp_path, byte_model_dir):
    with within(30), pytest.raises(error) as caught:
        call(lens, trace, tmp_path, byte_model_dir)
    assert message in str(caught.value)


def test_a_refused_save_onto_a_fifo_leaves_it_a_fifo(trace, tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    with pytest.raises(WriteError):
        trace.save(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pipe"]


def test_valid_inputs_near_the_new_checks_still_work(lens, trace, tmp_path, byte_model_dir):
    assert repo_lens.load(byte_model_dir, device="cpu", dtype=torch.float64).model.embed.weight.dtype == torch.float64
    assert lens.display_tokens([]) == [] and lens.display_tokens(np.array([104, 105])) == ["h", "i"]
    assert lens.trace("a" * 600, truncate=np.bool_(True), progress=False).meta["truncation"]["kept_tokens"] == 512
    from_tensor = Trace(**fields(trace, positions=torch.from_numpy(trace.positions.copy())))
    assert np.array_equal(from_tensor.positions, trace.positions)
    char_rows = Trace(**fields(trace, extras={"char_offsets": np.zeros((len(trace), 2), np.int64)}))
    loaded = Trace.load(char_rows.save(tmp_path / "t.safetensors"))
    assert np.array_equal(loaded.extras["char_offsets"], char_rows.extras["char_offsets"])
    assert np.isnan(position_increments(trace.positions, origin=np.nan)[..., 0]).all()


# --- checkpoint -----------------------------------------------------------------------------------------

def edit_json(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def corrupt(ckpt: Path) -> None:
        data = json.loads((ckpt / name).read_text())
        change(data)
        (ckpt / name).write_text(json.dumps(data))
    return corrupt


def write_text(name: str, text: str) -> Callable[[Path], None]:
    return lambda ckpt: (ckpt / name).write_text(text)


def huge_int_literal(ckpt: Path) -> None:
    text = (ckpt / "config.json").read_text()
    (ckpt / "config.json").write_text(text.replace('"hidden_size": 64', '"hidden_size": ' + "9" * 5000))


CHECKPOINT_CASES: list[tuple[str, str, Callable[[Path], None], str]] = [
    ("checkpoint-olmo2-rope-type-unknown", "olmo2",
     edit_json("config.json", lambda c: c.update(rope_scaling={"rope_type": "bogus", "factor": 2.0})),
     "rope_type='bogus' is not supported"),
    ("checkpoint-repo-rope-type-unknown", "repo",
     edit_json("config.json", lambda c: c.update(rope_scaling={"rope_type": "warp", "factor": 2.0})),
     "rope_type='warp' is not supported"),
    ("checkpoint-olmo2-layers-beyond-the-weights", "olmo2",
     edit_json("config.json", lambda c: c.update(num_hidden_layers=10**12)),
     "num_hidden_layers=1000000000000 is invalid; expected an integer in 1..10,000"),
    ("checkpoint-olmo2-layers-other-than-the-weights", "olmo2",
     edit_json("config.json", lambda c: c.update(num_hidden_layers=9)),
     "the config says 9 layers but the weights hold 4 (blocks 0..3)"),
    ("checkpoint-native-layers-beyond-10000", "native",
     edit_json("config.json", lambda c: c["model"].update(n_layers=10**9, layer_mechanisms=["repo"] * 5)),
     "n_layers=1000000000 is invalid; expected an integer in 1..10,000"),
    ("checkpoint-olmo2-config-int-of-5000-digits", "olmo2", huge_int_literal, "is not valid JSON"),
    ("checkpoint-olmo2-tokenizer-nested-100000-deep", "olmo2",
     write_text("tokenizer.json", "[" * 100000 + "]" * 100000), "cannot be loaded offline"),
]


@pytest.mark.parametrize("base,corrupt,message", [pytest.param(*rest, id=name) for name, *rest in CHECKPOINT_CASES])
def test_bad_checkpoint_is_refused(base, corrupt, message, olmo2_dir, repo_dir, byte_model_dir, tmp_path):
    bases = {"olmo2": olmo2_dir, "repo": repo_dir, "native": byte_model_dir}
    ckpt = tmp_path / "ckpt"
    shutil.copytree(bases[base], ckpt)
    corrupt(ckpt)
    with within(30), pytest.raises(CheckpointError) as caught:
        repo_lens.load(ckpt, device="cpu")
    assert message in str(caught.value)


def test_checkpoint_tokenizer_beyond_the_model_vocabulary_is_refused_at_trace(olmo2_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(olmo2_dir, ckpt)
    edit_json("tokenizer.json", lambda t: t["model"]["vocab"].update(zebra=64))(ckpt)
    lens = repo_lens.load(ckpt, device="cpu")
    assert lens.trace("the cat", progress=False).token_ids.max() < 64  # words the model knows still trace
    with pytest.raises(InputError, match=r"outside the model's vocabulary 0\.\.63"):
        lens.trace("the zebra", progress=False)


# --- trace files ----------------------------------------------------------------------------------------

def rewrite_arrays(source: Path, target: Path, **arrays: np.ndarray) -> Path:
    from safetensors import safe_open

    with safe_open(str(source), framework="np") as file:
        metadata = file.metadata()
    stored = load_numpy(str(source))
    stored.update({name.replace("__", "."): value for name, value in arrays.items()})
    save_numpy(stored, str(target), metadata=metadata)
    return target


TRACE_FILE_CASES = [
    ("trace-file-ids-beyond-int64", lambda n: {"token_ids": np.full(n, 2**64 - 1, dtype=np.uint64)},
     "trace field 'token_ids' is an array holding the id 18446744073709551615"),
    ("trace-file-extras-without-name", lambda n: {"extras__": np.zeros(n, np.float32)},
     "trace field 'extras.' is an extra without a name"),
]


@pytest.mark.parametrize("arrays,message", [pytest.param(*rest, id=name) for name, *rest in TRACE_FILE_CASES])
def test_bad_trace_file_is_refused(arrays, message, trace, tmp_path):
    good = trace.save(tmp_path / "good.safetensors")
    bad = rewrite_arrays(good, tmp_path / "bad.safetensors", **arrays(len(trace)))
    with pytest.raises(TraceFileError) as caught:
        Trace.load(bad)
    assert message in str(caught.value) and str(bad) in str(caught.value)
    assert TRACE_MARKER  # the file keeps its trace header: only the arrays were changed


# --- cli ------------------------------------------------------------------------------------------------

CLI_CASES = [
    ("cli-trace-file-fifo", ["trace", "--model", "{model}", "--file", "{fifo}"], "is not a regular file"),
    ("cli-trace-file-dev-zero", ["trace", "--model", "{model}", "--file", "/dev/zero"], "is not a regular file"),
    ("cli-analyze-file-fifo", ["analyze", "--model", "{model}", "--study", "positions", "--out", "{tmp}/out",
                               "--file", "{fifo}"], "is not a regular file"),
    ("cli-trace-device-meta", ["trace", "--model", "{model}", "--text", "hi", "--device", "meta"],
     "device 'meta' is not supported"),
    ("cli-trace-save-onto-fifo", ["trace", "--model", "{model}", "--text", "hi", "--save", "{fifo}"],
     "it is a FIFO, not a regular file"),
    ("cli-trace-model-nul", ["trace", "--model", "{tmp}/a\x00b", "--text", "hi"], "holds a NUL character"),
    ("cli-tiny-directory-nul", ["tiny", "{tmp}/a\x00b"], "holds a NUL character"),
    ("cli-tiny-layers-beyond-256", ["tiny", "{tmp}/tiny", "--layers", "100000000"],
     "argument --layers: must be within [1, 256], got 100000000"),
    ("cli-analyze-lengths-beyond-2-21", ["analyze", "--model", "{model}", "--study", "niah", "--out", "{tmp}/out",
                                         "--lengths", "10000000000", "--beyond-context"],
     "argument --lengths: every value must be within [1, 2097152], got 10000000000"),
    ("cli-train-threads-beyond-256", ["train", "--preset", "tiny", "--out", "{tmp}/run", "--threads", "100000"],
     "argument --threads: must be within [1, 256], got 100000"),
]


@pytest.mark.training
def test_cli_train_into_a_checkpoint_that_is_no_training_run_is_refused(byte_model_dir, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(byte_model_dir, ckpt)
    before = (ckpt / "model.safetensors").read_bytes()
    code = main(["train", "--preset", "tiny", "--out", str(ckpt), "--steps", "1", "--quiet"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "already holds a model but no train_state/ to resume from" in lines[0]
    assert (ckpt / "model.safetensors").read_bytes() == before


@pytest.mark.training
def test_cli_train_resuming_a_damaged_state_names_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--out", str(run), "--steps", "1", "--quiet"]) == 0
    (run / "train_state" / "state.safetensors").write_bytes(b"junk")
    capsys.readouterr()
    code = main(["train", "--preset", "tiny", "--out", str(run), "--steps", "2", "--quiet"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert f"cannot resume from {run / 'train_state'}" in lines[0] and "delete it to start over" in lines[0]


@pytest.mark.parametrize("argv,message", [pytest.param(*rest, id=name) for name, *rest in CLI_CASES])
def test_bad_command_line_is_one_error_line(argv, message, byte_model_dir, tmp_path, capsys):
    places = {"model": str(byte_model_dir), "tmp": str(tmp_path), "fifo": str(_fifo(tmp_path / "pipe"))}
    with within(30):
        code = main([part.format(**places) for part in argv])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("repo-lens: error: "), lines
    assert message in lines[0], lines
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pipe"]  # nothing written
