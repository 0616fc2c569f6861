"""Tokenizers come from the checkpoint directory, local files only, each a regular file."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.files import inside, read_json_file, regular_file

# the files transformers' AutoTokenizer may read from a directory (besides config.json)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model", "chat_template.jinja", "chat_template.json")
CHAT_TEMPLATE_DIR = "additional_chat_templates"
# any one of these makes a directory hold a tokenizer
_TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def tokenizer_files(directory: Path) -> list[Path]:
    """The tokenizer files present in ``directory`` (what loading its HF tokenizer may open).

    Example:
        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> _ = (directory / "tokenizer.json").write_text("{}")
        >>> [path.name for path in tokenizer_files(directory)]
        ['tokenizer.json']
    """
    present = [directory / name for name in TOKENIZER_FILES
               if (directory / name).exists() or (directory / name).is_symlink()]
    templates = directory / CHAT_TEMPLATE_DIR
    if templates.is_dir():
        present += sorted(path for path in templates.iterdir() if not path.name.startswith("."))
    return present + _versioned_tokenizer_files(directory)


def _versioned_tokenizer_files(directory: Path) -> list[Path]:
    """The ``fast_tokenizer_files`` tokenizer_config.json names (transformers opens one of them), each
    refused unless it lies inside ``directory``."""
    config_path = directory / "tokenizer_config.json"
    if not (config_path.exists() or config_path.is_symlink()):
        return []
    names = read_json_file(config_path, "tokenizer_config.json").get("fast_tokenizer_files") or []
    if not isinstance(names, list):
        raise CheckpointError(f"{config_path} field fast_tokenizer_files={names!r} is invalid; expected a list of "
                              "file names in the checkpoint directory")
    return [inside(directory, name, config_path) for name in names]


def load_tokenizer(directory: Path) -> Any:
    """The HF tokenizer saved in ``directory``, or None (with a warning) when it has none."""
    files = tokenizer_files(directory)
    if not any(path.name in _TOKENIZER_MARKERS for path in files):
        warnings.warn(
            f"{directory} has no tokenizer files ({', '.join(_TOKENIZER_MARKERS)}); trace token ids instead of text",
            stacklevel=3,
        )
        return None
    for path in files:
        regular_file(path, "tokenizer file")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
        raise CheckpointError(f"the tokenizer files in {directory} cannot be loaded offline "
                              f"({type(error).__name__}: {error}); expected a tokenizer saved by "
                              "save_pretrained") from None
