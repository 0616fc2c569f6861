"""load's, checkpoint_files' and attention_mass_hf's call forms from before HubAccess and HFLoadOptions (and
load's positional device, dtype, device_map, max_memory) still load the same model, with a DeprecationWarning."""

from __future__ import annotations

import numpy as np
import pytest

import repo_lens
from repo_lens.loading import HubAccess

TEXT = "The needle is in the haystack."


def test_load_by_position_and_with_hub_keywords_warns_and_loads_the_same_model():
    reference = repo_lens.load("zoo:bytes-repo", device="cpu").trace(TEXT).positions
    with pytest.warns(DeprecationWarning, match=r"passing device, dtype to load\(\) by position is deprecated"):
        by_position = repo_lens.load("zoo:bytes-repo", "cpu", "float32")
    with pytest.warns(DeprecationWarning, match=r"pass hub_access=HubAccess\(token=..., local_files_only=...\)"):
        by_keyword = repo_lens.load("zoo:bytes-repo", device="cpu", token=None, local_files_only=True)
    for lens in (by_position, by_keyword):
        np.testing.assert_array_equal(lens.trace(TEXT).positions, reference)
    with pytest.raises(repo_lens.InputError, match="pass local_files_only inside hub_access=HubAccess"):
        repo_lens.load("zoo:bytes-repo", local_files_only=True, hub_access=HubAccess())


def test_checkpoint_files_with_hub_keywords_warns_and_lists_the_same_files():
    listed = repo_lens.checkpoint_files("zoo:bytes-repo", hub_access=HubAccess(local_files_only=True))
    with pytest.warns(DeprecationWarning, match=r"checkpoint_files\(local_files_only=...\) is deprecated"):
        assert repo_lens.checkpoint_files("zoo:bytes-repo", local_files_only=True) == listed
    assert [path.name for path in listed] == ["config.json", "model.safetensors.xz"]


def test_attention_mass_hf_load_keywords_become_its_load_options(llama_dir):
    pytest.importorskip("nnsight", reason="the HF lens needs nnsight: pip install nnsight")
    from repo_lens.hf import HFLoadOptions, attention_mass_hf

    ids, spans, query = list(range(2, 40)), {"needle": (5, 9)}, (30, 38)
    new = attention_mass_hf(str(llama_dir), ids, spans, query, load=HFLoadOptions(device="cpu", dtype="float32"))
    with pytest.warns(DeprecationWarning, match=r"pass load=HFLoadOptions\(device=..., dtype=...\) instead"):
        old = attention_mass_hf(str(llama_dir), ids, spans, query, device="cpu", dtype="float32")
    assert old.per_token == new.per_token and set(new.per_token) == {"needle", "rest"}
    for span, values in new.by_layer_head.items():
        np.testing.assert_array_equal(old.by_layer_head[span], values)
