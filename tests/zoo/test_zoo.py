"""The shipped zoo: every model loads offline and traces; its metrics are re-measured here, not
read from its card; and RePo's learned positions are really not the integer index."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.zoo import ZOO_DIR, available_models, zoo_entries

BYTE_MECHANISMS = ("rope", "nope", "repo", "cope", "fox")
EXPECTED = ({f"bytes-{mechanism}" for mechanism in BYTE_MECHANISMS}
            | {f"reversal-{mechanism}" for mechanism in ("rope", "nope", "repo")}
            | {f"flipflop-{mechanism}" for mechanism in ("rope", "cope", "grape-m")}
            | {f"bytes1k-{mechanism}" for mechanism in ("rope", "nope", "repo", "lpi")})
# the learned-increments post's byte models (preset bytes-post), int6
POST_MODELS = {"bytes-post-lpi-resid", "bytes-post-lpi"}
RETRIEVAL_MECHANISMS = ("rope", "nope", "repo", "lpi")
# what continued training changed on a pretrained base (tests/external/test_smollm2_repo.py)
DELTAS = {"smollm2-135m-repo", "smollm2-135m-rope-ct", "smollm2-135m-grape", "smollm2-135m-lpi",
          "smollm2-135m-graft"}


def test_the_zoo_ships_every_model_with_a_card():
    assert set(available_models()) == EXPECTED | POST_MODELS | DELTAS
    for entry in [e for e in zoo_entries() if e["name"] in EXPECTED | POST_MODELS]:
        family = {"mix": "bytes1k"}.get(entry["task"], entry["task"])  # the 1,024-byte retrieval mixture
        family = "bytes-post" if entry["name"] in POST_MODELS else family
        assert entry["name"] == f"{family}-{entry['mechanism']}"
        assert entry["metrics"]
        assert (ZOO_DIR / entry["name"] / "README.md").read_text().startswith(f"# zoo:{entry['name']}")


@pytest.mark.parametrize("name", sorted(EXPECTED | POST_MODELS))
def test_every_zoo_model_loads_and_traces(name):
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    texts = {"reversal": "Reverse the following words : ba ko <sep>", "flipflop": "w1i0r1w0r", "bytes": "Hello, 世界!",
             "bytes1k": "Hello, 世界!"}
    task, mechanism = ("bytes", name.removeprefix("bytes-post-")) if name in POST_MODELS else name.split("-", 1)
    trace = lens.trace(texts[task])
    assert trace.positions.shape[:2] == (lens.model.cfg.n_layers, lens.model.cfg.n_heads)
    assert np.isfinite(trace.positions).all()
    assert set(trace.layer_kinds) <= {"rope", mechanism}
    if mechanism not in ("rope", "nope", "repo"):
        assert trace.meta["increments"]["learned_layers"] == list(range(lens.model.cfg.n_layers))


@pytest.mark.slow
def test_zoo_json_command_lists_the_models():
    output = subprocess.run([sys.executable, "-m", "repo_lens.cli", "zoo", "--json"], check=True,
                            capture_output=True, text=True).stdout
    entries = json.loads(output)
    assert {e["name"] for e in entries} >= EXPECTED  # plus external models such as smollm2-135m
    assert all(set(e) == {"name", "mechanism", "task", "metrics"} for e in entries)


def test_zoo_command_prints_a_table_with_a_header_and_aligned_columns(capsys):
    from repo_lens.cli import main
    from repo_lens.zoo import zoo_entries

    assert main(["zoo"]) == 0
    header, rule, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["model", "task", "mechanism", "metrics"]
    entries = zoo_entries()
    assert len(rows) == len(entries) and set(rule) == {"-", " "}
    starts = [index for index, char in enumerate(rule) if char == "-" and (index == 0 or rule[index - 1] == " ")]
    assert [header.index(name) for name in ("model", "task", "mechanism", "metrics")] == starts
    for entry, row in zip(entries, rows):  # every column starts under its header, whatever the name's length
        cells = [row[start:end].strip() for start, end in zip(starts, [*starts[1:], None])]
        assert cells[:3] == [f"zoo:{entry['name']}", entry["task"], entry["mechanism"]], row
        if "val_bpb" in entry["metrics"]:
            assert cells[3] == f"val_bpb {entry['metrics']['val_bpb']:.3f}"


def task_of(zoo_name: str):
    """The training task of a shipped model, rebuilt from its card's train_config (data included)."""
    from repo_lens.data.corpora import CorpusFetchError
    from repo_lens.errors import RepoLensError
    from repo_lens.train import TrainConfig, build_task

    cfg = TrainConfig.from_dict(repo_lens.load(zoo_name, device="cpu").meta["info"]["train_config"])
    try:
        return build_task(cfg)
    except (CorpusFetchError, RepoLensError) as error:  # only when the registries cannot be reached
        pytest.skip(f"corpora could not be fetched: {error}")


@pytest.fixture(scope="module")
def byte_task():
    return task_of("zoo:bytes-repo")


@pytest.mark.study
@pytest.mark.parametrize("name", sorted(POST_MODELS))
def test_the_posts_model_beats_a_unigram_model_and_its_card_is_its_int6_weights(name):
    task = task_of(f"zoo:{name}")  # its own run's task: 512-byte windows
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    config = json.loads((ZOO_DIR / name / "config.json").read_text())
    assert config["storage"] == {"scheme": "int8-rows", "levels": 31}
    measured = task.evaluate(lens.model)
    unigram = task.unigram_bpb()
    for lang in ("en", "zh"):
        assert measured[f"val_bpb_{lang}"] < unigram[f"unigram_bpb_{lang}"] - 1.0, lang
    assert lens.meta["info"]["metrics"]["val_bpb"] == pytest.approx(measured["val_bpb"], abs=1e-4)


@pytest.mark.study
@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_byte_models_beat_a_unigram_model_on_held_out_text(byte_task, mechanism):
    lens = repo_lens.load(f"zoo:bytes-{mechanism}", device="cpu")
    measured = byte_task.evaluate(lens.model)
    unigram = byte_task.unigram_bpb()
    for lang in ("en", "zh"):
        assert measured[f"val_bpb_{lang}"] < unigram[f"unigram_bpb_{lang}"] - 0.5, lang
    # the card reports what the shipped weights do
    assert lens.meta["info"]["metrics"]["val_bpb"] == pytest.approx(measured["val_bpb"], abs=1e-3)


@pytest.mark.parametrize("mechanism", ["rope", "nope", "repo"])
def test_reversal_models_are_accurate_in_domain(mechanism):
    from repo_lens.train import ReversalTask

    lens = repo_lens.load(f"zoo:reversal-{mechanism}", device="cpu")
    task = ReversalTask(batch_size=1)
    metrics = task.evaluate(lens.model, lengths=range(2, 21))
    assert metrics["acc_in_domain"] >= 0.95
    assert lens.meta["info"]["metrics"]["acc_in_domain"] == pytest.approx(metrics["acc_in_domain"], abs=1e-6)


def test_repo_positions_are_not_a_linear_function_of_the_index():
    lens = repo_lens.load("zoo:bytes-repo", device="cpu")
    text = ("The Fulton County Grand Jury said Friday an investigation of recent primary election produced "
            "no evidence. 中共中央总书记、国家主席江泽民发表新年讲话。")
    trace = lens.trace(text)
    index = np.arange(len(trace), dtype=np.float64)
    nonlinear_heads = 0
    for layer, kind in enumerate(trace.layer_kinds):
        if kind != "repo":
            continue
        for head in range(trace.n_heads):
            z = trace.positions[layer, head].astype(np.float64)
            if z.std() < 1e-3:
                continue
            r_squared = np.corrcoef(index, z)[0, 1] ** 2
            nonlinear_heads += r_squared < 0.9
    assert nonlinear_heads >= 1


@pytest.mark.study
@pytest.mark.parametrize("mechanism", ["rope", "cope", "grape-m"])
def test_flipflop_errors_equal_the_card(mechanism):
    from repo_lens.train.flipflop import FlipFlopTask

    lens = repo_lens.load(f"zoo:flipflop-{mechanism}", device="cpu")
    task = FlipFlopTask(batch_size=16, length=lens.model.cfg.max_position_embeddings)
    torch.set_num_threads(2)
    measured = task.evaluate(lens.model)
    card = lens.meta["info"]["metrics"]
    for key in ("error_in_distribution", "error_ood_sparse"):
        assert card[key] == pytest.approx(measured[key], abs=1e-6), key
    assert measured["error_in_distribution"] < 0.25  # chance is 0.5: the model learned the task


@pytest.mark.parametrize("name", ["", ".", "..", "../evil", "a/b", "/tmp/x", ".hidden", "Upper"])
def test_shipping_under_a_name_that_is_not_one_folder_is_refused_and_touches_nothing(name, tmp_path):
    from repo_lens.errors import InputError
    from repo_lens.zoo.ship import ship

    before = sorted(path.relative_to(ZOO_DIR.parent) for path in ZOO_DIR.parent.rglob("*"))
    with pytest.raises(InputError, match="plain folder name"):
        ship(tmp_path, name, "bytes-small")
    assert sorted(path.relative_to(ZOO_DIR.parent) for path in ZOO_DIR.parent.rglob("*")) == before


@pytest.fixture(scope="module")
def mixture_task():
    return task_of("zoo:bytes1k-repo")


@pytest.mark.study
@pytest.mark.parametrize("mechanism", RETRIEVAL_MECHANISMS)
def test_1k_models_retrieve_the_needle_as_their_card_says(mixture_task, mechanism):
    """Issue 17: NIAH accuracy in context (1,024 bytes) and bits per byte, re-measured on the shipped weights."""
    lens = repo_lens.load(f"zoo:bytes1k-{mechanism}", device="cpu")
    torch.set_num_threads(2)
    card = lens.meta["info"]["metrics"]
    assert lens.context_length == 1024
    accuracy = mixture_task.niah_accuracy(lens.model, 1024)
    assert card["niah_1024"] == pytest.approx(accuracy, abs=1e-9)
    if mechanism in ("rope", "repo"):  # issue 17's aim, met by both (RESULTS.md); NoPE and LPI do not retrieve
        assert accuracy >= 0.9
    measured = mixture_task.val_bpb(lens.model)
    assert card["val_bpb"] == pytest.approx(measured["val_bpb"], abs=1e-3)
    assert measured["val_bpb"] < 4.5  # a unigram byte model: ~5.1 bits per byte


@pytest.mark.study
@pytest.mark.parametrize("mechanism", ["rope", "repo"])
def test_teacher_forced_niah_accuracy_is_what_greedy_decoding_gets(mixture_task, mechanism):
    """The accuracy shortcut (every answer byte the argmax given the right prefix) agrees with real greedy
    decoding through the KV cache: while the decoded bytes equal the answer, each next decoded byte is the
    teacher-forced argmax, and a prompt counts as right exactly when greedy decoding returns the answer."""
    from repo_lens.train.mixture import niah_accuracy

    lens = repo_lens.load(f"zoo:bytes1k-{mechanism}", device="cpu")
    prompts = mixture_task.niah_prompts(1024, 8)
    compared = 0
    for prompt in prompts:
        start, end = prompt.query
        ids = torch.as_tensor(np.asarray(prompt.ids, dtype=np.int64))[None]
        forced = lens.model(ids).argmax(-1)[0, start - 1:end - 1].tolist()
        cache = lens.model.new_cache()
        logits = lens.model(ids[:, :start], cache=cache)
        generated = []
        for _ in range(end - start):
            token = logits[:, -1].argmax(-1, keepdim=True)
            generated.append(int(token))
            logits = lens.model(token, cache=cache)
        answer = ids[0, start:end].tolist()
        for index, byte in enumerate(generated):
            assert byte == forced[index]
            compared += 1
            if byte != answer[index]:  # past a wrong byte the prefixes differ
                break
        assert niah_accuracy(lens.model, [prompt]) == float(generated == answer)
    assert compared >= len(prompts)


def test_the_mixture_card_states_the_shares_of_the_run_it_describes():
    """The data paragraph is written from the run's task options, so it cannot drift from the preset."""
    from repo_lens.zoo.ship import mix_description

    text = mix_description({"lengths": [512, 1024], "length_weights": [1, 3], "answer_weight": 30.0,
                            "copy_warmup_steps": 1100, "row_weights": {"text": 1.0, "niah": 3.0, "table": 0}})
    assert "a text window (25 %)" in text and "a RULER NIAH prompt (75 %:" in text
    assert "table" not in text.split("Each batch row is one of:")[1].split(". A prompt")[0]
    assert "512 bytes (25 % of steps) or 1,024 bytes (75 % of steps)" in text
    assert "The first 1,100 steps are repeated-segment rows only, at 512 bytes" in text
    assert "weighted 30×" in text
    assert "repeated-segment" not in mix_description({"row_weights": {"text": 1.0}})
    for mechanism in RETRIEVAL_MECHANISMS:
        shipped = ZOO_DIR / f"bytes1k-{mechanism}"
        options = json.loads((shipped / "config.json").read_text())["info"]["train_config"]["task_options"]
        assert mix_description(options) in (shipped / "README.md").read_text()
