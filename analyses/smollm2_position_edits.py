"""What the learned positions of a SmolLM2-135M conversion (RePo, GRAPE-M, per-layer increments) do: the
causal study's edits on its learned layers (10-29), and whether the increments of its positions mark English
word boundaries.

* **Edits** (``repo_lens.interventions.ablate`` over layers 10-29, every head): none, "integer" (RoPE's
  positions back), "constant" (no positional signal), "affine" (each head's least-squares line through
  its own positions), "rank" (their order kept, spacing even), "shuffle" (the tokens' positions permuted,
  the same permutation in every layer and head), "random" (a random direction of the affine edit's size). Per edit: held-out bits per token on ``--sequences`` held-out Brown sequences of 1,024
  tokens, and retrieval (the card's NIAH and fact-in-running-text prompts, 0.5K-1.5K tokens), each prompt
  right when every answer token is the argmax, with 95 % Wilson intervals and a paired McNemar test
  against the unedited model on the same prompts.
* **Word boundaries**: on the same held-out sequences, the increment z[t] − z[t−1] of each learned head scored
  against "token t starts a word" (its text begins with a space), ROC-AUC per layer and head
  (``repo_lens.analysis.boundary_auc``; 0.5 is chance).

Records go to ``--out``/records.jsonl (one line per edit and prompt: an interrupted run resumes);
``summary.json`` holds the tables.

    python analyses/smollm2_position_edits.py --out build/smollm2_edits [--model zoo:smollm2-135m-repo]
        [--prompts 17] [--sequences 16] [--edits integer constant ...] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

EDITS = ("none", "integer", "constant", "affine", "rank", "shuffle", "random")
LENGTHS = (512, 1024, 1536)


def learned_layers(model: Any) -> list[int]:
    from repo_lens.model.registry import is_learned

    return [layer for layer, kind in enumerate(model.cfg.layer_mechanisms) if is_learned(kind)]


def edited_logits(lens: Any, ids: torch.Tensor, edit: str, layers: list[int]) -> torch.Tensor:
    from repo_lens import interventions

    with torch.inference_mode():
        if edit == "none":
            return lens.model(ids)
        return interventions.ablate(lens, ids, mode=edit, layers=layers)


def bits(lens: Any, sequences: list[torch.Tensor], edit: str, layers: list[int]) -> float:
    total, count = 0.0, 0
    for row in tqdm(sequences, desc=f"held-out bits, {edit}", leave=False):
        logits = edited_logits(lens, row[None, :-1], edit, layers).float()[0]
        total += torch.nn.functional.cross_entropy(logits, row[1:], reduction="sum").item()
        count += len(row) - 1
    return total / count / float(np.log(2))


def word_boundary_auc(lens: Any, sequences: list[torch.Tensor], layers: list[int]) -> np.ndarray:
    """ROC-AUC [layer, head] of the position increments for word-initial tokens, pooled over sequences."""
    from repo_lens.analysis import boundary_auc

    increments, labels = [], []
    for row in sequences:
        trace = lens.trace(row.numpy(), progress=False)
        positions = np.asarray(trace.positions)[layers]  # [layer, head, pos]
        increments.append(np.diff(positions, axis=-1))
        tokens = lens.tokenizer.convert_ids_to_tokens(row.tolist())
        labels.append(np.array([token.startswith(("Ġ", " ", "Ċ")) for token in tokens[1:]]))
    return boundary_auc(np.concatenate(increments, axis=-1), np.concatenate(labels))


def run(source: str, out: Path, prompts: int, n_sequences: int, edits: tuple[str, ...] = EDITS) -> dict[str, Any]:
    import repo_lens
    from repo_lens.interventions.stats import mcnemar, wilson
    from repo_lens.train.text_tokens import TextTokens
    from smollm2_repo_card import fact_case, held_out_documents, niah_case

    out.mkdir(parents=True, exist_ok=True)
    records_file = out / "records.jsonl"
    done = {(r["edit"], r["task"], r["length"], r["seed"]): r for r in map(json.loads, records_file.open())
            } if records_file.exists() else {}
    lens = repo_lens.load(source, device="cpu", dtype="float32")
    layers = learned_layers(lens.model)
    sequences = TextTokens.brown(lens.tokenizer).held_out_sequences(1024)[:n_sequences]
    documents = held_out_documents()
    cases = {(task, length, seed): (niah_case if task == "niah" else fact_case)(lens.tokenizer, documents, length, seed)
             for task in ("niah", "fact") for length in LENGTHS for seed in range(prompts)}
    bits_file = out / "bits.json"
    held_out = json.loads(bits_file.read_text()) if bits_file.exists() else {}
    with records_file.open("a") as sink:
        for edit in edits:
            if edit not in held_out:
                held_out[edit] = bits(lens, sequences, edit, layers)
                bits_file.write_text(json.dumps(held_out, indent=1))
            for (task, length, seed), case in tqdm(cases.items(), desc=f"retrieval, {edit}"):
                if (edit, task, length, seed) in done:
                    continue
                ids = torch.as_tensor(np.asarray(case.ids))[None]
                start, end = case.query
                predicted = edited_logits(lens, ids, edit, layers)[0, start - 1:end - 1].argmax(-1)
                record = {"edit": edit, "task": task, "length": length, "seed": seed,
                          "exact": float(torch.equal(predicted, ids[0, start:end]))}
                done[(edit, task, length, seed)] = record
                sink.write(json.dumps(record) + "\n")
                sink.flush()
    auc = word_boundary_auc(lens, sequences, layers)
    summary: dict[str, Any] = {"model": source, "layers": layers, "sequences": len(sequences), "edits": {}}
    for edit in edits:
        entry: dict[str, Any] = {"held_out_bits_per_token": held_out[edit]}
        for task in ("niah", "fact"):
            keys = sorted(key for key in cases if key[0] == task)
            exact = [done[(edit, *key)]["exact"] for key in keys]
            unedited = [done[("none", *key)]["exact"] for key in keys]
            entry[task] = wilson(int(sum(exact)), len(exact))
            entry[f"{task}_mcnemar_p_vs_none"] = None if edit == "none" else mcnemar(exact, unedited)
        summary["edits"][edit] = entry
    summary["word_boundary_auc"] = {"by_layer": {str(layer): row.tolist() for layer, row in zip(layers, auc)},
                                    "median": float(np.median(auc)), "min": float(auc.min()), "max": float(auc.max())}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="zoo:smollm2-135m-repo")
    parser.add_argument("--prompts", type=int, default=17, help="prompts per task and length")
    parser.add_argument("--sequences", type=int, default=16, help="held-out sequences of 1,024 tokens")
    parser.add_argument("--edits", nargs="+", choices=EDITS, default=list(EDITS), help="none is always run")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    edits = ("none", *(edit for edit in args.edits if edit != "none"))
    summary = run(args.model, args.out, args.prompts, args.sequences, edits)
    print(f"{summary['model']}, edits on layers {summary['layers'][0]}-{summary['layers'][-1]}:")
    for edit, entry in summary["edits"].items():
        cells = [f"{task} {entry[task]['value']:.3f} [{entry[task]['low']:.3f}, {entry[task]['high']:.3f}]"
                 for task in ("niah", "fact")]
        print(f"  {edit:9s} {entry['held_out_bits_per_token']:.4f} bits/token; " + "; ".join(cells))
    auc = summary["word_boundary_auc"]
    print(f"word-boundary ROC-AUC of position increments: median {auc['median']:.3f} "
          f"(heads range {auc['min']:.3f}-{auc['max']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
