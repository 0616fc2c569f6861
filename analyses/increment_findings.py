"""`python analyses/increment_findings.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce increment_findings`;
the study lives in repo_lens.studies.reproductions (see STUDIES["increment_findings"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["increment_findings"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
