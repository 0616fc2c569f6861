"""position_attribution of one layer vs a plain forward of the same model on the same tokens (target <= 3x).

Runs both side by side, interleaved, and prints the ratio of medians: layer 10 of zoo:smollm2-135m-repo at
512 tokens (embed, 20 block outputs, 90 heads: 111 components), and the published RePo model's shape
(OLMo-2 1B: 16 layers x 16 heads, RePo from layer 5, at a small width) at its first RePo layer.
    python bench/position_attribution.py [--tokens 512] [--repeats 5] [--skip-smollm2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import repo_lens
from repo_lens.analysis import position_attribution
from repo_lens.model.tiny import tiny_model


def side_by_side(lens, ids: list[int], layer: int, repeats: int) -> tuple[float, float, int]:
    tensor = torch.tensor([ids])

    @torch.inference_mode()
    def forward():
        lens.model(tensor)

    def attribute():
        return position_attribution(lens, ids, layer)

    forward(), attribute()  # warm-up
    forward_times, attribution_times = [], []
    for _ in range(repeats):
        for run, times in ((forward, forward_times), (attribute, attribution_times)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return statistics.median(forward_times), statistics.median(attribution_times), len(attribute().labels)


def report(name: str, lens, ids: list[int], layer: int, repeats: int) -> None:
    forward, attribution, components = side_by_side(lens, ids, layer, repeats)
    print(f"{name}, layer {layer}, {len(ids)} tokens, {components} components: forward {forward * 1e3:.0f} ms, "
          f"position_attribution {attribution * 1e3:.0f} ms, ratio {attribution / forward:.2f}x (target <= 3x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-smollm2", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if not args.skip_smollm2:
        lens = repo_lens.load("zoo:smollm2-135m-repo", device="cpu", dtype="float32")
        ids = torch.randint(0, lens.vocab_size, (args.tokens,)).tolist()
        report("zoo:smollm2-135m-repo", lens, ids, 10, args.repeats)
    model = tiny_model("repo", shape="olmo2-1b").eval()
    lens = repo_lens.Lens(model, None)
    first = model.cfg.layer_mechanisms.index("repo")
    report("the published RePo shape (OLMo-2 1B layers and heads, small width)", lens,
           torch.randint(0, 256, (args.tokens,)).tolist(), first, args.repeats)


if __name__ == "__main__":
    main()
