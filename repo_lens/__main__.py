"""``python -m repo_lens``: the same command as ``repo-lens``."""

import sys

from repo_lens.cli import main

sys.exit(main())
