"""How much of the token index a model's hidden states carry, where RePo's f reads them: a linear probe
(least squares, with a bias) from each chosen layer's attention input h (the block's normed hidden state)
to the token index, fitted on held-out Brown sequences and scored on another. Prints the probe's R², its
mean absolute error in tokens, and how often it puts two neighbouring tokens in the right order (0.5 is
chance): what f(h) could recover of RoPE's positions without the index as an input.

    python analyses/index_probe.py [--model zoo:smollm2-135m] [--layers 10 20 29] [--context 1024]
        [--train-sequences 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def probe(lens, layers: list[int], context: int, train_sequences: int) -> dict[int, dict[str, float]]:
    from repo_lens.train.text_tokens import TextTokens

    sequences = TextTokens.brown(lens.tokenizer).held_out_sequences(context)[:train_sequences + 1, :context]
    inputs: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    handles = [lens.model.blocks[layer].attn.mechanism.register_forward_hook(
        lambda module, args, output, layer=layer: inputs[layer].append(args[0][0].detach().float()))
        for layer in layers]
    try:
        with torch.inference_mode():
            for row in sequences:
                lens.model(row[None].to(lens.device))
    finally:
        for handle in handles:
            handle.remove()
    index = torch.arange(context, dtype=torch.float32)
    out = {}
    for layer, states in inputs.items():
        train = torch.cat([torch.cat((h, torch.ones(context, 1)), 1) for h in states[:-1]])
        weights = torch.linalg.lstsq(train, index.repeat(len(states) - 1)[:, None]).solution
        predicted = (torch.cat((states[-1], torch.ones(context, 1)), 1) @ weights)[:, 0]
        error = predicted - index
        out[layer] = {"r2": float(1 - error.var() / index.var()), "mean_abs_error": float(error.abs().mean()),
                      "adjacent_in_order": float((predicted[1:] > predicted[:-1]).float().mean())}
    return out


def main(argv: list[str] | None = None) -> int:
    import repo_lens

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="zoo:smollm2-135m")
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 20, 29])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--train-sequences", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lens = repo_lens.load(args.model, device="cpu", dtype="float32")
    for layer, scores in probe(lens, args.layers, args.context, args.train_sequences).items():
        print(f"layer {layer}: R² {scores['r2']:.3f}, mean |error| {scores['mean_abs_error']:.1f} tokens, "
              f"neighbours in order {scores['adjacent_in_order']:.3f} (chance 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
