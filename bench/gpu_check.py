"""The GPU path at the published model's shape (issue 18), in one command.

Writes a random-weight RePo checkpoint in the published layout (DESIGN.md: a stock OLMo-2
config.json plus ``pe_config``, ``model.safetensors`` with the stock keys plus gate/content/final
maps from layer 5) with the shape of SakanaAI/RePo-OLMo2-1B-stage2-L5 (hidden 2048, 16 layers,
16 heads, intermediate 8192, vocab 100352, 4K context), loads it with ``repo_lens.load(path)``
(``device="auto"``: CUDA + bf16 on a GPU) and measures, with random token ids:

* load time;
* a plain forward vs ``lens.trace`` at each length (beyond 4K with ``allow_beyond_context``),
  batch 1 and a batch of ``--batch`` 4K inputs: seconds, tokens/s, peak device memory;
* ``attention_mass`` (needle span, 16 query rows) at the long lengths beside the forward's;
* ``run_with_cache`` of every ``hook_pos`` and ``hook_resid_post`` at 4K;
* parity on a short input: fp32 on the device vs fp32 on the CPU (positions and logits), and
  bf16 on the device vs fp32 on the CPU (the difference is stated, not bounded);
* a KV-cache check: prompt + token-by-token decoding gives the positions of one full forward.

    python bench/gpu_check.py [--lengths 4096 16384 32768] [--batch 4] [--out build/gpu_check]
    python bench/gpu_check.py --small     # the same steps at a small width (any machine; the tests run it on CPU)

It prints a Markdown table and writes ``results.json`` to ``--out``. Timings synchronise the
device before and after each call and are the median of ``--repeats`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import repo_lens  # noqa: E402
from big_memory import ARCHS, Arch  # noqa: E402
from repo_lens.analysis.attention_mass import attention_mass  # noqa: E402
from repo_lens.capture import position_hook_names  # noqa: E402

GIB = 2**30


# SakanaAI/RePo-OLMo2-1B-stage2-L5 (bench/big_memory.py's architecture); its max_position_embeddings
PUBLISHED_1B, PUBLISHED_CONTEXT = ARCHS[0], 4096
# the same layer/head layout at a width any CPU runs in seconds
SMALL, SMALL_CONTEXT = Arch("small", n_layers=16, d_model=256, n_heads=16, d_mlp=512, vocab=1024, repo_start=5), 512


def olmo2_weight_shapes(arch: Arch) -> dict[str, tuple[int, ...]]:
    """The stock OLMo-2 safetensors keys and shapes (untied embeddings, no GQA, no biases), plus
    RePo's maps for every layer from ``repo_start``."""
    d, ff, d_position = arch.d_model, arch.d_mlp, arch.d_position
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (arch.vocab, d), "model.norm.weight": (d,),
                                          "lm_head.weight": (arch.vocab, d)}
    for layer in range(arch.n_layers):
        prefix = f"model.layers.{layer}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[f"{prefix}self_attn.{name}.weight"] = (d, d)
        shapes[f"{prefix}self_attn.q_norm.weight"] = (d,)
        shapes[f"{prefix}self_attn.k_norm.weight"] = (d,)
        shapes[f"{prefix}post_attention_layernorm.weight"] = (d,)
        shapes[f"{prefix}post_feedforward_layernorm.weight"] = (d,)
        shapes[f"{prefix}mlp.gate_proj.weight"] = (ff, d)
        shapes[f"{prefix}mlp.up_proj.weight"] = (ff, d)
        shapes[f"{prefix}mlp.down_proj.weight"] = (d, ff)
        if layer >= arch.repo_start:
            shapes[f"{prefix}self_attn.gate_map.weight"] = (d_position, d)
            shapes[f"{prefix}self_attn.content_map.weight"] = (d_position, d)
            shapes[f"{prefix}self_attn.final_map.weight"] = (arch.n_heads, d_position)
    return shapes


def write_checkpoint(directory: Path, arch: Arch, context: int, seed: int = 0) -> Path:
    """A random-weight checkpoint in the published RePo-OLMo2 layout (bf16 weights, as published)."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": arch.d_model,
        "intermediate_size": arch.d_mlp, "num_hidden_layers": arch.n_layers,
        "num_attention_heads": arch.n_heads, "num_key_value_heads": arch.n_heads, "vocab_size": arch.vocab,
        "max_position_embeddings": context, "rope_theta": 500000.0, "rope_scaling": None,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "pad_token_id": 1, "bos_token_id": None,
        "eos_token_id": 100257,
        "pe_config": {"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": arch.repo_start,
                      "dynmaic_pe_start_layer": arch.repo_start, "dynamic_pe_layer_ids": "",
                      "dynmaic_pe_layer_ids": ""},
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, size in olmo2_weight_shapes(arch).items():
        if name.endswith("norm.weight"):
            tensor = 1.0 + 0.1 * torch.randn(size, generator=generator)
        elif name.endswith("final_map.weight"):
            # z of order 10-100, RePo Fig. 2's ranges; at 10x this a random model is chaotic (rounding
            # differences grow ~100x every 5 layers), and no parity could be measured on it
            tensor = 0.1 * torch.randn(size, generator=generator)
        else:
            tensor = torch.randn(size, generator=generator) / size[-1] ** 0.5
        weights[name] = tensor.to(torch.bfloat16)
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured(call: Callable[[], Any], device: torch.device, repeats: int) -> dict[str, float]:
    """Median seconds of ``repeats`` calls after one warm-up, and the peak device memory of one call
    above what was allocated before it (CUDA only)."""
    call()
    seconds = []
    peak = None
    for _ in range(repeats):
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
        if device.type == "cuda":
            peak = (torch.cuda.max_memory_allocated(device) - before) / GIB
    return {"seconds": statistics.median(seconds), "peak_gib": peak}


def random_ids(count: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(2, vocab, (count,), generator=torch.Generator().manual_seed(seed))


def performance(lens: Any, lengths: list[int], batch: int, repeats: int) -> list[dict[str, Any]]:
    model, device, vocab, context = lens.model, lens.device, lens.vocab_size, lens.context_length
    rows = []

    def row(what: str, tokens: int, result: dict[str, float]) -> None:
        rows.append({"what": what, "tokens": tokens, **result, "tokens_per_s": tokens / result["seconds"]})
        print(f"  {what:<34} {tokens:>7} tokens  {result['seconds']:8.3f} s", flush=True)

    for length in lengths:
        ids = random_ids(length, vocab, seed=length)
        beyond = length > context

        def forward(ids=ids):
            with torch.inference_mode():
                model(ids[None].to(device))

        row("forward", length, measured(forward, device, repeats))
        row("trace", length, measured(lambda ids=ids, beyond=beyond: lens.trace(
            ids.tolist(), allow_beyond_context=beyond, progress=False), device, repeats))
        if beyond:
            spans = {"needle": (length // 2, length // 2 + 32)}
            query = (length - 16, length)
            row("attention_mass (16 query rows)", length, measured(lambda ids=ids, spans=spans, query=query: attention_mass(
                lens, ids, spans, query, allow_beyond_context=True), device, repeats))
    texts = [random_ids(context, vocab, seed=index) for index in range(batch)]

    def batched_forward():
        with torch.inference_mode():
            model(torch.stack(texts).to(device))

    row(f"forward, batch {batch}", batch * context, measured(batched_forward, device, repeats))
    row(f"trace, batch {batch}", batch * context, measured(lambda: lens.trace_batch(
        [text.tolist() for text in texts], batch_size=batch, progress=False), device, repeats))
    names = lambda name: name.endswith("hook_pos") or name.endswith("hook_resid_post")  # noqa: E731

    def with_cache():
        with torch.inference_mode():
            model.run_with_cache(texts[0][None].to(device), names_filter=names)

    row("run_with_cache (hook_pos, resid_post)", context, measured(with_cache, device, repeats))
    return rows


def positions_and_logits(lens: Any, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [layer, head, pos], logits [pos, vocab]) of one sequence, fp32 on the CPU; with
    ``cache``, of the tokens ``ids`` that follow the cached ones."""
    captured = {}
    hooks = [(name, (lambda layer: lambda value, hook: captured.__setitem__(layer, value.float().cpu()))(layer))
             for layer, name in enumerate(position_hook_names(lens.model))]
    with torch.inference_mode():
        logits = lens.model.run_with_hooks(ids[None].to(lens.device), fwd_hooks=hooks, cache=cache)
    return torch.stack([captured[layer][0] for layer in range(lens.n_layers)]), logits[0].float().cpu()


def max_difference(left: tuple[torch.Tensor, torch.Tensor], right: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    return {"positions": float((left[0] - right[0]).abs().max()), "logits": float((left[1] - right[1]).abs().max())}


def parity(path: Path, vocab: int, device: torch.device, tokens: int = 128) -> dict[str, Any]:
    """Largest |difference| in positions and logits against fp32 on the CPU, on ``tokens`` tokens."""
    ids = random_ids(tokens, vocab, seed=7)
    reference = positions_and_logits(repo_lens.load(path, device="cpu", dtype="float32"), ids)
    result: dict[str, Any] = {"tokens": tokens}
    if device.type == "cuda":
        result["fp32_device_vs_fp32_cpu"] = max_difference(
            positions_and_logits(repo_lens.load(path, device=device, dtype="float32"), ids), reference)
        result["bf16_device_vs_fp32_cpu"] = max_difference(
            positions_and_logits(repo_lens.load(path, device=device, dtype="bfloat16"), ids), reference)
    result["logit_scale"] = float(reference[1].abs().max())
    result["position_scale"] = float(reference[0].abs().max())
    return result


def kv_cache_check(lens: Any, tokens: int = 64, prompt: int = 48) -> dict[str, float]:
    """Max |position difference| between a full forward and prompt + one-token-at-a-time decoding."""
    ids = random_ids(tokens, lens.vocab_size, seed=11)
    full, _ = positions_and_logits(lens, ids)
    cache = lens.model.new_cache()
    spans = [(0, prompt)] + [(index, index + 1) for index in range(prompt, tokens)]
    decoded = torch.cat([positions_and_logits(lens, ids[start:end], cache)[0] for start, end in spans], dim=-1)
    return {"tokens": tokens, "max_position_difference": float((decoded - full).abs().max()),
            "position_scale": float(full.abs().max())}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']}", f"load: {results['load_seconds']:.1f} s "
             f"(device {results['device']}, dtype {results['dtype']})", "",
             "| call | tokens | seconds | tokens/s | peak memory above weights (GiB) |", "|---|---|---|---|---|"]
    for row in results["performance"]:
        peak = "–" if row["peak_gib"] is None else f"{row['peak_gib']:.2f}"
        lines.append(f"| {row['what']} | {row['tokens']:,} | {row['seconds']:.3f} | {row['tokens_per_s']:,.0f} | {peak} |")
    seconds = {(row["what"], row["tokens"]): row["seconds"] for row in results["performance"]}
    ratios = [f"{tokens:,} tokens {seconds[(what, tokens)] / seconds[('forward', tokens)]:.2f}"
              for what, tokens in seconds if what == "trace" and ("forward", tokens) in seconds]
    if ratios:
        lines += ["", "trace / forward (same run): " + ", ".join(ratios)]
    lines += ["", f"parity (max |difference| on {results['parity']['tokens']} tokens; logits reach "
              f"{results['parity']['logit_scale']:.1f}, positions {results['parity']['position_scale']:.1f}):"]
    for key in ("fp32_device_vs_fp32_cpu", "bf16_device_vs_fp32_cpu"):
        if key in results["parity"]:
            difference = results["parity"][key]
            lines.append(f"- {key}: positions {difference['positions']:.2e}, logits {difference['logits']:.2e}")
    kv = results["kv_cache"]
    lines.append(f"- KV-cache decoding vs full forward ({kv['tokens']} tokens): positions {kv['max_position_difference']:.2e} "
                 f"(positions reach {kv['position_scale']:.1f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a small width with the same layers and heads")
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("build/gpu_check"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    arch, context = (SMALL, SMALL_CONTEXT) if args.small else (PUBLISHED_1B, PUBLISHED_CONTEXT)
    lengths = args.lengths or [context, 4 * context, 8 * context]
    with tempfile.TemporaryDirectory(prefix="repo_lens_gpu_check_") as scratch:
        path = write_checkpoint(Path(scratch) / "checkpoint", arch, context)
        start = time.perf_counter()
        lens = repo_lens.load(path)
        synchronize(lens.device)
        load_seconds = time.perf_counter() - start
        dtype = next(lens.model.parameters()).dtype
        name = torch.cuda.get_device_name(lens.device) if lens.device.type == "cuda" else platform.processor() or "CPU"
        print(f"loaded {arch} (context {context}) on {lens.device} ({dtype}) in {load_seconds:.1f} s", flush=True)
        results = {"machine": f"{name}; torch {torch.__version__}", "arch": {**arch.__dict__, "context": context}, "device": str(lens.device),
                   "dtype": str(dtype).replace("torch.", ""), "load_seconds": load_seconds,
                   "performance": performance(lens, lengths, args.batch, args.repeats),
                   "kv_cache": kv_cache_check(lens)}
        del lens
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        results["parity"] = parity(path, arch.vocab, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    table = markdown(results)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "table.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
