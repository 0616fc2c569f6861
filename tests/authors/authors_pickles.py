"""Objects of the authors' own classes, pickled under their names as their code pickles them, without
their code: a throwaway package stands in for CoPE's ``src.utils.logger`` while ``torch.save`` runs and
is made unimportable again right after (so a load can only succeed without importing it)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOGGER_SOURCE = textwrap.dedent("""
    class Metric:  # the fields of projects/cope/src/utils/logger.py's Metric
        def __init__(self, name, divide_by=None, plot=True, cumulative=False, print=True):
            self.name, self.divide_by, self.plot, self.cumulative, self.print = name, divide_by, plot, cumulative, print
            self.step_value, self.value, self.cur_epoch_best, self.best_value = None, 0, False, float("inf")
""")


@contextmanager
def authors_logger(root: Path) -> Iterator[type]:
    """``src.utils.logger.Metric``, importable (so picklable) only inside the ``with`` block."""
    package = root / "_authors_src"
    (package / "src" / "utils").mkdir(parents=True, exist_ok=True)
    (package / "src" / "__init__.py").write_text("")
    (package / "src" / "utils" / "__init__.py").write_text("")
    (package / "src" / "utils" / "logger.py").write_text(LOGGER_SOURCE)
    sys.path.insert(0, str(package))
    try:
        from src.utils.logger import Metric

        yield Metric
    finally:
        sys.path.remove(str(package))
        for name in [name for name in sys.modules if name == "src" or name.startswith("src.")]:
            del sys.modules[name]
