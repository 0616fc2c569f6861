"""Benchmark: the cost of refusing NaN / inf weights at load (the loader screens one sum per tensor,
``torch.isfinite(torch.stack([t.sum() for t in weights])).all()``, and checks element-wise only when that fails).

Loads the published-shape checkpoint (``repo-lens tiny DIR --shape olmo2-1b``: 16 layers × 16 heads,
d_model 128) and, in the same run, times the finiteness check alone over the loaded weights; prints
both and their ratio. The load time includes the check, so the ratio is its share of a load.

    .venv/bin/python bench/weights_finite_check.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import repo_lens  # noqa: E402

REPEATS = 5


def best_of(repeats: int, work) -> float:
    """The fastest of ``repeats`` timed calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "olmo2-1b-shape"
        subprocess.run([str(Path(sys.executable).with_name("repo-lens")), "tiny", str(directory), "--shape", "olmo2-1b"],
                       check=True, capture_output=True)
        lens = repo_lens.load(directory, device="cpu")
        tensors = [parameter.detach() for parameter in lens.model.parameters()]
        load_s = best_of(REPEATS, lambda: repo_lens.load(directory, device="cpu"))
        check_s = best_of(REPEATS, lambda: bool(torch.isfinite(torch.stack([t.sum() for t in tensors])).all()))
        exact_s = best_of(REPEATS, lambda: [bool(torch.isfinite(t).all()) for t in tensors])
    n_values = sum(t.numel() for t in tensors)
    print(f"published-shape checkpoint: {len(tensors)} tensors, {n_values:,} values")
    print(f"repo_lens.load (check included): {load_s * 1e3:8.1f} ms")
    print(f"finiteness screen alone:         {check_s * 1e3:8.1f} ms  (what a load of finite weights runs)")
    print(f"element-wise check, per tensor:  {exact_s * 1e3:8.1f} ms  (run only when the screen fails)")
    print(f"check / load = {check_s / load_s:.3f} ({100 * check_s / load_s:.1f} % of a load)")


if __name__ == "__main__":
    main()
