"""The card's numbers for SmolLM2-135M re-positioned with RePo, beside its base and its RoPE control:
held-out bits per token, and retrieval of a fact from 0.5K-1.5K tokens of real English, each with a
95 % Wilson interval and paired McNemar tests against the base and, when one is given, the control.

* **Held-out bits per token**: every held-out Brown sequence (every tenth document, never trained on) of
  ``--context`` tokens, in fp32, mean over predicted tokens; and the same on English of another domain,
  the documentation strings of Python's standard library (``repo_lens.data.python_docs_documents``),
  never trained on either.
* **NIAH** (RULER's niah_single wording, ``repo_lens.data.niah_single``): one 7-digit magic number for a
  word key, hidden at a random depth in held-out Brown text, the prompt 0.5K, 1K or 1.5K tokens long.
* **Fact in running text**: a sentence "<Name> was born in <City>." put at a random depth into held-out
  Brown text, then "Question: Where was <Name> born? Answer: <Name> was born in".

A prompt is right when the model's argmax predicts every answer token (teacher-forced; equal to greedy
decoding reproducing the answer exactly). Records go one JSON line per prompt and model into
``--out``/records.jsonl, so an interrupted run resumes; ``summary.json`` holds the tables.

    python analyses/smollm2_repo_card.py --out build/smollm2_card \\
        --model base=zoo:smollm2-135m --model repo=zoo:smollm2-135m-repo [--model control=DIR] \\
        [--prompts 36] [--lengths 512 1024 1536] [--threads 2] [--bits-only repo]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NAMES = ("Marta Kowalski", "Daniel Okafor", "Ingrid Solberg", "Tomas Reyes", "Aiko Tanaka", "Lena Fischer",
         "Omar Haddad", "Priya Raman", "Sean Gallagher", "Chloe Martin", "Viktor Petrov", "Nadia Benali")
CITIES = ("Lisbon", "Nairobi", "Oslo", "Montreal", "Krakow", "Valencia", "Glasgow", "Lima", "Hanoi",
          "Adelaide", "Dublin", "Seville", "Porto", "Bergen", "Quito", "Tunis")


def held_out_documents() -> list[str]:
    from repo_lens.data.brown import brown_documents
    from repo_lens.train.text_tokens import HELD_OUT_EVERY

    return [doc.text for i, doc in enumerate(brown_documents()) if i % HELD_OUT_EVERY == 0]


def niah_case(tokenizer: Any, documents: list[str], length: int, seed: int) -> Any:
    from repo_lens.data import niah_single

    rng = random.Random(seed)
    haystack = " ".join(documents[(seed + k) % len(documents)] for k in range(3))
    return niah_single(tokenizer, length, depth=rng.uniform(0.05, 0.95), haystack=haystack, seed=seed)


def fact_case(tokenizer: Any, documents: list[str], length: int, seed: int) -> Any:
    """A birthplace sentence inside held-out running text, asked at the end; ``query`` = the answer's tokens."""
    rng = random.Random(10_000 + seed)
    name, city = rng.choice(NAMES), rng.choice(CITIES)
    words = " ".join(documents[(seed + k) % len(documents)] for k in range(3)).split()
    fact = f"{name} was born in {city}."
    question = f"\n\nQuestion: Where was {name} born? Answer: {name} was born in"
    answer_ids = tokenizer(" " + city, add_special_tokens=False)["input_ids"]
    budget = length - len(tokenizer(fact + question, add_special_tokens=False)["input_ids"]) - len(answer_ids)
    text_words = words[:max(1, int(budget * 0.7))]  # about 1.3 tokens a word; trimmed below
    while len(tokenizer(" ".join(text_words), add_special_tokens=False)["input_ids"]) > budget:
        text_words = text_words[:-5]
    at = int(len(text_words) * rng.uniform(0.05, 0.95))
    prefix = " ".join(text_words[:at] + [fact] + text_words[at:]) + question
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    ids = np.asarray(prefix_ids + answer_ids)
    return SimpleNamespace(ids=ids, query=(len(prefix_ids), len(ids)), answer=city)


def other_domain_sequences(tokenizer: Any, context: int) -> torch.Tensor:
    """[n, context + 1]: the Python documentation strings, one stream (end-of-text between modules)."""
    from repo_lens.data import python_docs_documents

    stream: list[int] = []
    for document in python_docs_documents():
        stream += [*tokenizer(document, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    count = (len(stream) - 1) // context
    return torch.tensor([stream[k * context:(k + 1) * context + 1] for k in range(count)])


def held_out_bits(lens: Any, context: int, max_sequences: int | None, other_domain: bool = False) -> dict[str, float]:
    from repo_lens.train.text_tokens import TextTokens

    sequences = (other_domain_sequences(lens.tokenizer, context) if other_domain
                 else TextTokens.brown(lens.tokenizer).held_out_sequences(context))[:max_sequences]
    total, count = 0.0, 0
    with torch.inference_mode():
        for row in tqdm(sequences, desc="held-out bits", leave=False):
            logits = lens.model(row[None, :-1].to(lens.device)).float()[0]
            total += torch.nn.functional.cross_entropy(logits, row[1:].to(lens.device), reduction="sum").item()
            count += context
    return {"bits_per_token": total / count / float(np.log(2)), "tokens": count, "sequences": len(sequences)}


def run(models: dict[str, str], out: Path, lengths: list[int], prompts: int, context: int,
        max_sequences: int | None, bits_only: frozenset[str] = frozenset()) -> dict[str, Any]:
    import repo_lens
    from repo_lens.interventions.stats import mcnemar, wilson
    from repo_lens.studies.items import answer_accuracy

    out.mkdir(parents=True, exist_ok=True)
    records_file = out / "records.jsonl"
    done = {(r["model"], r["task"], r["length"], r["seed"]): r for r in map(json.loads, records_file.open())
            } if records_file.exists() else {}
    documents = held_out_documents()
    bits: dict[str, Any] = json.loads((out / "bits.json").read_text()) if (out / "bits.json").exists() else {}
    for name, source in models.items():
        lens = repo_lens.load(source, device="cpu", dtype="float32")
        if name not in bits:
            bits[name] = {"source": source, **held_out_bits(lens, context, max_sequences)}
            (out / "bits.json").write_text(json.dumps(bits, indent=1))
        if "other_domain" not in bits[name]:
            bits[name]["other_domain"] = held_out_bits(lens, context, max_sequences, other_domain=True)
            bits[name]["python"] = sys.version.split()[0]
            (out / "bits.json").write_text(json.dumps(bits, indent=1))
        if name in bits_only:
            continue
        cases = [(task, length, seed) for task in ("niah", "fact") for length in lengths for seed in range(prompts)]
        with records_file.open("a") as sink:
            for task, length, seed in tqdm(cases, desc=f"retrieval, {name}"):
                if (name, task, length, seed) in done:
                    continue
                build = niah_case if task == "niah" else fact_case
                case = build(lens.tokenizer, documents, length, seed)
                record = {"model": name, "task": task, "length": length, "seed": seed, "tokens": int(len(case.ids)),
                          **answer_accuracy(lens, case)}
                done[(name, task, length, seed)] = record
                sink.write(json.dumps(record) + "\n")
                sink.flush()
    summary: dict[str, Any] = {"bits": bits, "retrieval": {}}
    for task in ("niah", "fact"):
        table = {}
        for name in (name for name in models if name not in bits_only):
            rows = sorted((r for r in done.values() if r["model"] == name and r["task"] == task),
                          key=lambda r: (r["length"], r["seed"]))
            exact = [r["exact"] for r in rows]
            entry = {"all": wilson(int(sum(exact)), len(exact)),
                     "by_length": {str(n): wilson(int(sum(r["exact"] for r in rows if r["length"] == n)),
                                                  sum(1 for r in rows if r["length"] == n)) for n in lengths}}
            for reference in ("base", "control"):
                if name != reference and reference in models and reference not in bits_only:
                    other = [r["exact"] for r in sorted((r for r in done.values() if r["model"] == reference
                                                         and r["task"] == task), key=lambda r: (r["length"], r["seed"]))]
                    entry[f"mcnemar_p_vs_{reference}"] = mcnemar(exact, other) if len(other) == len(exact) else None
            table[name] = entry
        summary["retrieval"][task] = table
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=SOURCE (base=zoo:smollm2-135m, ...)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 1536])
    parser.add_argument("--prompts", type=int, default=36, help="prompts per task and length")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--max-sequences", type=int, default=None, help="held-out sequences (default all)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--bits-only", nargs="*", default=[], help="models measured on held-out text only")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = dict(item.split("=", 1) for item in args.model)
    summary = run(models, args.out, args.lengths, args.prompts, args.context, args.max_sequences,
                  frozenset(args.bits_only))
    for name, entry in summary["bits"].items():
        print(f"{name}: {entry['bits_per_token']:.4f} bits per token on {entry['tokens']:,} held-out Brown tokens, "
              f"{entry['other_domain']['bits_per_token']:.4f} on {entry['other_domain']['tokens']:,} of Python's docs")
    for task, table in summary["retrieval"].items():
        for name, entry in table.items():
            a = entry["all"]
            print(f"{task} {name}: {a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}] (n={a['n']})"
                  + "".join(f", McNemar p vs {ref} {entry[f'mcnemar_p_vs_{ref}']:.3g}" for ref in ("base", "control")
                            if entry.get(f"mcnemar_p_vs_{ref}") is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
