"""``python -m repo_lens.cli``: the ``repo-lens`` command."""

import sys

from repo_lens.cli import main

sys.exit(main())
