"""`python analyses/niah_accuracy.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce niah_accuracy`;
the study lives in repo_lens.studies.reproductions (see STUDIES["niah_accuracy"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["niah_accuracy"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
