"""`python analyses/case_study.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce case_study`;
the study lives in repo_lens.studies.reproductions (see STUDIES["case_study"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["case_study"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
