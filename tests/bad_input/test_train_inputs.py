"""``repo-lens train --base`` (continued training with a learned-position mechanism) meets bad input: a byte
base trains; flags it would ignore, an --out that holds a model and an unknown --device are refused before
anything is written; a damaged resumable state is refused field by field, naming the file, the field and
how to start over, and nothing in the run folder changes.

Each case runs the command in-process on a 2-layer byte-level RoPE checkpoint, 16-token sequences, 2 steps.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import RepositionConfig, train_repositioned
from repo_lens.train.text_tokens import TextTokens

LOCK = ".repo_lens.lock"  # the run lock's file; taking the lock is not writing a result
WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()
STEPS = 2


def snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else b"<dir>"
            for path in sorted(folder.rglob("*")) if path.name != LOCK}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert err.startswith("repo-lens: error: ") and len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("train_inputs")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(20)))
    rope = save_checkpoint(tiny_model("rope", n_layers=2, d_model=16, n_heads=2, context=64, seed=1), root / "rope",
                           info={"name": "tiny-rope"})
    repo = save_checkpoint(tiny_model("repo", n_layers=3, d_model=16, n_heads=2, context=64), root / "repo",
                           info={"name": "tiny-repo"})
    return {"root": root, "corpus": corpus, "rope": rope, "repo": repo}


def train_argv(places: dict[str, Path], out: Path, *extra: str, base: Path | str | None = None) -> list[str]:
    return ["train", "--base", str(base or places["rope"]), "--corpus", str(places["corpus"]), "--steps", str(STEPS),
            "--context", "16", "--batch-size", "1", "--no-autocast", "--quiet", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def finished(places) -> Path:
    """A finished 2-step run (its resumable state at step 2)."""
    out = places["root"] / "finished"
    assert main(train_argv(places, out)) == 0
    return out


# --- a byte-tokenizer base trains ----------------------------------------------------------------------------

def test_a_byte_base_trains_two_steps_and_loads(places, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train_argv(places, out), capsys)
    assert code == 0, err
    loaded = repo_lens.load(out, device="cpu")
    assert loaded.model.cfg.layer_mechanisms == ["rope", "repo"]
    assert type(loaded.tokenizer).__name__ == "ByteTokenizer"
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["steps"] == STEPS and recipe["base"] == str(places["rope"].absolute())
    assert all(math.isfinite(entry["held_out_bits"]) for entry in recipe["log"] if "held_out_bits" in entry)
    delta = load_file(str(out / "delta.safetensors"))
    assert any(bool(tensor.abs().max() > 0) for name, tensor in delta.items() if name.endswith("lora_B"))
    trace = loaded.trace("the needle is hidden", progress=False)
    assert trace.positions.shape[-1] == len("the needle is hidden")


def test_the_default_context_is_the_base_s_where_shorter(places, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [part for part in train_argv(places, out) if part not in ("--context", "16")]
    argv += ["--steps", "1"]  # the last --steps wins
    code, err = run_cli(argv, capsys)
    assert code == 0, err
    assert json.loads((out / "recipe.json").read_text())["recipe"]["context"] == 64  # the base's, not 1024


def test_documents_of_a_byte_corpus_are_separated_by_the_separator_byte():
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.train.text_tokens import document_encoder

    encode, separator = document_encoder(ByteTokenizer())
    assert separator == ByteTokenizer.separator_id == 256
    text = TextTokens.from_documents([f"doc {i}" for i in range(20)], encode, separator)
    assert (text.train == 256).sum() == 18 and (text.held_out == 256).sum() == 2


# --- flags it would ignore or misplace, bases it cannot train ------------------------------------------------------

FLAG_CASES: dict[str, tuple[tuple[str, ...], str]] = {  # extra argv -> a piece of the message
    "init-std-rope": (("--mechanism", "rope", "--position-init-std", "0.5"), "--position-init-std does not apply"),
    "init-std-grape-m": (("--mechanism", "grape-m", "--position-init-std", "0.5"), "--position-init-std does not apply"),
    "init-std-lpi-layer": (("--mechanism", "lpi-layer", "--position-init-std", "1"), "--position-init-std does not"),
    "lr-scale-rope": (("--mechanism", "rope", "--position-lr-scale", "3"), "--position-lr-scale does not apply"),
    "anneal-rope": (("--mechanism", "rope", "--anneal-steps", "5"), "--anneal-steps does not apply"),
    "anneal-grape-m": (("--mechanism", "grape-m", "--anneal-steps", "5"), "--anneal-steps does not apply"),
    "anneal-lpi-layer": (("--mechanism", "lpi-layer", "--anneal-steps", "0"), "--anneal-steps does not apply"),
    "device-tpu9": (("--device", "tpu9"), "argument --device"),
    "device-empty": (("--device", ""), "argument --device"),
    "device-meta": (("--device", "meta"), "argument --device"),
    "device-xla": (("--device", "xla"), "argument --device"),
    "device-cpu-word": (("--device", "cpu:first"), "argument --device"),
    "device-cuda-999": (("--device", "cuda:999"), "argument --device"),
    "preset-too": (("--preset", "tiny"), "--preset and --base"),
    "mechanism-nope": (("--mechanism", "nope"), "--base trains RePo"),
    "context-too-long-for-corpus": (("--context", "5000"), "too few for one sequence of 5000 tokens"),
    "adapters-from-beyond-the-layers": (("--adapters-from", "9"), "adapters_from (--adapters-from) must be in 0..1"),
    "adapters-from-negative": (("--adapters-from", "-1"), "argument --adapters-from"),
    "adapters-from-text": (("--adapters-from", "two"), "argument --adapters-from"),
}


@pytest.mark.parametrize("extra, message", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_a_flag_that_would_be_ignored_or_is_wrong_is_refused_before_writing(extra, message, places, tmp_path,
                                                                             capsys):
    out = tmp_path / "run"
    code, err = run_cli(train_argv(places, out, *extra), capsys)
    assert_refused(code, err, message)
    assert not out.exists()


PRESET_ONLY_CASES = {"context": ("--context", "8"), "anneal-steps": ("--anneal-steps", "3"),
                     "anneal-steps-0": ("--anneal-steps", "0"),
                     "corpus": ("--corpus", "brown"), "adapters-from": ("--adapters-from", "0")}


@pytest.mark.parametrize("flag", PRESET_ONLY_CASES.values(), ids=PRESET_ONLY_CASES.keys())
def test_a_base_only_flag_with_a_preset_is_refused(flag, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(["train", "--preset", "tiny", "--steps", "1", "--quiet", "--out", str(out), *flag], capsys)
    assert_refused(code, err, flag[0], "only apply to --base")
    assert not out.exists()


@pytest.mark.parametrize("mechanism, flags, settings", [
    ("repo", ("--position-init-std", "0.5", "--position-lr-scale", "3"), {"position_init_std": 0.5,
                                                                         "position_lr": 3e-3}),
    ("grape-m", ("--position-lr-scale", "0.5"), {"position_lr": 5e-4, "position_init_std": 0.02}),
    ("lpi-layer", (), {"position_lr": 1e-3, "position_init_std": 0.02}),
    # --lr is the peak of both groups (the position modules' × --position-lr-scale); --warmup the schedule's
    ("repo", ("--lr", "5e-4", "--warmup", "3", "--position-lr-scale", "2"), {"lr": 5e-4, "position_lr": 1e-3,
                                                                            "warmup": 3}),
    ("rope", (), {"lr": 1e-3, "warmup": 20}),
])
def test_the_position_flags_are_honoured_and_recorded(mechanism, flags, settings, places, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train_argv(places, out, "--mechanism", mechanism, "--steps", "1", *flags), capsys)
    assert code == 0, err
    recipe = json.loads((out / "recipe.json").read_text())["recipe"]
    for key, value in settings.items():
        assert recipe[key] == pytest.approx(value), key


def test_the_init_std_reaches_the_position_module(places):
    """--position-init-std sets the std of RePo's f at the start (the recipe's start_position_modules)."""
    from repo_lens.train.reposition import repositioned_model

    base = repo_lens.load(places["rope"], device="cpu").model
    wide, narrow = (repositioned_model(base, RepositionConfig(base="x", position_init_std=std)) for std in (1.0, 0.01))
    spread = [float(model.blocks[1].attn.mechanism.gate_map.weight.detach().std()) for model in (wide, narrow)]
    assert spread[0] == pytest.approx(1.0, rel=0.2) and spread[1] == pytest.approx(0.01, rel=0.2)


def _tiny_checkpoint(folder: Path) -> None:
    save_checkpoint(tiny_model("rope", n_layers=2, d_model=16, n_heads=2, context=64), folder)


OUT_CASES: dict[str, Callable[[Path], None]] = {  # fill the --out folder with what it must not write beside
    "a-repo-lens-checkpoint": _tiny_checkpoint,
    "config-only": lambda folder: (folder / "config.json").write_text("{}"),
    "hf-weights": lambda folder: save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors")),
    "sharded-index": lambda folder: (folder / "model.safetensors.index.json").write_text("{}"),
    "pickle-weights": lambda folder: (folder / "pytorch_model.bin").write_bytes(b"\x80\x04"),
    "a-finished-delta-without-its-state": lambda folder: [(folder / name).write_text("{}")
                                                          for name in ("delta.safetensors", "recipe.json")],
    "a-recipe-without-its-state": lambda folder: (folder / "recipe.json").write_text("{}"),
}


@pytest.mark.parametrize("fill", OUT_CASES.values(), ids=OUT_CASES.keys())
def test_an_out_folder_that_holds_a_model_or_a_finished_delta_is_refused(fill, places, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    fill(out)
    before = snapshot(out)
    code, err = run_cli(train_argv(places, out), capsys)
    assert_refused(code, err, f"--out {out}", "choose another --out")
    assert snapshot(out) == before


def test_the_base_itself_as_out_is_refused(places, capsys):
    before = snapshot(places["rope"])
    code, err = run_cli(train_argv(places, places["rope"]), capsys)
    assert_refused(code, err, "holds a model")
    assert snapshot(places["rope"]) == before


@pytest.mark.parametrize("base, message", [("repo", "must be a RoPE model"), ("missing", "missing"),
                                           ("corpus", "corpus.txt")])
def test_a_base_that_cannot_be_trained_is_refused_before_writing(base, message, places, tmp_path, capsys):
    source = places.get(base, places["root"] / "missing")
    out = tmp_path / "run"
    code, err = run_cli(train_argv(places, out, base=source), capsys)
    assert_refused(code, err, message)
    assert not out.exists()


SETTING_CASES = {"steps-negative": {"steps": -5}, "steps-text": {"steps": "abc"}, "steps-float": {"steps": 2.5},
                 "lr-nan": {"lr": float("nan")}, "lr-zero": {"lr": 0.0}, "position-lr-inf": {"position_lr": math.inf},
                 "batch-0": {"batch_size": 0}, "rank-0": {"lora_rank": 0}, "seed-negative": {"seed": -1},
                 "weight-decay-negative": {"weight_decay": -0.1}, "first-layer-9": {"first_layer": 9},
                 "adapters-from-9": {"adapters_from": 9}, "adapters-from-text": {"adapters_from": "1"},
                 "eval-every-0": {"eval_every": 0}, "autocast-text": {"autocast": "yes"}, "threads-0": {"threads": 0},
                 "mechanism-alibi": {"mechanism": "alibi"}, "context-bool": {"context": True}}


@pytest.mark.parametrize("change", SETTING_CASES.values(), ids=SETTING_CASES.keys())
def test_a_setting_out_of_type_or_range_is_refused_by_the_api(change, places, tmp_path):
    base = repo_lens.load(places["rope"], device="cpu").model
    text = TextTokens.from_documents([" ".join(WORDS)] * 20, lambda t: list(t.encode()), 256)
    cfg = RepositionConfig(**{"base": "unused", "context": 16, "batch_size": 1, "steps": STEPS, "autocast": False,
                              **change})
    with pytest.raises(InputError, match=next(iter(change))):
        train_repositioned(cfg, base, text, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# --- a damaged resumable state ---------------------------------------------------------------------------------

def _progress(run: Path) -> dict:
    return json.loads((run / "train_state" / "progress.json").read_text())


def _set_progress(run: Path, change: Callable[[dict], object]) -> str:
    progress = _progress(run)
    change(progress)
    (run / "train_state" / "progress.json").write_text(json.dumps(progress))
    return "progress.json"


def _write(name: str, data: bytes) -> Callable[[Path], str]:
    def damage(run: Path) -> str:
        (run / "train_state" / name).write_bytes(data)
        return name
    return damage


def _cut(name: str, keep: float) -> Callable[[Path], str]:
    def damage(run: Path) -> str:
        path = run / "train_state" / name
        path.write_bytes(path.read_bytes()[:int(path.stat().st_size * keep)])
        return name
    return damage


def _tensors(change: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path], str]:
    def damage(run: Path) -> str:
        path = run / "train_state" / "trainable.safetensors"
        tensors = load_file(str(path))
        change(tensors)
        save_file(tensors, str(path))
        return "trainable.safetensors"
    return damage


def _optimizer(change: Callable[[dict], object]) -> Callable[[Path], str]:
    def damage(run: Path) -> str:
        path = run / "train_state" / "optimizer.pt"
        state = torch.load(path, weights_only=True)
        change(state)
        torch.save(state, path)
        return "optimizer.pt"
    return damage


def _first_b(tensors: dict[str, torch.Tensor]) -> str:
    return next(name for name in sorted(tensors) if name.endswith("lora_B"))


def _first_state(state: dict) -> dict:
    return state["state"][next(iter(state["state"]))]


def _set(mapping: dict, key: str, value: object) -> None:
    mapping[key] = value


STATE_CASES: dict[str, tuple[Callable[[Path], str], str]] = {  # damage (returns the file) -> a piece of the message
    # progress.json: not JSON, not an object
    "progress-empty": (_write("progress.json", b""), "not readable JSON"),
    "progress-not-json": (_write("progress.json", b"step = 2"), "not readable JSON"),
    "progress-cut": (_cut("progress.json", 0.5), "not readable JSON"),
    "progress-latin1": (_write("progress.json", b'{"step": "\xe9"}'), "not readable JSON"),
    "progress-list": (_write("progress.json", b"[1, 2]"), "holds a list"),
    "progress-null": (_write("progress.json", b"null"), "holds a NoneType"),
    "progress-no-step": (lambda run: _set_progress(run, lambda p: p.pop("step")), "lacks step"),
    "progress-no-log": (lambda run: _set_progress(run, lambda p: p.pop("log")), "lacks log"),
    # progress.json: step
    "step-text": (lambda run: _set_progress(run, lambda p: _set(p, "step", "abc")), "step is 'abc'"),
    "step-negative": (lambda run: _set_progress(run, lambda p: _set(p, "step", -5)), "step is -5"),
    "step-0": (lambda run: _set_progress(run, lambda p: _set(p, "step", 0)), "step is 0"),
    "step-billion": (lambda run: _set_progress(run, lambda p: _set(p, "step", 10**9)), "step is 1000000000"),
    "step-beyond-steps": (lambda run: _set_progress(run, lambda p: _set(p, "step", STEPS + 1)), "step is 3"),
    "step-fraction": (lambda run: _set_progress(run, lambda p: _set(p, "step", 1.5)), "step is 1.5"),
    "step-bool": (lambda run: _set_progress(run, lambda p: _set(p, "step", True)), "step is True"),
    "step-null": (lambda run: _set_progress(run, lambda p: _set(p, "step", None)), "step is None"),
    # progress.json: wall_seconds, recipe, log
    "wall-negative": (lambda run: _set_progress(run, lambda p: _set(p, "wall_seconds", -1)), "wall_seconds is -1"),
    "wall-nan": (lambda run: _set_progress(run, lambda p: _set(p, "wall_seconds", math.nan)), "wall_seconds is nan"),
    "wall-text": (lambda run: _set_progress(run, lambda p: _set(p, "wall_seconds", "1h")), "wall_seconds is '1h'"),
    "recipe-list": (lambda run: _set_progress(run, lambda p: _set(p, "recipe", [])), "recipe is a list"),
    "recipe-steps-text": (lambda run: _set_progress(run, lambda p: p["recipe"].update(steps="abc")),
                          "recipe.steps is 'abc'"),
    "recipe-lr-negative": (lambda run: _set_progress(run, lambda p: p["recipe"].update(lr=-1)), "recipe.lr is -1"),
    "recipe-base-number": (lambda run: _set_progress(run, lambda p: p["recipe"].update(base=7)), "recipe.base is 7"),
    "log-text": (lambda run: _set_progress(run, lambda p: _set(p, "log", "x")), "log is a str"),
    "log-empty": (lambda run: _set_progress(run, lambda p: _set(p, "log", [])), "log is a list of 0 entries"),
    "log-short": (lambda run: _set_progress(run, lambda p: p["log"].pop()), "log is a list of 2 entries"),
    "log-entry-number": (lambda run: _set_progress(run, lambda p: p["log"].__setitem__(1, 5)), "log[1] is 5"),
    "log-entry-step": (lambda run: _set_progress(run, lambda p: p["log"][1].update(step=7)), "log[1] is"),
    "log-nan-bits": (lambda run: _set_progress(run, lambda p: p["log"][0].update(held_out_bits=math.nan)),
                     "log[0].held_out_bits is nan"),
    "log-text-bits": (lambda run: _set_progress(run, lambda p: p["log"][2].update(train_bits="low")),
                      "log[2].train_bits is 'low'"),
    # trainable.safetensors
    "trainable-missing": (lambda run: (run / "train_state" / "trainable.safetensors").unlink()
                          or "trainable.safetensors", "not a readable safetensors file"),
    "trainable-empty": (_write("trainable.safetensors", b""), "not a readable safetensors file"),
    "trainable-truncated": (_cut("trainable.safetensors", 0.6), "not a readable safetensors file"),
    "trainable-header-only": (_cut("trainable.safetensors", 0.05), "not a readable safetensors file"),
    "trainable-random": (_write("trainable.safetensors", bytes(range(256)) * 8), "not a readable safetensors file"),
    "trainable-json": (_write("trainable.safetensors", b'{"a": 1}'), "not a readable safetensors file"),
    "trainable-all-nan": (_tensors(lambda t: [tensor.fill_(math.nan) for tensor in t.values()]), "NaN or infinite"),
    "trainable-one-inf": (_tensors(lambda t: t[_first_b(t)].view(-1)[0].fill_(math.inf)), "NaN or infinite"),
    "trainable-broadcast-1": (_tensors(lambda t: _set(t, _first_b(t), torch.ones(1))), "has shape [1], the model's"),
    "trainable-scalar": (_tensors(lambda t: _set(t, _first_b(t), torch.tensor(0.5))), "has shape [], the model's"),
    "trainable-transposed": (_tensors(lambda t: _set(t, _first_b(t), t[_first_b(t)].T.contiguous())), "has shape"),
    "trainable-integer": (_tensors(lambda t: _set(t, _first_b(t), t[_first_b(t)].to(torch.int32))), "torch.int32"),
    "trainable-missing-tensor": (_tensors(lambda t: t.pop(_first_b(t))), "missing ['blocks.1"),
    "trainable-surplus-tensor": (_tensors(lambda t: _set(t, "blocks.0.attn.extra", torch.zeros(2))),
                                 "unexpected ['blocks.0.attn.extra']"),
    # optimizer.pt (read with weights_only=True, never unpickled as objects)
    "optimizer-missing": (lambda run: (run / "train_state" / "optimizer.pt").unlink() or "optimizer.pt",
                          "not a readable optimizer state"),
    "optimizer-empty": (_write("optimizer.pt", b""), "not a readable optimizer state"),
    "optimizer-truncated": (_cut("optimizer.pt", 0.5), "not a readable optimizer state"),
    "optimizer-random": (_write("optimizer.pt", bytes(range(256)) * 8), "not a readable optimizer state"),
    "optimizer-text": (_write("optimizer.pt", b"garbage"), "not a readable optimizer state"),
    "optimizer-a-list": (lambda run: torch.save([1, 2], run / "train_state" / "optimizer.pt") or "optimizer.pt",
                         "not an optimizer state_dict"),
    "optimizer-no-state": (_optimizer(lambda s: s.pop("state")), "not an optimizer state_dict"),
    "optimizer-one-group": (_optimizer(lambda s: s["param_groups"].pop()), "param_groups holds 1 entries"),
    "optimizer-peak": (_optimizer(lambda s: s["param_groups"][0].update(peak=5.0)), "param_groups[0].peak is 5.0"),
    "optimizer-betas": (_optimizer(lambda s: s["param_groups"][1].update(betas=(0.1, 0.2))), "param_groups[1].betas"),
    "optimizer-state-emptied": (_optimizer(lambda s: s["state"].clear()), "lacks step, exp_avg, exp_avg_sq"),
    "optimizer-nan-moment": (_optimizer(lambda s: _first_state(s)["exp_avg"].fill_(math.nan)), "exp_avg holds NaN"),
    "optimizer-negative-second-moment": (_optimizer(lambda s: _first_state(s)["exp_avg_sq"].fill_(-1.0)),
                                         "negative"),
    "optimizer-moment-shape": (_optimizer(lambda s: _first_state(s).update(exp_avg=torch.zeros(1))),
                               "exp_avg has shape [1]"),
    "optimizer-step-billion": (_optimizer(lambda s: _first_state(s).update(step=torch.tensor(1e9))),
                               "step is 1000000000.0"),
    "optimizer-step-nan": (_optimizer(lambda s: _first_state(s).update(step=torch.tensor(math.nan))), "step is nan"),
}


@pytest.mark.parametrize("damage, message", STATE_CASES.values(), ids=STATE_CASES.keys())
def test_a_damaged_state_is_refused_naming_the_file_and_the_field(damage, message, finished, places, tmp_path,
                                                                   capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    file = damage(run)
    before = snapshot(run)
    code, err = run_cli(train_argv(places, run), capsys)
    assert_refused(code, err, str(run / "train_state" / file), message, f"delete {run} to start the training over")
    assert snapshot(run) == before


def test_a_pickled_object_in_the_optimizer_state_is_never_unpickled(finished, places, tmp_path, capsys):
    marker = tmp_path / "unpickled"

    class Unpickled:
        def __reduce__(self):
            return open, (str(marker), "w")

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    torch.save({"state": {}, "param_groups": [Unpickled()]}, run / "train_state" / "optimizer.pt")
    code, err = run_cli(train_argv(places, run), capsys)
    assert_refused(code, err, "optimizer.pt", "never loaded")
    assert not marker.exists()


@pytest.mark.parametrize("mechanism", ["repo", "rope", "grape-m", "lpi-layer"])
def test_an_intact_state_resumes_for_every_mechanism(mechanism, places, tmp_path, capsys):
    """The checks refuse damage only: a run stopped between checkpoints resumes, and a finished one reships."""
    run = tmp_path / "run"
    base = repo_lens.load(places["rope"], device="cpu").model
    text = TextTokens.from_corpus(str(places["corpus"]), repo_lens.load(places["rope"], device="cpu").tokenizer)
    cfg = RepositionConfig(base=str(places["rope"]), mechanism=mechanism, context=16, batch_size=1, steps=3,
                           checkpoint_every=2, eval_every=3, autocast=False, corpus=str(places["corpus"]))
    real = TextTokens.train_batch

    def stop_at_step_2(self, step, *args, **kwargs):
        if step == 2:
            raise KeyboardInterrupt
        return real(self, step, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TextTokens, "train_batch", stop_at_step_2)
        with pytest.raises(KeyboardInterrupt):
            train_repositioned(cfg, base, text, run, progress=False)
    assert _progress(run)["step"] == 2
    assert train_repositioned(cfg, base, text, run, progress=False)["steps"] == 3
    assert train_repositioned(cfg, base, text, run, progress=False)["steps"] == 3  # finished: ships again


def test_a_resume_with_other_settings_names_them(finished, places, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = snapshot(run)
    code, err = run_cli(train_argv(places, run, "--steps", "3", "--batch-size", "2"), capsys)
    assert_refused(code, err, "batch_size, steps differ")
    assert snapshot(run) == before


# --- a loss that diverges ---------------------------------------------------------------------------------------------

def test_a_loss_that_becomes_nan_stops_with_the_step_and_the_remedy(places, tmp_path, capsys, monkeypatch):
    """Not an internal error: the command exits 2 naming the step, and what was saved before it stays."""
    real = torch.nn.functional.cross_entropy

    def diverging(*args, **kwargs):
        return real(*args, **kwargs) * float("nan")

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", diverging)
    code, err = run_cli(train_argv(places, tmp_path / "run"), capsys)
    assert_refused(code, err, "the training loss became nan at step 0", "lower the learning rate")
    assert not (tmp_path / "run" / "delta.safetensors").exists()
