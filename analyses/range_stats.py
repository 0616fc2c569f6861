"""`python analyses/range_stats.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce range_stats`;
the study lives in repo_lens.studies.reproductions (see STUDIES["range_stats"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["range_stats"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
