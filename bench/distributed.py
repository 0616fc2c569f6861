"""`repo-lens analyze` in one process vs 2 ranks under torchrun (DESIGN target: >= 1.8x the items/s,
identical results).

A random byte-level RePo checkpoint (8 layers, d_model 384, context 2048) runs the NIAH attention-mass
study (1024 and 2048 tokens x 5 depths x seeds items) once in a single process (as without torchrun) and once under
`torchrun --nproc-per-node 2`, each rank with `--threads` CPU threads (the single process too: one
rank's resources). Each configuration is timed twice in a fresh output directory: the full run, and
a rerun of the finished directory, which starts the processes, loads the model, finds nothing to do
and merges; the difference is the time spent on the items. The script prints items/s end to end and
for the items alone, the 2-rank / 1-process ratio, and whether results.json, results.csv and
summary.json are byte-identical. With CUDA, the same on the GPU (2 ranks share GPU 0 when only one is
visible).
    python bench/distributed.py [--layers 8] [--d-model 384] [--seeds 2] [--threads 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model

MERGED = ("results.json", "results.csv", "summary.json")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(ranks: int, study: list[str]) -> list[str]:
    if ranks == 1:
        return [sys.executable, "-m", "repo_lens.cli", *study]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
            "--master-port", str(_free_port()), "-m", "repo_lens.cli", *study]


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def measure(ranks: int, model: Path, out: Path, device: str, items: list[str], threads: int) -> tuple[float, float]:
    """(seconds for the whole run, seconds of the same command with every item already done)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    study = ["analyze", "--model", str(model), "--study", "niah", *items, "--out", str(out), "--quiet",
             "--device", device]
    return _timed(_command(ranks, study), env), _timed(_command(ranks, study), env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--seeds", type=int, default=2, help="items = 2 lengths x 5 depths x this")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per rank (and of the single process)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds, interleaved; the fastest run of each counts")
    args = parser.parse_args()
    items = ["--lengths", "1024,2048", "--depths", "0,0.25,0.5,0.75,1", "--seeds", ",".join(map(str, range(args.seeds)))]
    count = 2 * 5 * args.seeds
    devices = ["cpu"] + (["auto" if torch.cuda.device_count() >= 2 else "cuda:0"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "model"
        save_checkpoint(tiny_model(n_layers=args.layers, d_model=args.d_model, context=2048), model,
                        tokenizer="bytes", info={"name": "bench-distributed"})
        print(f"NIAH attention mass, {count} items, random byte-level RePo model, {args.layers} layers, d_model "
              f"{args.d_model}; "
              f"{args.threads} thread(s) per rank, {os.cpu_count()} CPU cores")
        print(f"{'device':<8} {'ranks':>5} {'run s':>7} {'start+merge s':>13} {'items/s end to end':>19} "
              f"{'items/s of items':>17}")
        for device in devices:
            timings: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
            for repeat in range(args.repeats):  # interleaved, so a change in the machine's load hits both
                for ranks in (1, 2):
                    out = Path(folder) / f"{device}-{ranks}-{repeat}"
                    timings[ranks].append(measure(ranks, model, out, device, items, args.threads))
            rates = {}
            for ranks in (1, 2):
                total, fixed = min(timings[ranks])
                # nan where the items took less time than the noise of starting up: use more --seeds
                rates[ranks] = (count / total, count / (total - fixed) if total > fixed else float("nan"))
                print(f"{device:<8} {ranks:>5} {total:>7.1f} {fixed:>13.1f} {rates[ranks][0]:>19.2f} "
                      f"{rates[ranks][1]:>17.2f}")
            same = all((Path(folder) / f"{device}-1-0" / name).read_bytes() == (Path(folder) / f"{device}-2-0" / name)
                       .read_bytes() for name in MERGED)
            print(f"{device:<8} 2 ranks / 1 process: {rates[2][0] / rates[1][0]:.2f}x end to end, "
                  f"{rates[2][1] / rates[1][1]:.2f}x on the items; {', '.join(MERGED)} "
                  f"{'byte-identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
