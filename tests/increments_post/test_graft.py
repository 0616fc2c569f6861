"""The learned-increments post's graft ("Learned position increments", Brendan Long; experiments/delta_graft):
its ``delta_mlp.pt``, written as its training writes it, loads onto its base through ``repo_lens.load(base,
graft=...)`` (and ``--graft`` on the command line) with δ, positions and logits equal to references computed
here from the file's tensors and the base's own weights; bad files and bases are refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import repo_lens
from repo_lens.cli import main
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.grafted_increments import POST_OUTPUT_BIAS, GraftIncrementPositions, token_deltas
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.loaders.increments_post.graft import FORMAT, is_graft_checkpoint, read_graft
from repo_lens.model.tiny import tiny_model

from .graft_reference import (POST_BIAS, exclusive_positions, graft_config, graft_state, reference_deltas,
                              write_graft)

D_MODEL = 32
IDS = list("Marie Curie, 1867.\n".encode())
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    base = tiny_model("rope", n_layers=3, d_model=D_MODEL, n_heads=4, family="llama", seed=1)
    return save_checkpoint(base, tmp_path_factory.mktemp("graft_base"), info={"name": "tiny-llama"})


@pytest.fixture(scope="module")
def graft_file(tmp_path_factory):
    return write_graft(tmp_path_factory.mktemp("graft") / "delta_mlp.pt", graft_state(D_MODEL))


def base_embeddings(directory) -> torch.Tensor:
    return load_file(str(directory / "model.safetensors"))["embed.weight"]


def test_the_kind_starts_as_the_post_starts_its_graft():
    assert GraftIncrementPositions.kind == "lpi-graft" and GraftIncrementPositions.exclusive
    assert POST_OUTPUT_BIAS == POST_BIAS
    model = tiny_model("lpi-graft", n_layers=2, d_model=D_MODEL, family="llama")
    assert torch.count_nonzero(model.shared_delta.fc_out.weight) == 0
    expected = torch.nn.functional.softplus(torch.tensor(POST_BIAS))
    assert torch.equal(token_deltas(model), expected.expand(model.cfg.vocab_size))
    assert abs(float(expected) - 0.999984) < 1e-6  # not exactly 1: the start is the base at 0.999984·t


def test_the_graft_loads_with_the_reference_deltas_and_positions(base_dir, graft_file):
    lens = repo_lens.load(base_dir, device="cpu", graft=graft_file)
    assert lens.model.cfg.layer_mechanisms == ["lpi-graft"] * 3
    state = torch.load(graft_file, weights_only=True, map_location="cpu")["delta_mlp_state_dict"]
    expected = reference_deltas(state, base_embeddings(base_dir))
    table = token_deltas(lens.model)
    assert table.dtype == torch.float32 and float(expected.std()) > 0.05  # δ really varies by token
    torch.testing.assert_close(table.double(), expected, rtol=TOLERANCE, atol=TOLERANCE)
    trace = lens.trace(IDS, progress=False)
    positions = exclusive_positions(expected[IDS])
    assert trace.positions[:, :, 0].max() == 0.0  # exclusive: the first token sits at 0
    for layer in range(3):
        np.testing.assert_allclose(trace.positions[layer], positions.expand(4, -1).numpy(), rtol=TOLERANCE,
                                   atol=TOLERANCE)
    np.testing.assert_allclose(np.cumsum(trace.extras["increments"], -1) - trace.extras["increments"],
                               trace.positions, rtol=TOLERANCE, atol=TOLERANCE)


def test_the_grafted_logits_are_the_base_run_at_the_reference_positions(base_dir, graft_file):
    grafted = repo_lens.load(base_dir, device="cpu", graft=graft_file).model
    base = repo_lens.load(base_dir, device="cpu").model
    state = torch.load(graft_file, weights_only=True, map_location="cpu")["delta_mlp_state_dict"]
    ids = torch.tensor([IDS, IDS[::-1]])
    positions = exclusive_positions(reference_deltas(state, base_embeddings(base_dir))[ids]).float()

    def at_reference(value, hook):
        return positions[:, None, :].expand_as(value).clone()

    with torch.no_grad():
        expected = base.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", at_reference)
                                                       for layer in range(3)])
        torch.testing.assert_close(grafted(ids), expected, rtol=0, atol=1e-5)
        assert (base(ids) - expected).abs().max() > 1e-2  # the graft's positions really change the logits


def test_a_kv_cache_continues_the_exclusive_sum(base_dir, graft_file):
    model = repo_lens.load(base_dir, device="cpu", graft=graft_file).model
    ids = torch.tensor([IDS])
    with torch.no_grad():
        whole = model(ids)
        cache = model.new_cache()
        first = model.forward_logits(ids[:, :7], cache=cache)
        rest = model.forward_logits(ids[:, 7:], cache=cache)
    torch.testing.assert_close(torch.cat((first, rest), dim=1), whole, rtol=0, atol=1e-5)


def test_meta_says_what_the_file_holds_and_lacks(base_dir, graft_file):
    lens = repo_lens.load(base_dir, device="cpu", graft=graft_file)
    authors = lens.meta["authors"]
    assert lens.meta["format"] == "increments-post-graft" and lens.meta["name"] == "tiny-llama + delta_mlp.pt"
    assert authors["step"] == 2000 and authors["final_metrics"]["val/ppl"] == pytest.approx(9.666)
    assert authors["options"]["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    notes = " ".join(authors["notes"])
    assert "exclusive" in notes and "without those adapters" in notes and "SmolLM2-1.7B" in notes
    full = write_graft(graft_file.parent / "full.pt", graft_state(D_MODEL), graft_config(adapt="full"))
    assert "fine-tuned weights are absent" in " ".join(repo_lens.load(base_dir, device="cpu", graft=full)
                                                      .meta["authors"]["notes"])


def test_a_bf16_base_keeps_the_delta_mlp_in_fp32(base_dir, graft_file):
    lens = repo_lens.load(base_dir, device="cpu", dtype="bfloat16", graft=graft_file)
    assert lens.model.embed.weight.dtype == torch.bfloat16
    assert {p.dtype for p in lens.model.shared_delta.parameters()} == {torch.float32}
    state = torch.load(graft_file, weights_only=True)["delta_mlp_state_dict"]
    assert torch.equal(lens.model.shared_delta.fc_out.bias, state["fc2.bias"])
    assert any("fp32" in note for note in lens.meta["authors"]["notes"])


def test_the_graft_alone_is_refused_saying_it_needs_its_base(graft_file):
    with pytest.raises(CheckpointError, match=r"the learned-increments post's graft .*trained on "
                                              r"HuggingFaceTB/SmolLM2-1.7B.*repo_lens.load\(BASE, graft=.*--graft"):
        repo_lens.load(graft_file, device="cpu")


def test_the_command_line_takes_graft(base_dir, graft_file, capsys):
    assert main(["trace", "--model", str(base_dir), "--graft", str(graft_file), "--text", "Marie", "--device",
                 "cpu"]) == 0
    assert "tiny-llama + delta_mlp.pt" in capsys.readouterr().out
    assert main(["trace", "--model", str(base_dir), "--graft", str(base_dir / "nothing.pt"), "--text", "M"]) == 2
    assert "nothing.pt" in capsys.readouterr().err


def _variant(tmp_path, name: str):
    """A graft file broken in one way (see BROKEN), and the words its error must contain."""
    state, config, entries = graft_state(D_MODEL), graft_config(), {}
    path = tmp_path / "delta_mlp.pt"
    if name == "no state dict":
        torch.save({"step": 1, "model_config": config}, path)
        return path, r"not the learned-increments post's graft.*'model_config', 'step'"
    if name == "surplus entry":
        entries["optimizer"] = {}
    if name == "no config":
        torch.save({"delta_mlp_state_dict": state}, path)
        return path, r"no 'model_config'"
    if name == "missing fc2.bias":
        del state["fc2.bias"]
    if name == "a norm":
        state["norm.weight"] = torch.ones(D_MODEL)
    if name == "per-head fc2":
        state["fc2.weight"], state["fc2.bias"] = torch.zeros(2, D_MODEL // 4), torch.zeros(2)
    if name == "integer weights":
        state["fc1.bias"] = torch.zeros(D_MODEL // 4, dtype=torch.int64)
    if name == "NaN":
        state["fc1.weight"][0, 0] = float("nan")
    if name == "hidden width":
        config["delta_hidden_dim"] = 12
    if name == "adapt":
        config["adapt"] = "qlora"
    if name == "unknown field":
        config["lora_rank"] = 16
    if name == "step":
        entries["step"] = -1
    if name == "metrics":
        entries["final_metrics"] = {"val/loss": "low"}
    write_graft(path, state, config, **entries)
    return path, BROKEN[name]


BROKEN = {
    "no state dict": None, "no config": None,
    "surplus entry": r"unexpected entries \['optimizer'\]",
    "missing fc2.bias": r"delta_mlp_state_dict lacks \['fc2.bias'\]",
    "a norm": r"holds unexpected \['norm.weight'\]",
    "per-head fc2": r"delta_mlp_state_dict\['fc2.weight'\] has shape \[2, 8\]",
    "integer weights": r"delta_mlp_state_dict\['fc1.bias'\] is not a floating-point tensor",
    "NaN": r"delta_mlp_state_dict\['fc1.weight'\] holds NaN",
    "hidden width": r"delta_hidden_dim=12 .*fc1.weight has 8 rows",
    "adapt": r"model_config field adapt='qlora'; expected one of \['lora', 'full'\]",
    "unknown field": r"model_config has unknown fields \['lora_rank'\]",
    "step": r"step is -1",
    "metrics": r"final_metrics is .*low",
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_graft_file_is_refused_by_name(base_dir, tmp_path, name):
    path, words = _variant(tmp_path, name)
    with pytest.raises(CheckpointError, match=words):
        repo_lens.load(base_dir, device="cpu", graft=path)


def test_unreadable_and_unsafe_files_are_refused(base_dir, graft_file, tmp_path):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(graft_file.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"truncated.pt \(the learned-increments post's graft file\) is not a "
                                              r"readable torch checkpoint"):
        repo_lens.load(base_dir, device="cpu", graft=truncated)

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    unsafe = write_graft(tmp_path / "unsafe.pt", graft_state(D_MODEL), graft_config(base_model=Payload()))
    with pytest.raises(CheckpointError, match=r"refuses to unpickle .*system"):
        repo_lens.load(base_dir, device="cpu", graft=unsafe)
    torch.save(torch.ones(3), tmp_path / "tensor.pt")
    with pytest.raises(CheckpointError, match=r"is not " + FORMAT[:30] + r".*found Tensor"):
        read_graft(tmp_path / "tensor.pt")
    with pytest.raises(CheckpointError, match=r"missing.pt \(the learned-increments post's graft file\) does not exist"):
        repo_lens.load(base_dir, device="cpu", graft=tmp_path / "missing.pt")


def test_a_base_it_cannot_go_onto_is_refused(graft_file, tmp_path):
    repo_base = save_checkpoint(tiny_model("repo", n_layers=3, d_model=D_MODEL, family="olmo2"), tmp_path / "repo")
    with pytest.raises(CheckpointError, match=r"Llama-family RoPE model .*kinds \['repo', 'rope'\].*SmolLM2-1.7B"):
        repo_lens.load(repo_base, device="cpu", graft=graft_file)
    wide = save_checkpoint(tiny_model("rope", n_layers=2, d_model=48, family="llama"), tmp_path / "wide")
    with pytest.raises(CheckpointError, match=r"fc1.weight'\] reads 32-wide embeddings, but the base .* has d_model 48"):
        repo_lens.load(wide, device="cpu", graft=graft_file)
    olmo2 = save_checkpoint(tiny_model("rope", n_layers=2, d_model=D_MODEL, family="olmo2"), tmp_path / "olmo2")
    assert repo_lens.load(olmo2, device="cpu", graft=graft_file).model.cfg.family == "olmo2"  # OLMo 2 is allowed


def test_bad_graft_arguments_are_input_errors(base_dir, graft_file):
    with pytest.raises(InputError, match="leave out device_map"):
        repo_lens.load(base_dir, device_map="auto", graft=graft_file)
    with pytest.raises(InputError, match="graft must be the path"):
        repo_lens.load(base_dir, graft=3)
    assert is_graft_checkpoint({"delta_mlp_state_dict": {}}) and not is_graft_checkpoint([])
