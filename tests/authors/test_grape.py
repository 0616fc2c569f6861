"""GRAPE authors' checkpoints (issue 34): every one of their 30 configurations, laid out as their
save_pretrained writes it, loads through repo_lens.load, runs their forward (fp32 logits within 1e-4
relative of an independent float64 reference written from their source) and traces the positions
their mechanisms define."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.errors import CheckpointError

from .grape_layout import CONFIGURATIONS, model_args, run_name, write_grape_checkpoint
from .reference_grape import grape_forward

IDS = [3, 17, 5, 60, 1, 2, 90, 44, 8, 8, 21, 33, 70, 9, 0, 12]
KINDS = {"rope": "rope", "alibi": "alibi", "fox": "fox", "grape-a-keygated": "grape-a", "grape-a-querygated": "grape-a",
         "grape-a-querykeygated": "grape-a", "grape-ap-v1": "grape-ap-rotated", "grape-m-ctx": "grape-m-context",
         "grape-m-nonctx": "rope"}


def _load(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # their checkpoints carry no tokenizer
        return repo_lens.load(directory, device="cpu")


def _relative(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours.double() - reference).abs().max() / reference.abs().max())


@pytest.mark.parametrize("variant,size,shift", CONFIGURATIONS,
                         ids=[f"{v}-{s}{'-kvshift' if k else ''}" for v, s, k in CONFIGURATIONS])
def test_every_configuration_loads_runs_their_forward_and_traces(tmp_path, variant, size, shift):
    directory = tmp_path / run_name(variant, size, shift)
    weights = write_grape_checkpoint(directory, variant, size, shift, seed=len(variant) + (size == "L"))
    lens = _load(directory)
    reference, positions = grape_forward(weights, model_args(variant, size, shift), variant, IDS)
    with torch.no_grad():
        logits = lens.model(torch.tensor([IDS]))[0]
    assert logits.dtype == torch.float32 and _relative(logits, reference) < 1e-4
    trace = lens.trace(IDS, progress=False)
    assert trace.layer_kinds == [KINDS[variant]] * model_args(variant, size, shift)["n_layer"]
    expected = torch.stack(positions).numpy()
    np.testing.assert_allclose(trace.positions, expected, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(expected).max()))
    authors = trace.meta["authors"]
    assert authors["variant"] == f"llama-mha-{variant}" and authors["code"] == "github model-architectures/GRAPE"
    assert authors["options"]["k_shift"] is shift and json.dumps(trace.meta)  # the meta a trace file stores


@pytest.mark.parametrize("variant", ["rope", "grape-a-querykeygated", "grape-m-ctx", "fox"])
def test_a_single_token_runs_as_their_code_runs_it(tmp_path, variant):
    """Their ShiftLinear leaves a lone token unshifted (it shifts only when seq_len > 1)."""
    directory = tmp_path / run_name(variant, "M", True)
    weights = write_grape_checkpoint(directory, variant, "M", True, seed=3)
    reference, _ = grape_forward(weights, model_args(variant, "M", True), variant, [42])
    with torch.no_grad():
        assert _relative(_load(directory).model(torch.tensor([[42]]))[0], reference) < 1e-4


@pytest.mark.parametrize("variant", ["rope", "alibi", "fox", "grape-a-keygated", "grape-a-querykeygated",
                                     "grape-ap-v1", "grape-m-ctx", "grape-m-nonctx"])
def test_decoding_with_the_kv_cache_equals_the_full_forward(tmp_path, variant):
    directory = tmp_path / run_name(variant, "M", True)
    write_grape_checkpoint(directory, variant, "M", True, seed=5)
    model = _load(directory).model
    ids = torch.tensor([IDS[:10], IDS[5:15]])
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        pieces = [model(ids[:, :4], cache=cache), model(ids[:, 4:5], cache=cache), model(ids[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_files_of_rope_and_alibi_are_told_apart_by_their_run_folder_only(tmp_path):
    """Their rope and alibi models save identical config.json and weight names."""
    write_grape_checkpoint(tmp_path / "ckpt", "alibi", "M", False)
    with pytest.raises(CheckpointError, match="out_llama-mha-alibi_"):
        _load(tmp_path / "ckpt")
    os.symlink(tmp_path / "ckpt", tmp_path / "out_llama-mha-alibi_copy")
    assert _load(tmp_path / "out_llama-mha-alibi_copy").meta["authors"]["variant"] == "llama-mha-alibi"
    snapshot = tmp_path / "out_llama-mha-rope_124m_Opt_adamw" / "checkpoint-5000"
    write_grape_checkpoint(snapshot, "rope", "M", False)
    assert _load(snapshot).layer_kinds[0] == "rope"


def test_a_folder_named_for_another_variant_than_its_weights_is_refused(tmp_path):
    directory = tmp_path / "out_llama-mha-rope_x"
    write_grape_checkpoint(directory, "grape-m-ctx", "M", False)
    with pytest.raises(CheckpointError, match="named for GRAPE's llama-mha-rope but its weights are llama-mha-grape-m-ctx"):
        _load(directory)


@pytest.mark.parametrize("change,message", [
    ("drop", r"missing weights .*\['transformer\.h\.1\.attn\.keygated_bias\.u'\]"),
    ("add", r"surplus weights .*\['transformer\.h\.0\.attn\.extra\.weight'\]"),
    ("shape", r"transformer\.h\.0\.attn\.c_q\.weight: checkpoint \(3, 3\)"),
])
def test_missing_surplus_and_misshapen_weights_are_refused_by_their_names(tmp_path, change, message):
    directory = tmp_path / run_name("grape-a-keygated", "M", False)
    weights = write_grape_checkpoint(directory, "grape-a-keygated", "M", False)
    if change == "drop":
        del weights["transformer.h.1.attn.keygated_bias.u"]
    elif change == "add":
        weights["transformer.h.0.attn.extra.weight"] = torch.zeros(2)
    else:
        weights["transformer.h.0.attn.c_q.weight"] = torch.zeros(3, 3)
    torch.save(weights, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=message):
        _load(directory)


def test_a_pytorch_model_bin_that_would_run_code_is_refused(tmp_path):
    directory = tmp_path / run_name("rope", "M", False)
    write_grape_checkpoint(directory, "rope", "M", False)
    marker = tmp_path / "owned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"transformer.wte.weight": Payload()}, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        _load(directory)
    assert not marker.exists()


@pytest.mark.parametrize("overrides,message", [
    ({"head_dim": 8}, "GRAPE-M needs n_head \\* head_dim == n_embd"),
    ({"n_head": 0}, "n_head=0; expected a positive integer"),
])
def test_bad_configs_get_clear_errors(tmp_path, overrides, message):
    directory = tmp_path / run_name("grape-m-nonctx", "M", False)
    write_grape_checkpoint(directory, "grape-m-nonctx", "M", False)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **overrides}))
    with pytest.raises(CheckpointError, match=message):
        _load(directory)


def test_checkpoint_files_lists_what_the_load_opens(tmp_path):
    directory = tmp_path / run_name("fox", "M", False)
    write_grape_checkpoint(directory, "fox", "M", False)
    assert [path.name for path in repo_lens.checkpoint_files(directory)] == ["config.json", "pytorch_model.bin"]


def test_grape_ap_runs_in_their_attention_inside_their_block(tmp_path):
    """GRAPE-AP's potentials read the layer input, so its layers are AuthorsAttention in AuthorsBlock: p of its own
    projection (p_tie_mode none, p_head_dim 8), ALiBi's slopes as the heads' m_h; run alone it refuses."""
    directory = tmp_path / run_name("grape-ap-v1", "M", False)
    write_grape_checkpoint(directory, "grape-ap-v1", "M", False)
    block = _load(directory).model.blocks[1]
    assert isinstance(block, repo_lens.model.authors.block.AuthorsBlock) and block.WEIGHT_BEFORE_CAST
    attention = block.attn
    assert isinstance(attention, repo_lens.model.authors.attention.AuthorsAttention)
    assert isinstance(attention, repo_lens.model.compat.attention.AttentionWeights)
    assert tuple(attention.W_Q.shape) == (4, 64, 16)  # TransformerLens' [head, d_model, d_head]
    potentials = attention.mechanism
    assert isinstance(potentials, repo_lens.model.authors.path_potentials.PathPotentials)
    assert (potentials.tied, potentials.d_p, potentials.slopes) == ("none", 8, (2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8))
    assert potentials.kind == attention.kind == "grape-ap-rotated"  # not the zoo's grape-ap (ψ of q·k)
    assert tuple(potentials.c_p.weight.shape) == (4 * 8, 64)
    with pytest.raises(TypeError, match="reads the layer input"):
        potentials(torch.zeros(1, 4, 3, 16), torch.zeros(1, 4, 3, 3), torch.ones(3, 3, dtype=torch.bool))


def test_pickled_weights_are_read_from_one_file_or_the_shards_of_an_index(tmp_path):
    from repo_lens.model.loaders.grape.load import grape_files
    from repo_lens.model.loaders.hf.pickled_weights import bin_files, read_bin_weights

    directory = tmp_path / run_name("rope", "M", False)
    weights = write_grape_checkpoint(directory, "rope", "M", False)
    assert grape_files(directory) == [directory / "config.json", directory / "pytorch_model.bin"]
    names = sorted(weights)
    halves = {"one.bin": names[: len(names) // 2], "two.bin": names[len(names) // 2:]}
    for shard, part in halves.items():
        torch.save({name: weights[name] for name in part}, directory / shard)
    index = {"weight_map": {name: shard for shard, part in halves.items() for name in part}}
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert bin_files(directory) == [directory / "one.bin", directory / "two.bin"]  # the index wins over the file
    read = read_bin_weights(directory)
    assert sorted(read) == names and all(torch.equal(read[name], weights[name]) for name in names)
    torch.save({names[0]: weights[names[0]]}, directory / "two.bin")
    with pytest.raises(CheckpointError, match=f"{names[0]} is in two weight files"):
        read_bin_weights(directory)
