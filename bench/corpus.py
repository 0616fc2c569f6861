"""Corpus studies end to end (DESIGN targets: reading, windowing and writing <= 10 % of the forward time;
peak memory flat in the corpus size).

A JSON-lines corpus of --documents documents of mixed length (log-uniform between --min-bytes and
--max-bytes, 2 % of them 1,000-3,000 bytes, longer than a 1K context, and 1 % empty) goes through
`analyze --study positions` on a zoo model (default zoo:bytes1k-repo, 1,024-byte context). The first
8 documents are 3,000 bytes in both corpora, so both hold the same largest forward batch (16 full
windows, whose attention dominates the peak) and the peaks compare corpus sizes alone:

* end to end, in a fresh process per size (corpus counted and read, documents cut into windows,
  traced, records computed, Parquet shards written, summary streamed back): documents/s, tokens/s
  and the process's peak RSS, at --small and at --documents documents, and the ratio of the peaks;
* in this process, over the same windows in the runner's batches (each shard's windows, longest
  first, --batch-size per forward pass), shard by shard so that every part sees the same machine:
  the model's own forward pass (``lens.model(ids)``, no hooks), the study's compute (trace +
  records) and the corpus parts (reading, windowing, writing the shards, the summary), each in
  seconds, tokens/s and as a share of the forward time.

    python bench/corpus.py [--documents 10000] [--small 1000] [--model zoo:bytes1k-repo] [--batch-size 16]
                           [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

WORDS = ("the of and a to in is was he for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people mr how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last")


FULL_FIRST = 8  # documents of 3,000 bytes at the start: 3 windows each, 16 of them full 1,024-byte windows


def make_corpus(path: Path, documents: int, min_bytes: int, max_bytes: int, seed: int = 0) -> None:
    """``documents`` JSON lines of mixed length: log-uniform in [min_bytes, max_bytes], 2 % long, 1 % empty,
    the first ``FULL_FIRST`` of 3,000 bytes."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(math.log(min_bytes), math.log(max_bytes), size=documents)).astype(int)
    long = rng.random(documents) < 0.02
    lengths[long] = rng.integers(1000, 3000, size=int(long.sum()))
    lengths[rng.random(documents) < 0.01] = 0
    lengths[:FULL_FIRST] = 3000  # the first shard holds a batch of 16 full windows in any corpus: the same largest batch
    vocabulary = np.array(WORDS.split())
    with path.open("w", encoding="utf-8") as out:
        for index, length in enumerate(lengths):
            words = " ".join(rng.choice(vocabulary, size=length // 4 + 1))[:length] if length else ""
            out.write(json.dumps({"id": f"doc-{index}", "text": words}) + "\n")


def child(args: argparse.Namespace) -> None:
    """One whole `analyze` run in this (fresh) process; prints its timing, counts and peak RSS as JSON."""
    import torch

    import repo_lens
    from repo_lens.studies.runner import RunOptions, analyze

    torch.set_num_threads(args.threads)
    lens = repo_lens.load(args.model, device="cpu")
    started = time.perf_counter()
    result = analyze(lens, "positions", args.child[0], out=args.child[1],
                     run=RunOptions(batch_size=args.batch_size, progress=False))
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mib": peak_mib, "counts": result.counts}))


def end_to_end(corpus: Path, out: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", str(corpus), str(out), "--model", args.model,
               "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the end-to-end run failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Clock:
    """Seconds spent per part."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, part: str, started: float) -> float:
        now = time.perf_counter()
        self.seconds[part] = self.seconds.get(part, 0.0) + now - started
        return now


def forward(lens: Any, batch: list) -> None:
    import torch

    ids = torch.zeros((len(batch), max(len(window.ids) for window in batch)), dtype=torch.long)
    for row, window in enumerate(batch):
        ids[row, :len(window.ids)] = torch.as_tensor(window.ids)
    with torch.inference_mode():
        lens.model(ids)


def parts(corpus_path: Path, args: argparse.Namespace) -> tuple[dict[str, float], int]:
    """Each part's seconds over the corpus, shard by shard, in the runner's batches; and the tokens traced."""
    import torch

    import repo_lens
    from repo_lens.data.corpus_sources import Selection, open_corpus
    from repo_lens.data.windows import WindowSpec, document_windows
    from repo_lens.studies.registry import get_study
    from repo_lens.studies.shards import harmonize, iter_records, write_shard

    torch.set_num_threads(args.threads)
    lens = repo_lens.load(args.model, device="cpu")
    study = get_study("positions")
    options = study.resolve_options({})
    size, stride = WindowSpec().resolve(lens.context_length, 0)
    clock, tokens = Clock(), 0
    out = Path(tempfile.mkdtemp(prefix="bench-corpus-parts-"))
    started = time.perf_counter()
    corpus = open_corpus(corpus_path)
    documents = Selection(corpus.count()).documents(corpus)
    started = clock.add("reading", started)
    for index in range(math.ceil(corpus.count() / study.shard_size)):
        shard = [next(documents) for _ in range(min(study.shard_size, corpus.count() - index * study.shard_size))]
        started = clock.add("reading", started)
        windows = [w for document in shard if document.text for w in document_windows(lens.tokenizer, document,
                                                                                         size, stride)]
        windows.sort(key=lambda window: -len(window.ids))
        batches = [windows[start:start + args.batch_size] for start in range(0, len(windows), args.batch_size)]
        tokens += sum(len(window.ids) for window in windows)
        started = clock.add("windowing", started)
        for batch in batches:
            forward(lens, batch)
        started = clock.add("forward", started)
        records = [record for batch in batches for record in study.record(lens, batch, options)]
        started = clock.add("trace + records", started)
        write_shard(out, index, [{**w.columns(), **r} for w, r in zip(windows, records)], {"documents": len(shard)})
        started = clock.add("writing", started)
    harmonize(out)
    study.summary(iter_records(out), options)
    clock.add("summary", started)
    return clock.seconds, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=1_000, help="the smaller corpus of the memory comparison")
    parser.add_argument("--min-bytes", type=int, default=16)
    parser.add_argument("--max-bytes", type=int, default=256)
    parser.add_argument("--model", default="zoo:bytes1k-repo")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--child", nargs=2, metavar=("CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    folder = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    corpora = {count: folder / f"corpus-{count}.jsonl" for count in (args.small, args.documents)}
    make_corpus(corpora[args.documents], args.documents, args.min_bytes, args.max_bytes)
    with corpora[args.documents].open(encoding="utf-8") as large:  # the smaller corpus: the larger one's start
        corpora[args.small].write_text("".join(line for _, line in zip(range(args.small), large)), encoding="utf-8")
    print(f"analyze --study positions on {args.model}, batch size {args.batch_size}, {args.threads} thread(s), "
          f"{os.cpu_count()} CPU cores (load {os.getloadavg()[0]:.1f}); documents of {args.min_bytes}-{args.max_bytes} "
          "bytes (log-uniform), 2 % of 1,000-3,000, 1 % empty", flush=True)
    runs = {count: end_to_end(path, folder / f"run-{count}", args) for count, path in corpora.items()}
    report_end_to_end(runs, args)
    seconds, tokens = parts(corpora[args.documents], args)
    report_parts(seconds, tokens, runs[args.documents], args)


def report_end_to_end(runs: dict[int, dict], args: argparse.Namespace) -> None:
    print(f"{'documents':>9} {'windows':>8} {'tokens':>10} {'cut':>5} {'skipped':>7} {'seconds':>8} {'docs/s':>8} "
          f"{'tokens/s':>9} {'peak RSS MiB':>12}")
    for count, run in runs.items():
        counts = run["counts"]
        print(f"{count:>9} {counts['windows']:>8} {counts['tokens']:>10} {counts['documents_cut']:>5} "
              f"{counts['documents_skipped']:>7} {run['seconds']:>8.1f} {count / run['seconds']:>8.1f} "
              f"{counts['tokens_traced'] / run['seconds']:>9.0f} {run['peak_mib']:>12.0f}")
    small, large = runs[args.small], runs[args.documents]
    print(f"peak memory {args.documents} / {args.small} documents: {large['peak_mib'] / small['peak_mib']:.3f}x "
          f"(target: flat, ~1.0x) for {args.documents / args.small:.0f}x the documents", flush=True)


def report_parts(seconds: dict[str, float], tokens: int, run: dict, args: argparse.Namespace) -> None:
    print(f"the same {args.documents} documents' {tokens} window tokens, part by part (shard by shard, same batches):")
    base = seconds["forward"]
    for part in ("forward", "trace + records", "reading", "windowing", "writing", "summary"):
        print(f"  {part:<16} {seconds[part]:>8.1f} s {tokens / seconds[part]:>12.0f} tokens/s "
              f"{100 * seconds[part] / base:>7.1f} % of the forward")
    corpus_parts = sum(seconds[part] for part in ("reading", "windowing", "writing", "summary"))
    print(f"reading + windowing + writing + summary: {corpus_parts:.1f} s = {100 * corpus_parts / base:.1f} % of the "
          f"model's forward time (target <= 10 %), {100 * corpus_parts / seconds['trace + records']:.1f} % of the "
          "study's compute")
    print(f"end to end {run['counts']['tokens_traced'] / run['seconds']:.0f} tokens/s vs the forward alone "
          f"{tokens / base:.0f} tokens/s: {run['seconds'] / base:.2f}x the forward time (tracing every layer's "
          f"positions and the study's records included; {(sum(seconds.values()) - base) / base:.2f}x part by part, "
          "the parts but the forward)")


if __name__ == "__main__":
    main()
