"""`python analyses/attention_sources.py --out DIR [--model M ...] [--quick] [--no-figures]` — the same as
`repo-lens reproduce attention_sources`;
the study lives in repo_lens.studies.reproductions (see STUDIES["attention_sources"])."""

import sys

from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.common import script_main

if __name__ == "__main__":
    study = STUDIES["attention_sources"]
    sys.exit(script_main(study.load(), study.source, study.default_models))
