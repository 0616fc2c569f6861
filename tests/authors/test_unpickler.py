"""The restricted unpickler: a CoPE training checkpoint (options in an argparse.Namespace, the logger's
Metric objects) reads as inert data without importing their classes; a pickle that would run code is
refused and runs nothing."""

from __future__ import annotations

import argparse
import os
import pickle
import sys

import pytest
import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.inert import InertNamespace, InertRecord
from repo_lens.model.loaders.unpickler import read_pickled

from .authors_pickles import authors_logger


def _save_with_authors_classes(tmp_path, obj_factory):
    """torch.save an object built with the CoPE authors' ``src.utils.logger.Metric`` (importable only while saving)."""
    path = tmp_path / "checkpoint.pt"
    with authors_logger(tmp_path) as Metric:
        torch.save(obj_factory(Metric), path)
    return path


def test_cope_training_checkpoint_reads_options_and_metrics_as_inert_data(tmp_path):
    def checkpoint(metric):
        options = argparse.Namespace(pos_emb="cope", nlayers=2, device=torch.device("cpu"), cope_npos=None)
        return {"cfg": options, "model": {"module.embed_toks.weight": torch.ones(3, 2)},
                "logger": {"log": [{"loss/val": 1.0}], "metrics": {"loss/val": metric("loss/val", divide_by="n")}},
                "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0]}]}, "tokenizer": None}

    path = _save_with_authors_classes(tmp_path, checkpoint)
    loaded = read_pickled(path, "CoPE checkpoint")
    assert isinstance(loaded["cfg"], InertNamespace)
    assert loaded["cfg"].attributes()["pos_emb"] == "cope" and loaded["cfg"].attributes()["nlayers"] == 2
    metric = loaded["logger"]["metrics"]["loss/val"]
    assert type(metric) is InertRecord and metric.attributes()["divide_by"] == "n"
    assert torch.equal(loaded["model"]["module.embed_toks.weight"], torch.ones(3, 2))
    assert "src.utils.logger" not in sys.modules and "src" not in sys.modules  # never imported


class _Payload:
    """Pickles as a call of ``os.system`` that would create ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _ExecPayload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('owned')",))


@pytest.mark.parametrize("payload", [_Payload, _ExecPayload])
@pytest.mark.parametrize("where", ["top", "beside weights", "inside the options"])
def test_a_code_executing_pickle_is_refused_and_runs_nothing(tmp_path, payload, where):
    marker = tmp_path / "owned"
    evil = payload(marker)
    wrapped = {"top": evil, "beside weights": {"model": {"w": torch.zeros(2)}, "extra": evil},
               "inside the options": {"cfg": argparse.Namespace(pos_emb="cope", hook=evil)}}[where]
    path = tmp_path / "pytorch_model.bin"
    torch.save(wrapped, path)
    with pytest.raises(CheckpointError, match="refuses to unpickle .*(system|exec).*run code"):
        read_pickled(path, "pytorch_model.bin")
    assert not marker.exists()


def test_a_legacy_raw_pickle_with_a_payload_is_refused(tmp_path):
    marker = tmp_path / "owned"
    path = tmp_path / "model.pt"
    with open(path, "wb") as file:
        pickle.dump(_Payload(marker), file, protocol=2)
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        read_pickled(path, "model.pt")
    assert not marker.exists()


def test_a_stand_in_called_with_arguments_keeps_them_as_data(tmp_path):
    """A pickle may REDUCE an allowed name with arguments: the stand-in stores them and runs nothing."""
    class Options:
        def __reduce__(self):
            return (argparse.Namespace, ("ignored", 3), {"pos_emb": "rel"})

    path = tmp_path / "options.pt"
    torch.save({"cfg": Options()}, path)
    options = read_pickled(path, "options")["cfg"]
    assert isinstance(options, InertNamespace)
    assert options.attributes() == {"pos_emb": "rel"} and options.args == (("ignored", 3), {})


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04broken zip"])
def test_corrupt_files_get_a_checkpoint_error(tmp_path, content):
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="pytorch_model.bin"):
        read_pickled(path, "pytorch_model.bin")


def test_not_a_regular_file_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="directory, not a regular file"):
        read_pickled(tmp_path, "pytorch_model.bin")
