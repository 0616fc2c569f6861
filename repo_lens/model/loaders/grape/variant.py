"""Which of the GRAPE authors' model files (``model/llama-mha-*.py``) wrote a checkpoint.

Their ``config.json`` does not say: every variant saves ``model_type: "gpt2"`` and the same training
arguments. The weight names tell most variants apart; ``llama-mha-rope`` and ``llama-mha-alibi`` (and
GRAPE-AP tied to q/k/v, which has no weights of its own) save identical files, so their training
script's output folder name, ``out_{model_type}_...`` (snapshots in ``.../checkpoint-{step}``), decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from repo_lens.errors import CheckpointError

VARIANTS = ("llama-mha-rope", "llama-mha-alibi", "llama-mha-fox", "llama-mha-grape-a-keygated",
            "llama-mha-grape-a-querygated", "llama-mha-grape-a-querykeygated", "llama-mha-grape-ap-v1",
            "llama-mha-grape-m-ctx", "llama-mha-grape-m-nonctx")
# a weight-name fragment only one variant's files have -> that variant
_MARKERS = (
    (".attn.core.", "llama-mha-fox"),
    (".attn.omega_proj.", "llama-mha-grape-m-ctx"),
    (".attn.grape.log_freq", "llama-mha-grape-m-nonctx"),
    (".attn.querykeygated_bias.", "llama-mha-grape-a-querykeygated"),
    (".attn.keygated_bias.", "llama-mha-grape-a-keygated"),
    (".attn.querygated_bias.", "llama-mha-grape-a-querygated"),
    (".attn.c_p.", "llama-mha-grape-ap-v1"),
)
# variants whose files hold no weight of their own: only the folder name tells them apart
_SILENT = ("llama-mha-rope", "llama-mha-alibi", "llama-mha-grape-ap-v1")
_NAMED = re.compile(r"(llama-mha-(?:grape-a-querykeygated|grape-a-keygated|grape-a-querygated|grape-ap-v1|"
                    r"grape-m-nonctx|grape-m-ctx|rope|alibi|fox))(?![a-z0-9-])")


def variant_from_weights(names: Iterable[str]) -> str | None:
    """The variant the weight names prove, or None when they fit several (rope, alibi, tied GRAPE-AP).

    >>> variant_from_weights(["transformer.h.0.attn.core.fgate_proj.weight"])
    'llama-mha-fox'
    >>> variant_from_weights(["transformer.h.0.attn.c_q.weight"]) is None
    True
    """
    found = {variant for name in names for marker, variant in _MARKERS if marker in name}
    if "llama-mha-grape-m-ctx" in found:  # ctx also has log_freq
        found.discard("llama-mha-grape-m-nonctx")
    if len(found) > 1:
        raise CheckpointError(f"the weights mix parts of GRAPE variants {sorted(found)}; expected the files one of "
                              f"their model files ({', '.join(VARIANTS)}) saves")
    return found.pop() if found else None


def variant_from_path(directory: Path) -> str | None:
    """The variant named in the folder (or, for ``checkpoint-N`` snapshots, its parent), as their
    training script names it: ``out_{model_type}_...``.

    >>> variant_from_path(Path("/runs/out_llama-mha-alibi_354m_Opt_adamw/checkpoint-5000"))
    'llama-mha-alibi'
    """
    for part in (directory.name, directory.parent.name):
        found = _NAMED.search(part)
        if found:
            return found.group(1)
    return None


def grape_variant(directory: Path, names: Iterable[str]) -> str:
    """The GRAPE variant of the checkpoint in ``directory`` with weight ``names``; refuses a folder name
    that contradicts the weights, and weights no name disambiguates."""
    by_weights, by_path = variant_from_weights(names), variant_from_path(directory)
    if by_weights and by_path and by_weights != by_path:
        raise CheckpointError(f"{directory} is named for GRAPE's {by_path} but its weights are {by_weights}'s; "
                              "rename the folder or use the right checkpoint")
    if by_weights:
        return by_weights
    if by_path in _SILENT:
        return by_path
    raise CheckpointError(
        f"{directory} holds a GRAPE authors' checkpoint whose files fit {', '.join(_SILENT)} alike (their config.json "
        "and weight names are identical); name the folder as their training script does, e.g. "
        f"out_llama-mha-alibi_... (or a symlink of that name to it), so the variant is known")
