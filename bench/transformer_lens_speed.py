"""repo_lens' model against TransformerLens' own model of the same weights, side by side in one run.

A random Llama (d_model 512, 8 layers, 8 query / 4 key-value heads) is saved by transformers, loaded by
``TransformerBridge.boot_transformers`` (compatibility mode, no weight processing) and by ``repo_lens.load``;
each timing is the median of ``--repeats`` runs on one thread, no gradients. Prints the forward and
``run_with_cache`` times of both and repo_lens/TransformerLens ratios (below 1: repo_lens is faster), and
``lens.trace`` against repo_lens' own forward.

    python bench/transformer_lens_speed.py --tokens 512
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformer_lens_idioms import write_tokenizer  # noqa: E402  (this folder is on the path of a script)


def median_seconds(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, LlamaConfig
    from transformer_lens.model_bridge import TransformerBridge

    import repo_lens

    config = LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
        write_tokenizer(Path(folder))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            bridge = TransformerBridge.boot_transformers(folder, device="cpu")
            bridge.enable_compatibility_mode(no_processing=True)
        lens = repo_lens.load(Path(folder), device="cpu")
    ids = torch.randint(0, 1024, (1, args.tokens))
    with torch.no_grad():
        gap = float((bridge(ids) - lens.model(ids)).abs().max())
        rows = {
            "forward": (lambda: bridge(ids), lambda: lens.model(ids)),
            "run_with_cache": (lambda: bridge.run_with_cache(ids), lambda: lens.model.run_with_cache(ids)),
        }
        print(f"Llama 512 wide, 8 layers, GQA 8/4, {args.tokens} tokens, 1 thread; logits agree within {gap:.1e}")
        print(f"{'':16s} {'TransformerLens':>16s} {'repo_lens':>10s} {'ratio':>6s}")
        for name, (theirs, ours) in rows.items():
            reference, mine = median_seconds(theirs, args.repeats), median_seconds(ours, args.repeats)
            print(f"{name:16s} {reference * 1e3:13.1f} ms {mine * 1e3:7.1f} ms {mine / reference:6.2f}x")
        forward = median_seconds(lambda: lens.model(ids), args.repeats)
        trace = median_seconds(lambda: lens.trace(ids[0].tolist(), progress=False), args.repeats)
        print(f"{'trace':16s} {'forward':>13s} {forward * 1e3:.1f} ms {trace * 1e3:7.1f} ms {trace / forward:6.2f}x")


if __name__ == "__main__":
    main()
