"""`python analyses/reversal_mirror.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce reversal_mirror`;
the study lives in repo_lens.studies.reproductions (see STUDIES["reversal_mirror"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["reversal_mirror"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
