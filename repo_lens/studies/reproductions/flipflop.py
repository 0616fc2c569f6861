"""CoPE Table 2 (left) on the zoo: Flip-Flop read-bit error, in distribution and out of distribution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from repo_lens.studies.reproductions.common import save_study

PAPER_TABLE2 = {"RoPE, d 256, 4 layers x 4 heads": (1.8, 20.3), "CoPE, d 256, 4 x 4": (0.0, 4.9),
                "RoPE, d 128, 4 x 4 (Table 7)": (0.1, 8.9), "CoPE, d 128, 4 x 4 (Table 7)": (0.2, 33.2)}


def flipflop_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                   progress: bool = True, sequences: int | None = None) -> dict[str, Any]:
    """Errors at the training length (the task's own test sets) and at 2× and 4× that length, which
    puts the latest write further away than training ever did (our 128-token training length makes
    the same-length sparse test easy; the paper's sequences are 512 tokens). ``sequences``: test
    sequences at the training length (default 1,000, the cards' test sets, or 300 with ``quick``; the
    first of the same sets either way), at most 400 at 2× and 4×."""
    from repo_lens.loading import load
    from repo_lens.train.flipflop import FlipFlopTask
    from repo_lens.validation import check_int

    count = check_int(sequences, "sequences", minimum=1) if sequences is not None else 300 if quick else 1000
    results: dict[str, Any] = {}
    for model in tqdm(models, desc="flip-flop", disable=not progress):
        lens = load(model, device="cpu")
        trained = int(lens.model.cfg.max_position_embeddings)
        rows = {}
        for factor in (1, 2, 4):
            task = FlipFlopTask(batch_size=16, length=factor * trained)
            tested = count if factor == 1 else min(count, 400)
            rows[str(factor * trained)] = {"error_in_distribution": task.error(lens.model, task.train_ignore, tested),
                                           "error_ood_sparse": task.error(lens.model, task.ood_ignore, tested)}
        results[model] = {"trained_length": trained, "by_length": rows}
    lengths = list(next(iter(results.values()))["by_length"])
    header = " | ".join(f"{length} tokens: in-dist / OOD sparse" for length in lengths)
    lines = [f"| model | {header} |", "|---|" + "---|" * len(lengths)]
    for name, (in_dist, ood) in PAPER_TABLE2.items():
        lines.append(f"| paper: {name} (512-token training) | " + " | ".join(
            f"{in_dist} / {ood}" if length == "512" else "—" for length in lengths) + " |")
    for model, result in results.items():
        cells = [f"{100 * row['error_in_distribution']:.2f} / {100 * row['error_ood_sparse']:.2f}"
                 for row in result["by_length"].values()]
        lines.append(f"| {model} (128-token training) | " + " | ".join(cells) + " |")
    markdown = "Read-bit error, % (in distribution: ignore 0.8; OOD sparse: ignore 0.98):\n\n" + "\n".join(lines)
    document = {"study": "flipflop", "paper": PAPER_TABLE2, "results": results, "markdown": markdown,
                "settings": {"test_sequences": count, "test_sequences_longer": min(count, 400)}}
    return save_study(out, document)
