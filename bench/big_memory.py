"""Memory of tracing and attention mass for the big RePo checkpoints, computed from the architecture.

Prints, for OLMo-2 1B and 7B with RePo (weights bf16), the estimated peak device memory of
``lens.trace`` and ``attention_mass`` per context length, and the per-token terms behind it.
``--measure`` checks the per-token terms on this machine: a 2-layer model with the 1B's real
widths (d 2048, 16 heads, ff 8192, vocab 100352), fp32 on CPU, peak RSS added by one call at two
lengths (slope = bytes per token), in subprocesses with ``MALLOC_MMAP_THRESHOLD_=65536`` so RSS
follows live tensors.

Model of the memory (no KV cache; both entry points run one forward over the T tokens):

* weights: parameters × itemsize (bf16 = 2 bytes).
* inside one block (freed before the next): residual, q/k norms, q, k, v, rotated q and k, the
  attention output and o_proj in the model dtype (≈ 10·d·s bytes per token), the rotary cos/sin
  and their temporaries in fp32 (≈ 5·d·4), or the MLP's gate/up/product (≈ 3·ff·s + d·s); SDPA
  uses the flash / memory-efficient kernel for a causal forward (no T×T).
* ``trace``: + logits [T, vocab] in the model dtype (the forward runs to the end) and the captured
  positions (4 bytes × heads × layers per token).
* ``attention_mass``: + the fp32 copy of one layer's keys (4·d per token) and ≤ 8 MiB of scores
  for the query rows; it stops after the last layer's keys, so no logits and no T×T.

    python bench/big_memory.py [--lengths 4096 8192 16384 32768] [--measure]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30


@dataclass(frozen=True)
class Arch:
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    d_mlp: int
    vocab: int
    repo_start: int
    tied: bool = False

    @property
    def d_position(self) -> int:
        return self.d_model // 8

    def params(self) -> int:
        d = self.d_model
        per_layer = 4 * d * d + 3 * d * self.d_mlp + 4 * d  # q k v o, gate up down, q/k norms + 2 post-norms
        repo = 2 * self.d_position * d + self.n_heads * self.d_position
        embeddings = self.vocab * d * (1 if self.tied else 2)
        return embeddings + self.n_layers * per_layer + (self.n_layers - self.repo_start) * repo + d


ARCHS = (
    Arch("RePo-OLMo2-1B", n_layers=16, d_model=2048, n_heads=16, d_mlp=8192, vocab=100352, repo_start=5),
    Arch("RePo-OLMo2-7B", n_layers=32, d_model=4096, n_heads=32, d_mlp=11008, vocab=100352, repo_start=11),
)


def block_bytes_per_token(arch: Arch, itemsize: int) -> int:
    d = arch.d_model
    attention = 10 * d * itemsize + 5 * d * 4
    mlp = 3 * arch.d_mlp * itemsize + d * itemsize
    return max(attention, mlp)


def trace_bytes_per_token(arch: Arch, itemsize: int) -> int:
    logits = arch.vocab * itemsize + 2 * arch.d_model * itemsize
    return max(block_bytes_per_token(arch, itemsize), logits) + 4 * arch.n_heads * arch.n_layers


def mass_bytes_per_token(arch: Arch, itemsize: int) -> int:
    return block_bytes_per_token(arch, itemsize) + 4 * arch.d_model


def kv_cache_bytes_per_token(arch: Arch, itemsize: int) -> int:
    """For generation with a KV cache (not used by trace / attention_mass): K and V of every layer."""
    return 2 * arch.n_layers * arch.d_model * itemsize


def table(lengths: list[int], itemsize: int = 2) -> str:
    lines = []
    for arch in ARCHS:
        weights = arch.params() * itemsize
        lines.append(f"\n{arch.name}: {arch.params() / 1e9:.2f} B parameters, weights {weights / GIB:.1f} GiB "
                     f"({'bf16' if itemsize == 2 else 'fp32'}); per token: block {block_bytes_per_token(arch, itemsize) / 1024:.0f} KiB, "
                     f"trace {trace_bytes_per_token(arch, itemsize) / 1024:.0f} KiB, attention mass "
                     f"{mass_bytes_per_token(arch, itemsize) / 1024:.0f} KiB, (KV cache {kv_cache_bytes_per_token(arch, itemsize) / 1024:.0f} KiB)")
        lines.append(f"{'tokens':>8} | {'trace':>10} | {'attention mass':>14} | {'naive T×T (1 layer, fp32)':>26}")
        for length in lengths:
            trace = weights + length * trace_bytes_per_token(arch, itemsize)
            mass = weights + length * mass_bytes_per_token(arch, itemsize) + 8 * 2**20
            naive = arch.n_heads * length * length * 4
            lines.append(f"{length:>8} | {trace / GIB:>8.1f} G | {mass / GIB:>12.1f} G | {naive / GIB:>24.1f} G")
    return "\n".join(lines)


# ---- measurement on CPU: 2 layers with the 1B's widths, fp32 -------------------------------------------

def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def child(variant: str, tokens: int) -> None:
    import gc

    import torch

    from repo_lens.analysis.attention_mass import attention_mass
    from repo_lens.lens import Lens
    from repo_lens.model import LensModel, ModelConfig

    torch.set_num_threads(2)
    arch = ARCHS[0]
    torch.manual_seed(0)
    cfg = ModelConfig(family="olmo2", vocab_size=arch.vocab, d_model=arch.d_model, n_layers=2, n_heads=arch.n_heads,
                      d_mlp=arch.d_mlp, layer_mechanisms=["rope", "repo"], max_position_embeddings=tokens)
    with torch.device("meta"):
        model = LensModel(cfg)
    model = model.to_empty(device="cpu").eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.02)
    for block in model.blocks:
        block.attn.inv_freq = block.attn.inv_freq.new_tensor(1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128)))
    lens = Lens(model, None, {})
    ids = torch.randint(0, arch.vocab, (tokens,), generator=torch.Generator().manual_seed(1))
    gc.collect()
    before = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    start = time.perf_counter()
    if variant == "forward":
        with torch.inference_mode():
            model(ids[None])
    elif variant == "trace":
        lens.trace(ids.tolist())
    else:
        attention_mass(lens, ids, {"needle": (10, 20)}, (tokens - 8, tokens))
    seconds = time.perf_counter() - start
    print(json.dumps({"variant": variant, "tokens": tokens, "added_bytes": (_status_kb("VmHWM") - before) * 1024,
                      "seconds": seconds}))


def measure(lengths: tuple[int, int]) -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    arch = ARCHS[0]
    predicted = {"forward": None, "trace": trace_bytes_per_token(arch, 4), "attention_mass": mass_bytes_per_token(arch, 4)}
    print(f"\nmeasured on CPU, fp32, 2 layers with {arch.name}'s widths (peak RSS added by one call):")
    for variant in ("forward", "trace", "attention_mass"):
        added = []
        for tokens in lengths:
            out = subprocess.run([sys.executable, __file__, "--child", variant, str(tokens)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            added.append(json.loads(out.strip().splitlines()[-1])["added_bytes"])
        slope = (added[1] - added[0]) / (lengths[1] - lengths[0])
        model = predicted[variant]
        print(f"  {variant:<15} {added[0] / 2**20:>7.0f} MiB @ {lengths[0]}, {added[1] / 2**20:>7.0f} MiB @ {lengths[1]}: "
              f"{slope / 1024:>6.0f} KiB/token" + (f"  (model: {model / 1024:.0f} KiB/token)" if model else ""))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--measure", action="store_true", help="check the per-token terms on this CPU")
    parser.add_argument("--measure-lengths", type=int, nargs=2, default=[512, 1536])
    args = parser.parse_args()
    print(table(args.lengths))
    if args.measure:
        measure(tuple(args.measure_lengths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
