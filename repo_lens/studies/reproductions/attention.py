"""RePo Table 4 on the zoo: attention mass per token on needle / query / rest in NIAH prompts.

RULER niah_single prompts (noise haystack, answer appended), needle depths 0–1 and a few seeds.
The paper measures within the training context (4K tokens). A model whose context holds a NIAH
prompt (≥ 512 tokens, e.g. the 1,024-byte ``bytes1k-*`` models) is measured at its context length,
in distribution; RULER's template alone is 359 bytes, more than the 256-byte ``bytes-*`` models'
context, so theirs are 512 bytes — twice their training context, an extrapolation setting.
Needle = the value tokens, query = question + answer prefix, query rows = the answer
tokens; per token, averaged over rows, heads and layers (×10⁻², as the paper prints it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from repo_lens.studies.reproductions.common import save_study

PAPER_TABLE4 = {"Linear (RoPE)": {"needle": 1.754, "query": 1.123, "rest": 0.014},
                "Constant (NoPE)": {"needle": 1.572, "query": 1.135, "rest": 0.014},
                "RePo": {"needle": 2.013, "query": 1.046, "rest": 0.015}}
SPANS = ("needle", "query", "rest")


MIN_PROMPT_TOKENS = 512  # RULER's template (359 bytes), a needle and some haystack


def prompt_length(context: int) -> int:
    """The NIAH prompt length for a model: its context when a prompt fits, else 512 (beyond its context).

    >>> prompt_length(1024), prompt_length(256)
    (1024, 512)
    """
    return context if context >= MIN_PROMPT_TOKENS else MIN_PROMPT_TOKENS


def attention_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                    progress: bool = True, batch_size: int = 1) -> dict[str, Any]:
    """Table 4: attention mass per token on needle / query / rest, ``batch_size`` prompts per forward pass."""
    from repo_lens.analysis import attention_mass_batch
    from repo_lens.data import niah_single
    from repo_lens.loading import load

    depths = (0.0, 0.5, 1.0) if quick else (0.0, 0.25, 0.5, 0.75, 1.0)
    seeds = (0,) if quick else (0, 1, 2)
    results: dict[str, Any] = {}
    for model in models:
        lens = load(model, device="cpu")
        settings = [(depth, seed) for depth in depths for seed in seeds]
        length = prompt_length(lens.context_length)
        prompts = [niah_single(lens.tokenizer, length, depth=depth, seed=seed)
                   for depth, seed in tqdm(settings, desc=f"NIAH prompts {model}", disable=not progress)]
        masses = attention_mass_batch(
            lens, [(prompt.ids, {"needle": prompt.spans["value"], "query": prompt.spans["query"]}, prompt.query)
                   for prompt in prompts], batch_size=batch_size, allow_beyond_context=True)
        cells = [{"depth": depth, "seed": seed, "tokens": len(prompt.ids),
                  "needle_token_depth": prompt.meta.get("needle_token_depth"),
                  **{span: mass.per_token[span] for span in SPANS}}
                 for (depth, seed), prompt, mass in zip(settings, prompts, masses)]
        results[model] = {"cells": cells, "prompt_tokens": length, "context": lens.context_length,
                          "layer_kinds": list(lens.model.cfg.layer_mechanisms),
                          "per_token": {span: float(np.mean([c[span] for c in cells])) for span in SPANS}}
    lines = ["| model | needle ×10⁻² | query ×10⁻² | rest ×10⁻² | needle / rest |", "|---|---|---|---|---|"]
    for name, row in PAPER_TABLE4.items():
        lines.append(f"| paper: {name}, OLMo-2 1B, 4K | {row['needle']:.3f} | {row['query']:.3f} | {row['rest']:.3f} | "
                     f"{row['needle'] / row['rest']:.0f} |")
    for model, result in results.items():
        row = result["per_token"]
        setting = "in context" if result["prompt_tokens"] <= result["context"] else "beyond context"
        lines.append(f"| {model}, {result['prompt_tokens']} tokens ({setting}) | {100 * row['needle']:.3f} | "
                     f"{100 * row['query']:.3f} | {100 * row['rest']:.3f} | {row['needle'] / row['rest']:.2f} |")
    markdown = "\n".join(lines)
    document = {"study": "attention_mass", "paper": PAPER_TABLE4, "settings": {"depths": depths, "seeds": seeds},
                "results": results, "markdown": markdown}
    return save_study(out, document, {"table4_attention_mass": _figure(results)} if figures else None)


def _figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    from repo_lens.plots.style import SPAN_COLORS, styled

    figure = go.Figure()
    names = [model.replace("zoo:", "") for model in results]
    for span in SPANS:
        figure.add_bar(name=span, x=names, y=[100 * results[m]["per_token"][span] for m in results],
                       marker_color=SPAN_COLORS[span])
    figure.update_layout(barmode="group", yaxis_title="attention mass per token (×10⁻²)")
    return styled(figure, "NIAH attention mass per token (RePo Table 4)")
