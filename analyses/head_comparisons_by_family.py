"""Two edits of the causal study compared on the same prompts, pooled and within each prompt family or task
test set: the difference of exact-match accuracy [95 %] and the exact McNemar p-value
(`repo_lens.interventions.stats.paired`), from the per-prompt hits a run of `repo-lens reproduce
position_interventions` stored. The prompts of a family are consecutive, in the order of `by_family`.

    python analyses/head_comparisons_by_family.py [--results analyses/results/position_interventions/results.json.gz]
        [--model zoo:bytes1k-repo] [--compare "head 2.0 constant" "head 2.3 constant" ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_lens.interventions import stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [f"head 2.0 {mode}|head 2.3 {mode}" for mode in ("integer", "constant", "affine", "rank", "random")]


def load(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def compare(result: dict, first: str, second: str) -> list[str]:
    """Pooled and per-family differences (first minus second) with their intervals and p-values."""
    ablations = result["ablations"]
    conditions = ablations["conditions"]
    a, b = np.asarray(conditions[first]["hits"]), np.asarray(conditions[second]["hits"])
    cells, start = [], 0

    def text(x: np.ndarray, y: np.ndarray) -> str:
        test = stats.paired(x.tolist(), y.tolist(), binary=True)
        d = test["difference"]
        return f"{d['value']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}], p = {test['p']:.2g}"

    cells.append(text(a, b))
    for family, score in ablations["unedited"]["by_family"].items():
        count = score["accuracy"]["n"]
        cells.append(text(a[start:start + count], b[start:start + count]))
        start += count
    if start != len(a):
        raise SystemExit(f"the families count {start} prompts, the hits {len(a)}: not a run of this study")
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "analyses/results/position_interventions/results.json.gz")
    parser.add_argument("--model", default="zoo:bytes1k-repo")
    parser.add_argument("--compare", nargs="+", default=DEFAULT, metavar="FIRST|SECOND",
                        help='pairs of condition names joined by "|" (default: heads 0 and 3 of layer 2 under each edit)')
    args = parser.parse_args(argv)
    result = load(args.results)["results"][args.model]
    families = list(result["ablations"]["unedited"]["by_family"])
    print(f"| {args.model}: first − second | pooled | " + " | ".join(families) + " |")
    print("|---|---|" + "---|" * len(families))
    for pair in args.compare:
        first, second = pair.split("|")
        print(f"| {first} − {second} | " + " | ".join(compare(result, first, second)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
