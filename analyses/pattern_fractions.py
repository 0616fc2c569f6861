"""`python analyses/pattern_fractions.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce pattern_fractions`;
the study lives in repo_lens.studies.reproductions (see STUDIES["pattern_fractions"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["pattern_fractions"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
