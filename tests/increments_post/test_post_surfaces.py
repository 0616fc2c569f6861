"""The post's checkpoints where a user meets them: ``repo-lens trace --model``, the app's model box, and the
intervention API (integer positions edit δ to 1, so the edited forward is the post's own ``rope`` model on the
same weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.cli import main as cli_main

from .reference_post import post_config, post_forward, write_post_checkpoint

IDS = list("Marie Curie won.\n".encode())


def test_the_command_line_traces_a_run_folder(tmp_path, capsys):
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True)
    write_post_checkpoint(tmp_path / "run", cfg, seed=11)
    out = tmp_path / "trace.safetensors"
    assert cli_main(["trace", "--model", str(tmp_path / "run"), "--text", "Marie Curie", "--device", "cpu",
                     "--save", str(out)]) == 0
    trace = repo_lens.Trace.load(out)
    assert trace.layer_kinds == ["lpi-resid"] * cfg["n_layers"] and trace.tokens[:5] == list("Marie")
    assert np.all(np.diff(trace.positions, axis=-1) > 0)  # running sums of positive δ


def test_integer_edits_turn_a_selective_model_into_its_rope_twin(tmp_path):
    """ablate(mode="integer") sets δ = 1 in every layer: positions 1..T, which q·k sees as the index 0..T−1,
    so the logits are the reference forward of the same weights with pos_encoding="rope"."""
    from repo_lens.interventions import ablate

    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, per_head_delta=True)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=12)
    lens = repo_lens.load(path, device="cpu")
    edited = ablate(lens, [IDS], mode="integer")[0].double()
    twin = post_forward(weights, {**cfg, "pos_encoding": "rope"}, IDS)["logits"]
    assert float((edited - twin).abs().max()) < 1e-4
    original = post_forward(weights, cfg, IDS)["logits"]
    assert float((original - twin).abs().max()) > 1e-2  # the edit changed something


@pytest.mark.slow
def test_the_app_model_box_opens_a_run_folder(tmp_path, monkeypatch):
    import repo_lens.zoo
    from streamlit.testing.v1 import AppTest

    from repo_lens.cli import APP_SCRIPT
    from tests.app.app_helpers import assert_clean, figures, messages

    cfg = post_config(pos_encoding="selective_rope", max_seq_len=1024)
    write_post_checkpoint(tmp_path / "post-run", cfg, seed=13)
    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(tmp_path))
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(tmp_path / "post-run"))
    monkeypatch.setattr(repo_lens.zoo, "available_models", lambda: [])
    monkeypatch.setattr(repo_lens.zoo, "zoo_entries", lambda: [])
    at = AppTest.from_file(str(APP_SCRIPT), default_timeout=180).run()
    assert_clean(at)
    assert not messages(at, "error"), messages(at, "error")
    assert at.selectbox(key="model_a").value == str((tmp_path / "post-run").resolve())
    assert len(figures(at)) == 1


def test_positions_of_the_edited_layer_are_the_index(tmp_path):
    from repo_lens.interventions import ablated_positions

    cfg = post_config(pos_encoding="selective_pope", per_head_delta=True)
    lens = repo_lens.load(write_post_checkpoint(tmp_path, cfg, seed=14)[0], device="cpu")
    positions = ablated_positions(lens, IDS, mode="integer", layers=1)
    expected = np.arange(1, len(IDS) + 1, dtype=np.float32)
    np.testing.assert_allclose(positions[1], np.broadcast_to(expected, positions[1].shape), rtol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(positions[0], lens.trace(IDS, progress=False).positions[0], rtol=1e-5)
