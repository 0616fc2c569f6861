"""Refuse a checkpoint with learned positions on the generic Hugging Face path, which would run it as RoPE."""

from __future__ import annotations

import re
from pathlib import Path

from repo_lens.errors import CheckpointError

# the RePo authors' position weights (what transformers reports as unexpected keys and drops)
POSITION_WEIGHT = re.compile(r"\.self_attn\.(gate_map|content_map|final_map|dynamic_map)\.")


def position_weight_names(directory: Path) -> list[str]:
    """Names of the learned-position weights in ``directory``'s safetensors files (header only); a file that
    is no readable safetensors file (empty, truncated, corrupt, not a regular file) is a CheckpointError
    naming it."""
    from safetensors import SafetensorError, safe_open

    from repo_lens.model.loaders.files import regular_file
    from repo_lens.model.loaders.native.packed import readable_file
    from repo_lens.model.loaders.hf.shards import weight_files

    try:
        files = weight_files(directory)
    except CheckpointError:
        return []
    names: list[str] = []
    for path in files:
        regular_file(path, "safetensors weights")
        try:
            with safe_open(str(readable_file(path)), framework="pt") as handle:
                names += [name for name in handle.keys() if POSITION_WEIGHT.search(name)]
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{path} is not a readable safetensors file ({error}); it is empty, truncated or "
                                  "corrupt: download or save it again") from None
    return sorted(names)


def refuse_learned_positions(directory: Path) -> None:
    """Raise CheckpointError when ``directory`` declares learned positions (a ``pe_config``) or holds their
    weights: stock transformers would drop them and run every layer at the integer positions 0..T−1.

    >>> import tempfile, json
    >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "config.json").write_text(json.dumps({"pe_config": {}}))
    >>> refuse_learned_positions(folder)
    Traceback (most recent call last):
    repo_lens.errors.CheckpointError: ...
    """
    from repo_lens.model.loaders.files import read_json_file

    config = read_json_file(directory / "config.json", "config.json")
    names = position_weight_names(directory)
    if "pe_config" not in config and not names:
        return
    found = "declares learned positions (pe_config in config.json)" if "pe_config" in config else ""
    if names:
        found += (" and " if found else "") + f"holds their weights ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
    raise CheckpointError(
        f"{directory} {found}; the generic Hugging Face path would drop them and run plain RoPE at positions "
        "0..T−1. Load it with repo_lens.load(directory), which runs its learned positions"
    )
