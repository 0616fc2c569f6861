"""`python analyses/attention_mass.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce attention_mass`;
the study lives in repo_lens.studies.reproductions (see STUDIES["attention_mass"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["attention_mass"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
