"""One rank of ``repo-lens`` for tests/studies/test_distributed.py (run by torchrun or by hand).

Records which rank wrote which item file or finished which shard (``REPO_LENS_TEST_LOG``: lines
"RANK NAME") and can make a rank die the hard way after N of them (``REPO_LENS_TEST_DIE="RANK:N"``).
``REPO_LENS_TEST_QUICK_STUDIES=1`` replaces the reproduced results by three that take no time
(documents made from their name and models), to test how ``reproduce`` shares them.
"""

import os
import sys

from repo_lens.cli import main
from repo_lens.studies import reproductions, resumable, shards
from repo_lens.studies.reproductions.common import save_study

_write = resumable.atomic_write_bytes
_rank = os.environ.get("RANK", "0")
_die_rank, _, _die_after = os.environ.get("REPO_LENS_TEST_DIE", "").partition(":")
_written = 0


def _watched_write(path, data):
    global _written
    result = _write(path, data)
    if path.parent.name in ("items", "shards"):  # reproduce's items, analyze's finished shards
        _written += 1
        if os.environ.get("REPO_LENS_TEST_LOG"):
            with open(os.environ["REPO_LENS_TEST_LOG"], "a") as log:
                log.write(f"{_rank} {path.name}\n")
        if _die_rank == _rank and _written >= int(_die_after):
            os._exit(1)
    return result


resumable.atomic_write_bytes = _watched_write
shards.atomic_write_bytes = _watched_write


class _QuickStudy(reproductions.Study):
    def load(self):
        def study(out, models, quick=False, figures=True, progress=True):
            return save_study(out, quick_document(out.name, models))

        return study


def quick_document(name, models):
    return {"models": models, "letters": sum(map(len, models)) + len(name), "markdown": f"| {name} |"}


if os.environ.get("REPO_LENS_TEST_QUICK_STUDIES"):
    reproductions.STUDIES = {name: _QuickStudy(name, f"test {name}", "none", "none", ("zoo:test",))
                             for name in ("first", "second", "third")}
sys.exit(main(sys.argv[1:]))
