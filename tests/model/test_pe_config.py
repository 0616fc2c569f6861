"""pe_config is read exactly as the RePo authors' transformers code reads it.

Their ``Olmo2Model.__init__`` (SakanaAI/repo, transformers/.../olmo2/modeling_olmo2.py) does, in
effect::

    start = pe_config.dynmaic_pe_start_layer if present else 0
    ids = [int(i) for i in pe_config.dynmaic_pe_layer_ids.split(",")] if present and non-empty else range(L)
    layer l runs dynamic_pe_mode  iff  l in [i for i in ids if i >= start]

Every expectation below is written by hand from those three lines, not from repo_lens.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.torch import load_file

import repo_lens
from conftest import add_repo_weights, hf_model, save_hf_model, tiny_olmo2_config
from reference_repo import reference_forward
from repo_lens.model.loaders.repo_authors.pe_config import read_pe_config

MODE = {"dynamic_pe_mode": "swigluex_multihead"}
R, P = "rope", "repo"


@pytest.mark.parametrize(
    "pe_config, kinds, note_parts",
    [
        # the published layout: both spellings, equal
        ({**MODE, "dynamic_pe_start_layer": 2, "dynmaic_pe_start_layer": 2,
          "dynamic_pe_layer_ids": "", "dynmaic_pe_layer_ids": ""}, [R, R, P, P], []),
        # correctly spelled keys only: their code sees neither key -> start 0, every layer
        ({**MODE, "dynamic_pe_start_layer": 2, "dynamic_pe_layer_ids": ""}, [P, P, P, P],
         ["dynamic_pe_start_layer=2", "would select layers [2, 3]", "selects layers [0, 1, 2, 3]"]),
        # correctly spelled ids: ignored, every layer >= the misspelled start
        ({**MODE, "dynmaic_pe_start_layer": 2, "dynamic_pe_layer_ids": "3"}, [R, R, P, P],
         ["dynamic_pe_layer_ids='3'", "would select layers [3]", "selects layers [2, 3]"]),
        # ids below the start: dropped
        ({**MODE, "dynmaic_pe_start_layer": 2, "dynmaic_pe_layer_ids": "0,1,3"}, [R, R, R, P],
         ["[0, 1] below dynmaic_pe_start_layer=2"]),
        # -1 is below the default start 0, 7 is no layer of a 4-layer model; int() takes spaces
        ({**MODE, "dynmaic_pe_layer_ids": " 3,7,-1"}, [R, R, R, P], ["[-1] below", "names [7]"]),
        ({**MODE, "dynmaic_pe_layer_ids": "1, 3"}, [R, P, R, P], []),
        # neither key: every layer, nothing to say
        (dict(MODE), [P, P, P, P], []),
        # no mode: 'none'; no pe_config at all: the same
        ({"dynmaic_pe_start_layer": 2}, [R, R, R, R], []),
        (None, [R, R, R, R], []),
        # a start past the last layer selects nothing
        ({**MODE, "dynmaic_pe_start_layer": 9}, [R, R, R, R], ["no layer runs"]),
        # their NoPE baseline: no rotation in the selected layers
        ({"dynamic_pe_mode": "nope", "dynmaic_pe_start_layer": 2}, [R, R, "nope", "nope"], []),
    ],
)
def test_layers_are_selected_like_the_authors_code(pe_config, kinds, note_parts):
    layout = read_pe_config(pe_config, n_layers=4, d_model=64, n_heads=4)
    assert layout.layer_mechanisms == kinds
    notes = " | ".join(layout.notes)
    assert bool(layout.notes) == bool(note_parts), notes
    for part in note_parts:
        assert part in notes


@pytest.mark.parametrize(
    "pe_config, message",
    [
        ({**MODE, "dynmaic_pe_layer_ids": [2, 3]}, "is not a string.*'5,6,7'"),  # their .split fails
        ({**MODE, "dynmaic_pe_layer_ids": "2;3"}, "not a comma-separated list"),  # int('2;3') fails
        ({**MODE, "dynmaic_pe_start_layer": "2"}, "is not a number"),  # int >= str fails
        ({"dynamic_pe_mode": "attention"}, "dynamic_position_encoding_attention"),
        ({"dynamic_pe_mode": "mlp_singlehead"}, "unknown dynamic_pe_mode 'mlp_singlehead'.*swigluex_multihead"),
        ({"dynamic_pe_mode": None}, "unknown dynamic_pe_mode None"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_configs_their_code_cannot_run_are_refused(pe_config, message):
    with pytest.raises(repo_lens.CheckpointError, match=message):
        read_pe_config(pe_config, n_layers=4, d_model=64, n_heads=4)


def test_integer_position_modes_run_as_rope_and_say_so():
    layout = read_pe_config({"dynamic_pe_mode": "swiglu", "dynmaic_pe_start_layer": 2}, n_layers=4, d_model=64, n_heads=4)
    assert layout.layer_mechanisms == [R] * 4 and layout.selected_layers == [2, 3]
    assert "rotates by the integer index" in layout.notes[0]
    # swiglu passes their substring test `mode in "swigluex_multihead"`: the maps exist, unread
    assert layout.unread_weights == {
        f"model.layers.{layer}.self_attn.{name}.weight": shape
        for layer in (2, 3) for name, shape in (("gate_map", (8, 64)), ("content_map", (8, 64)), ("final_map", (4, 8)))
    }
    scale_control = read_pe_config({"dynamic_pe_mode": "continuous_with_scale_control", "dynmaic_pe_layer_ids": "1"},
                                   n_layers=4, d_model=64, n_heads=4)
    assert scale_control.unread_weights == {"model.layers.1.self_attn.dynamic_map.weight": (1, 64)}
    assert read_pe_config({"dynamic_pe_mode": "discrete"}, n_layers=4, d_model=64, n_heads=4).unread_weights == {}


# --- the three configurations of issue 14, loaded end to end -------------------------------------


def _directory(tmp_path, start, pe_config):
    directory = save_hf_model(hf_model(tiny_olmo2_config(), seed=3), tmp_path / "ckpt")
    add_repo_weights(directory, start=start)
    config = json.loads((directory / "config.json").read_text())
    config["pe_config"] = pe_config
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _check_against_reference(lens, directory, repo_layers):
    trace = lens.trace("the cat sat on the mat . the dog sat on the cat")
    config = json.loads((directory / "config.json").read_text())
    _, expected = reference_forward(load_file(str(directory / "model.safetensors")), config,
                                    trace.token_ids.tolist(), repo_layers=repo_layers)
    np.testing.assert_allclose(trace.positions, expected.numpy(), atol=1e-4, rtol=0)
    return trace


def test_correctly_spelled_keys_only_mean_repo_in_every_layer(tmp_path):
    directory = _directory(tmp_path, start=0, pe_config={**MODE, "dynamic_pe_start_layer": 2, "dynamic_pe_layer_ids": ""})
    with pytest.warns(UserWarning, match="reads only the misspelled"):
        lens = repo_lens.load(directory, device="cpu")
    assert lens.model.layer_kinds == [P] * 4
    trace = _check_against_reference(lens, directory, repo_layers=[0, 1, 2, 3])
    assert any("dynamic_pe_start_layer=2" in note for note in trace.meta["pe_config_notes"])
    assert lens.meta["pe_config_notes"] == trace.meta["pe_config_notes"]


def test_correctly_spelled_layer_ids_are_ignored(tmp_path):
    directory = _directory(tmp_path, start=2,
                           pe_config={**MODE, "dynmaic_pe_start_layer": 2, "dynamic_pe_layer_ids": "3"})
    with pytest.warns(UserWarning, match="dynamic_pe_layer_ids='3'"):
        lens = repo_lens.load(directory, device="cpu")
    assert lens.model.layer_kinds == [R, R, P, P]  # layer 2's maps are used, not surplus
    _check_against_reference(lens, directory, repo_layers=[2, 3])
    assert len(lens.meta["pe_config_notes"]) == 1


def test_layer_ids_below_the_start_are_dropped(tmp_path):
    directory = _directory(tmp_path, start=2,
                           pe_config={**MODE, "dynmaic_pe_start_layer": 2, "dynmaic_pe_layer_ids": "0,1,2,3"})
    with pytest.warns(UserWarning, match=r"names layers \[0, 1\] below"):
        lens = repo_lens.load(directory, device="cpu")
    assert lens.model.layer_kinds == [R, R, P, P]
    _check_against_reference(lens, directory, repo_layers=[2, 3])


def test_the_published_layout_loads_without_notes(repo_dir, recwarn):
    lens = repo_lens.load(repo_dir, device="cpu")
    assert lens.meta["pe_config_notes"] == []
    assert not [warning for warning in recwarn if "pe_config" in str(warning.message)]


def test_missing_maps_after_their_reading_are_named(repo_dir, tmp_path):
    """Correctly spelled keys only, but maps only from layer 2: their reading needs maps in 0 and 1."""
    directory = tmp_path / "ckpt"
    shutil.copytree(repo_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    config["pe_config"] = {**MODE, "dynamic_pe_start_layer": 2}
    (directory / "config.json").write_text(json.dumps(config))
    missing = "model.layers.0.self_attn.gate_map.weight"
    with pytest.warns(UserWarning), pytest.raises(repo_lens.CheckpointError, match=missing):
        repo_lens.load(directory, device="cpu")

