"""What the learned positions of every zoo model encode: each learned layer's share of a head's position
variance explained by the token index (the head's own line), by the tokens' content class (digits,
punctuation, spaces, word starts), by the needle (retrieval models) and what is left
(`repo_lens.analysis.position_variance_shares`), pooled over inputs the model did not train on:

- the 1,024-byte models: 20 retrieval prompts (5 per family, in held-out Brown text), the needle as span;
- the 256-byte language models: 8 windows of held-out Brown text;
- the task models: 40 of their task's sequences (Flip-Flop, text reversal).

Prints, per model and learned layer, the mean over heads and the range over heads of each share, and
for the retrieval models how far the needle's tokens sit from the others (what the classes leave on
them, in the head's standard deviations).

    python analyses/variance_shares.py [--model zoo:bytes1k-repo ...] [--token-identity]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_lens.model.registry import is_learned  # noqa: E402

MODELS = ("bytes1k-repo", "bytes1k-lpi", "bytes-repo", "bytes-post-lpi", "bytes-post-lpi-resid", "bytes-fox",
          "bytes-cope", "flipflop-cope", "flipflop-grape-m", "reversal-repo")


def inputs(lens, name: str) -> tuple[list[list[int]], list | None]:
    """Token ids of the inputs ``name`` is measured on, and the needle span of each (None: no span)."""
    from repo_lens.data import bilingual_splits
    from repo_lens.data.retrieval_families import retrieval_prompts
    from repo_lens.studies.reproductions.position_interventions import held_out_text

    if name.startswith("bytes1k"):
        prompts = retrieval_prompts(lens.tokenizer, lens.context_length, 5, seed=90_000, text=held_out_text())
        return [list(prompt.ids) for prompt in prompts], [prompt.spans["needle"] for prompt in prompts]
    if name.startswith("bytes"):
        text = " ".join(" ".join(bilingual_splits()["en"][1][:4]).split())
        ids = list(lens.tokenizer.encode(text))
        window = lens.context_length
        return [ids[start:start + window] for start in range(0, 8 * window, window)], None
    from repo_lens.studies.reproductions.position_interventions_tasks import task_set

    tasks = task_set(lens, "flipflop" if name.startswith("flipflop") else "reversal", 10)
    within = [list(ids) for family in tasks.families.values() for ids, _, _ in family if len(ids) <= lens.context_length]
    return within[:40], None


def measure(name: str, identity: bool = False) -> str:
    import repo_lens
    from repo_lens.analysis import content_classes, position_variance_shares

    lens = repo_lens.load(f"zoo:{name}")
    texts, spans = inputs(lens, name)
    traces = [lens.trace(ids, progress=False) for ids in texts]
    shares = position_variance_shares([trace.positions for trace in traces],
                                      [np.asarray(trace.token_ids) if identity else content_classes(trace.tokens)
                                       for trace in traces],
                                      spans=spans, span_name="needle" if spans else "span")
    kinds = traces[0].layer_kinds
    parts = {("needle" if key == "span" else key): value for key, value in shares.shares().items()}
    if shares.span_offset is not None:  # how far the needle's tokens sit from the rest, in standard deviations
        parts["needle offset (SD)"] = shares.span_offset / np.sqrt(shares.variance)
    classes = f"token identity ({len(shares.classes)} tokens)" if identity else "content class"
    lines = [f"{name} ({len(texts)} inputs, {shares.n_tokens:,} tokens; classes: {classes}):", "",
             "| layer | " + " | ".join(parts) + " |", "|---|" + "---|" * len(parts)]
    for layer, kind in enumerate(kinds):
        if not is_learned(kind):
            continue
        cells = []
        for values in parts.values():
            row = values[layer]
            cells.append("–" if np.isnan(row).all() else
                         f"{np.nanmean(row):.2f} ({np.nanmin(row):.2f}–{np.nanmax(row):.2f})")
        lines.append(f"| L{layer} {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help=f"a zoo model name (default: {', '.join(MODELS)})")
    parser.add_argument("--token-identity", action="store_true",
                        help="classes are the tokens themselves, not their content class (k classes earn about "
                             "(k - 1) / N of the variance from noise alone)")
    args = parser.parse_args(argv)
    for name in args.model or MODELS:
        print(measure(name.removeprefix("zoo:"), args.token_identity), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
