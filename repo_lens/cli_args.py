"""The argparse ``type=`` functions of the ``repo-lens`` command: each refuses a bad value before
anything loads, with one line that names the flag's problem and the fix (README "Bad input")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from repo_lens.errors import InputError


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number within [low, high] (no upper bound when ``high`` is None).

    >>> whole_number(1)("8")
    8
    """
    bounds = f"within [{low}, {high}]" if high is not None else f"≥ {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    return parse


positive_int = whole_number(1)
MAX_PROMPT_TOKENS = 2**21  # analyze --lengths: far beyond any context; a longer prompt would take hours to build
SEED_RANGE = (0, 2**32 - 1)  # what every generator a seed reaches accepts (numpy's legacy one is the narrowest)
seed_value = whole_number(*SEED_RANGE)


def positive_number(high: float) -> Callable[[str], float]:
    """An argparse type: a finite number > 0 and ≤ ``high``.

    >>> positive_number(100)("0.5")
    0.5
    """
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number > 0 and ≤ {high:g}, got {text!r}") from None
        if not 0 < value <= high:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be > 0 and ≤ {high:g}, got {text}")
        return value

    return parse


def number_list(kind: type, low: float, high: float | None, example: str) -> Callable[[str], list]:
    """An argparse type: a non-empty comma-separated list of ``kind`` values within [low, high].

    >>> number_list(float, 0, 1, "0,0.5,1")("0, 0.25,1")
    [0.0, 0.25, 1.0]
    """
    noun = "a whole number" if kind is int else "a number"
    shown = str if kind is int else "{:g}".format
    bounds = f"within [{shown(low)}, {shown(high)}]" if high is not None else f"≥ {shown(low)}"

    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list such as {example}, got {text!r}")
        values = []
        for item in items:
            try:
                value = kind(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{item!r} is not {noun}; expected a list such as {example}") from None
            if not (low <= value and (high is None or value <= high)):  # also refuses nan
                raise argparse.ArgumentTypeError(f"every value must be {bounds}, got {item}")
            values.append(value)
        return values

    return parse


def _nearest_existing(path: Path) -> Path | None:
    return next((folder for folder in (path, *path.parents) if folder.exists()), None)


def _check_not_under_a_file(path: Path) -> None:
    existing = _nearest_existing(path)
    if existing is not None and not existing.is_dir():
        raise argparse.ArgumentTypeError(
            f"{existing} is a file, so nothing can be written under it; choose another path")


def _refuse_nul(text: str) -> None:
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL character, which no path can; give a plain path")


def output_dir(text: str) -> str:
    """An argparse type: a directory to write into (created if missing), not a file or under one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, got an empty string")
    _refuse_nul(text)
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a directory; name a directory (it is created if missing)")
    _check_not_under_a_file(path)
    return text


def output_file(text: str) -> str:
    """An argparse type: a file to write, not a directory and not under a file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a file, got an empty string")
    _refuse_nul(text)
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name, e.g. {path / 'trace.safetensors'}")
    _check_not_under_a_file(path.parent)
    return text


def model_name(text: str) -> str:
    """An argparse type: a checkpoint directory or zoo:NAME, not an empty string (the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a checkpoint directory or zoo:NAME, got an empty string")
    _refuse_nul(text)
    return text


def command_line_text(text: str) -> str:
    """An argparse type: non-empty, valid UTF-8 text (undecodable command-line bytes arrive as lone surrogates)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; pass some text to trace")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            "is not valid UTF-8; pass UTF-8 text, or save it as a UTF-8 file and use --file") from None
    return text


def read_text_file(path: str) -> str:
    """The contents of the UTF-8 text file ``path`` (``--file``), or an InputError naming the problem and the fix."""
    try:
        if "\x00" in path:
            raise InputError(f"--file {path!r} holds a NUL character; give the path of a UTF-8 text file")
        if Path(path).exists() and not Path(path).is_dir() and not Path(path).is_file():
            raise InputError(f"--file {path} is not a regular file (a FIFO, socket or device such as /dev/zero "
                             "would never end or block); give the path of a UTF-8 text file")
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--file {path}: no such file; give the path of a UTF-8 text file") from None
    except IsADirectoryError:
        raise InputError(f"--file {path} is a directory; give the path of a UTF-8 text file") from None
    except UnicodeDecodeError as error:
        raise InputError(f"--file {path} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset "
                         f"{error.start}); convert it to UTF-8, e.g. iconv -f LATIN1 -t UTF-8") from None
    except OSError as error:
        raise InputError(f"--file {path}: cannot read it ({error.strerror or error}); "
                         f"check the path and its permissions") from None
