"""Load the learned-increments post's training checkpoints ("Learned position increments", Brendan Long; its
code: github.com/brendanlong/learned-position-increments-experiment, ``experiments/selective_pe/``).

Its training writes ``step_<N>.pt``: ``torch.save({"step", "model_state_dict", "model_config"})`` with the
state_dict of its ``SelectivePETransformer`` (``_orig_mod.`` stripped, tensors tagged with the device they
were saved from) and ``SelectivePEModelConfig.model_dump()``. repo_lens reads it with
``torch.load(weights_only=True)`` onto the CPU, maps the names (:mod:`.names`, which also moves its adjacent
RoPE pairs to the half-split layout), builds the model its config describes (:mod:`.config`) and records
what needs saying (:mod:`.notes`).
"""

from repo_lens.model.loaders.increments_post.files import FORMAT, is_post_checkpoint, is_post_folder, post_file
from repo_lens.model.loaders.increments_post.load import load_post

__all__ = ["FORMAT", "is_post_checkpoint", "is_post_folder", "load_post", "post_file"]
