"""Read a pickled checkpoint (``pytorch_model.bin``, a training ``.pt``) without running any of it.

Only ``torch.load(weights_only=True)`` reads these files: tensors, containers, numbers, strings and
the few torch types its restricted unpickler allows. The classes some authors' checkpoints pickle
beside their weights (:data:`repo_lens.model.loaders.inert.STAND_INS`, e.g. CoPE's
``argparse.Namespace`` of options) are mapped by name to inert stand-ins, so the real classes are
never imported. Any other global (``os.system``, a model class, ...) is refused with a
CheckpointError naming it; nothing in the file is executed.
"""

from __future__ import annotations

import pickle
import re
import threading
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.files import regular_file
from repo_lens.model.loaders.inert import STAND_INS

_LOCK = threading.Lock()  # torch's allow-list of safe globals is process-wide state
_GLOBAL = re.compile(r"GLOBAL\s+([A-Za-z_][\w.]*)")


def read_pickled(path: Path, what: str) -> Any:
    """The object pickled in ``path`` (``what`` names the file in errors), read with torch's
    weights-only unpickler plus the inert stand-ins; a foreign global raises CheckpointError.

    Example:
        >>> import tempfile, os
        >>> path = Path(tempfile.mkdtemp()) / "weights.bin"
        >>> torch.save({"w": torch.ones(2)}, path)
        >>> read_pickled(path, "pytorch_model.bin")["w"].tolist()
        [1.0, 1.0]
        >>> class Payload:
        ...     def __reduce__(self):
        ...         return (os.system, ("echo owned",))
        >>> torch.save(Payload(), path)
        >>> read_pickled(path, "pytorch_model.bin")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: ... refuses to unpickle ...system: loading it would import and run code ...
    """
    regular_file(path, what)
    allowed = getattr(torch.serialization, "safe_globals", None)
    if allowed is None:
        raise CheckpointError(f"reading {path} ({what}) safely needs torch >= 2.5 (torch.serialization.safe_globals); "
                              f"this is torch {torch.__version__}. Upgrade torch, or convert the file to safetensors")
    stand_ins = [(stand_in, name) for name, stand_in in STAND_INS.items()]
    try:
        with _LOCK, allowed(stand_ins), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about pickle protocols it reads anyway
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if _GLOBAL.search(str(error)) is None and "Unsupported operand" in str(error):  # bytes that are no pickle
            raise _unreadable(path, what, error) from None
        raise _refused(path, what, error) from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError) as error:
        raise _unreadable(path, what, error) from None


def _unreadable(path: Path, what: str, error: Exception) -> CheckpointError:
    """The error for a file torch.load cannot read at all (truncated, empty, not written by torch.save)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    detail = next((line for line in lines if "Unsupported operand" in line), lines[0] if lines else "no detail")
    return CheckpointError(f"{path} ({what}) is not a readable torch checkpoint ({type(error).__name__}: "
                           f"{detail[:200]}); expected a file written by torch.save")


def _refused(path: Path, what: str, error: Exception) -> CheckpointError:
    """The error for a pickle that names a global the restricted unpickler does not allow."""
    found = _GLOBAL.search(str(error))
    name = found.group(1) if found else "an object it does not allow"
    allowed = ", ".join(sorted(STAND_INS))
    return CheckpointError(
        f"{path} ({what}): repo_lens refuses to unpickle {name}: loading it would import and run code from the file. "
        f"A checkpoint may hold tensors, plain containers and numbers, and (read as inert data, never imported) "
        f"{allowed}. If you trust the file, re-save its state_dict (torch.save(model.state_dict(), ...)) or convert "
        "it to safetensors")
