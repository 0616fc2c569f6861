"""`python analyses/position_interventions.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce position_interventions`;
the study lives in repo_lens.studies.reproductions (see STUDIES["position_interventions"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["position_interventions"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
