"""Tokenizers come from the checkpoint directory, local files only."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(directory: Path) -> Any:
    """The HF tokenizer saved in ``directory``, or None (with a warning) when it has none."""
    if not any((directory / name).exists() for name in _TOKENIZER_FILES):
        warnings.warn(
            f"{directory} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}); trace token ids instead of text",
            stacklevel=3,
        )
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"the tokenizer files in {directory} cannot be loaded offline: {error}") from None
