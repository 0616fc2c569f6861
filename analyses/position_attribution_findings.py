"""What writes the needle's learned positions in ``zoo:bytes1k-repo`` (RePo in layers 2 and 3), by both
attribution methods, and what ablating the top component in the full forward does.

For each of ``--prompts`` RULER needle prompts (1,000 bytes, the needle at depths 0.2-0.8), every head of
layers 2 and 3 is attributed at the needle's value bytes (``position_attribution``, path ablation and
gradient); a component's value is its mean over those bytes. Beside it, the same for as many context bytes
outside the needle (the baseline the needle is compared with). The summary gives, per layer and head, the
top five components by each method, their agreement (the top fives' overlap and the Spearman correlation
of the components' mean values) and the gradient's completeness error. Then the causal check: the
upstream head with the largest attribution is zeroed in the full forward (its ``hook_z``), and so is a
control, the upstream head with the smallest; for each, the needle's position in that head (how far it
moves, beside what the path ablation predicts; its percentile among the context bytes) and exact-match
retrieval, with 95 % Wilson intervals and exact McNemar tests against the unedited model. The paper
figure's two panels (layer 3's components × heads map and the strip of bytes that move L3H3's position)
are written beside the summary as PDF and PNG.

On the SmolLM2 conversions (``--smollm2``, GRAPE-M and RePo by default), the first learned layer's
positions of sentence ends and of a needle's value are attributed the same way, against the other tokens.

    python analyses/position_attribution_findings.py --out build/attribution [--prompts 40] [--heads L2H3 L3H3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL = "zoo:bytes1k-repo"
LAYERS = (2, 3)
LENGTH = 1000


def needle_prompts(lens: Any, count: int) -> list[Any]:
    from repo_lens.data.niah import niah_single

    depths = np.linspace(0.2, 0.8, count)
    return [niah_single(lens.tokenizer, LENGTH, float(depth), seed=seed) for seed, depth in enumerate(depths)]


def context_bytes(prompt: Any, count: int, seed: int) -> list[int]:
    """``count`` context bytes outside the needle, drawn with ``seed``."""
    start, end = prompt.spans["context"]
    needle = range(*prompt.spans["needle"])
    pool = [index for index in range(start, end) if index not in needle]
    return sorted(np.random.default_rng(seed).choice(pool, size=count, replace=False).tolist())


def attributed(lens: Any, prompt: Any, groups: dict[str, list[int]], method: str) -> dict[str, dict[int, Any]]:
    """Group -> layer -> (mean value [head, component] over the group's tokens, labels, completeness error
    [head] or None), every group from one attribution of the layer."""
    from repo_lens.analysis import position_attribution

    tokens = sorted({token for group in groups.values() for token in group})
    out: dict[str, dict[int, Any]] = {name: {} for name in groups}
    for layer in LAYERS:
        found = position_attribution(lens, prompt.ids, layer, tokens=tokens, method=method)
        for name, group in groups.items():
            rows = [found.tokens.index(token) for token in group]
            error = (None if found.completeness_error is None
                     else np.abs(found.completeness_error[:, rows]).mean(axis=1))
            out[name][layer] = (found.values[:, rows].mean(axis=1), found.labels, error)
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def top_five(values: np.ndarray, labels: list[str]) -> list[tuple[str, float]]:
    order = np.argsort(-np.abs(values), kind="stable")[:5]
    return [(labels[i], round(float(values[i]), 3)) for i in order]


def summarise(per_prompt: dict[str, list[dict]], n_heads: int) -> dict[str, Any]:
    """Per layer and head: each method's mean attribution over prompts, its top five, their agreement."""
    summary: dict[str, Any] = {}
    for layer in LAYERS:
        labels = per_prompt["ablation"][0][layer][1]
        for head in range(n_heads):
            means = {method: np.mean([record[layer][0][head] for record in records], axis=0)
                     for method, records in per_prompt.items() if method in ("ablation", "gradient")}
            baseline = np.mean([record[layer][0][head] for record in per_prompt["context"]], axis=0)
            errors = [record[layer][2][head] for record in per_prompt["gradient"]]
            ablation, gradient = top_five(means["ablation"], labels), top_five(means["gradient"], labels)
            summary[f"L{layer}H{head}"] = {
                "ablation_top5": ablation, "gradient_top5": gradient,
                "context_top5": top_five(baseline, labels),
                "top5_overlap": len({name for name, _ in ablation} & {name for name, _ in gradient}),
                "spearman": round(spearman(means["ablation"], means["gradient"]), 3),
                "completeness_error_mean_abs": round(float(np.mean(errors)), 3),
                "needle_mean_position_moved": {name: round(float(value), 3) for name, value in
                                               zip(labels, means["ablation"])},
            }
    return summary


def zeroing_hook(label: str) -> tuple[str, Any]:
    """The hook that removes head ``label`` ("L1H2") from the full forward (its ``hook_z`` set to zero)."""
    layer, head = (int(part) for part in label[1:].split("H"))

    def zero_head(value: Any, hook: Any) -> Any:
        value = value.clone()
        value[:, :, head] = 0
        return value

    return f"blocks.{layer}.attn.hook_z", zero_head


def needle_check(lens: Any, prompt: Any, layer: int, head: int, hooks: list) -> dict[str, float]:
    """Under ``hooks``: the needle's value bytes' mean position in (layer, head), its percentile among the
    context bytes outside the needle, whether that is an extreme (outside their central 90 %), and
    exact-match retrieval of the answer."""
    import torch

    from repo_lens.interventions import niah_exact_match

    seen: dict[str, Any] = {}

    def keep(value: Any, hook: Any) -> None:
        seen["z"] = value[0, head].detach().double().cpu().numpy()

    ids = torch.tensor([list(prompt.ids)])
    with torch.no_grad():
        logits = lens.model.run_with_hooks(ids, fwd_hooks=[*hooks, (f"blocks.{layer}.attn.hook_pos", keep)])
    exact = float(niah_exact_match(prompt)(logits)[0])
    z = seen["z"]
    needle = z[slice(*prompt.spans["value"])].mean()
    rest = np.delete(z[slice(*prompt.spans["context"])], np.arange(*prompt.spans["needle"]) - prompt.spans["context"][0])
    percentile = float((rest < needle).mean())
    return {"needle": float(needle), "percentile": percentile, "extreme": float(not 0.05 <= percentile <= 0.95),
            "exact": exact}


def causal(lens: Any, prompts: list[Any], layer: int, head: int, label: str, control: str) -> dict[str, Any]:
    from repo_lens.interventions.stats import mcnemar

    rows = {name: [needle_check(lens, prompt, layer, head, hooks) for prompt in prompts]
            for name, hooks in (("unedited", []), (label, [zeroing_hook(label)]), (control, [zeroing_hook(control)]))}
    out: dict[str, Any] = {}
    for name, records in rows.items():
        exact = np.array([record["exact"] for record in records])
        extreme = np.array([record["extreme"] for record in records])
        moved = np.array([record["needle"] - base["needle"] for record, base in zip(records, rows["unedited"])])
        entry = {"exact": _rate(exact), "needle_at_an_extreme": _rate(extreme),
                 "needle_percentile_mean": round(float(np.mean([record["percentile"] for record in records])), 3),
                 "needle_moved_mean": round(float(moved.mean()), 3),
                 "needle_moved_mean_abs": round(float(np.abs(moved).mean()), 3)}
        if name != "unedited":
            entry["mcnemar_p_exact"] = mcnemar([record["exact"] for record in rows["unedited"]], exact)
            entry["mcnemar_p_extreme"] = mcnemar([record["extreme"] for record in rows["unedited"]], extreme)
        out[name] = entry
    return out


def causal_check(lens: Any, prompts: list[Any], heads: dict[str, Any], name: str) -> dict[str, Any]:
    """The causal check of head ``name`` ("L3H3"): the upstream head with the largest attribution and, as a
    control, the one with the smallest, each zeroed in the full forward (a head rather than a block's whole
    output, which every later layer reads)."""
    layer, head = (int(part) for part in name[1:].split("H"))
    ranked = heads[name]["needle_mean_position_moved"]
    upstream_heads = [label for label in ranked if label.startswith("L")]
    top = max(upstream_heads, key=lambda label: abs(ranked[label]))
    control = min(upstream_heads, key=lambda label: abs(ranked[label]))
    results = causal(lens, prompts, layer, head, top, control)
    for label in (top, control):  # what the path ablation predicts the full forward's zeroing does
        results[label]["path_ablation_predicts"] = round(-ranked[label], 3)
    return {"head": name, "top_component": top, "control_component": control, "results": results}


def smollm2_findings(source: str, n_needles: int) -> dict[str, Any]:
    """What writes the first learned layer's positions of sentence ends and of a needle in a SmolLM2
    conversion: per component, the mean over heads of (its attribution at those tokens − at the other
    tokens), on 512 held-out Brown tokens and on ``n_needles`` 1,024-token needle prompts."""
    import repo_lens
    from repo_lens.analysis import position_attribution
    from repo_lens.data.niah import niah_single
    from repo_lens.train.text_tokens import TextTokens

    lens = repo_lens.load(source, device="cpu", dtype="float32")
    layer = next(index for index, kind in enumerate(lens.model.cfg.layer_mechanisms) if kind != "rope")
    ids = TextTokens.brown(lens.tokenizer).held_out_sequences(513)[0, :512].tolist()
    found = position_attribution(lens, ids, layer)
    texts = [lens.tokenizer.decode([token]) for token in ids]
    ends = np.array([text.strip() in (".", "!", "?") for text in texts])
    out: dict[str, Any] = {"source": source, "layer": layer, "sentence_ends": int(ends.sum())}
    per_token = found.values.mean(axis=0)  # [token, component], mean over heads
    out["sentence_end_top5"] = top_five(per_token[ends].mean(0) - per_token[~ends].mean(0), found.labels)
    gradient = position_attribution(lens, ids, layer, method="gradient").values.mean(axis=0)
    out["sentence_end_gradient_top5"] = top_five(gradient[ends].mean(0) - gradient[~ends].mean(0), found.labels)
    out["position_minus_index_mean_abs"] = round(float(np.abs(found.positions - np.arange(len(ids))).mean()), 3)
    out["largest_component_mean_abs"] = round(float(np.abs(found.values).mean(axis=(0, 1)).max()), 3)
    differences = []
    for seed in range(n_needles):
        prompt = niah_single(lens.tokenizer, 1024, 0.5, seed=seed)
        needle = position_attribution(lens, prompt.ids, layer).values.mean(axis=0)
        value, context = slice(*prompt.spans["value"]), slice(*prompt.spans["context"])
        differences.append(needle[value].mean(0) - needle[context].mean(0))
    out["needles"] = n_needles
    out["needle_top5"] = top_five(np.mean(differences, axis=0), found.labels)
    return out


def paper_figures(lens: Any, prompt: Any, out: Path) -> list[Path]:
    """The paper figure's two panels for one needle prompt: layer 3's components × heads map at the needle
    value's first byte, and which context bytes move L3H3's position of it (a strip over the text), each as
    a vector PDF (and PNG) at ICML's text width."""
    from repo_lens.analysis import position_attribution, token_attribution
    from repo_lens.plots import attribution_map_figure, export, token_attribution_strip

    token = prompt.spans["value"][0]
    found = position_attribution(lens, prompt.ids, 3, tokens=[token])
    strip = token_attribution(lens, prompt.ids, 3, 3, token)
    tokens = lens.trace(prompt.ids, progress=False).tokens
    figures = {"attribution-map": attribution_map_figure(found, token),
               "attribution-tokens": token_attribution_strip(strip, tokens, window=40)}
    return [export(figure, out / f"{name}.{suffix}", layout="icml-text")
            for name, figure in figures.items() for suffix in ("pdf", "png")]


def _rate(outcomes: np.ndarray) -> dict[str, float]:
    from repo_lens.interventions.stats import wilson

    return {key: round(value, 3) for key, value in wilson(int(outcomes.sum()), len(outcomes)).items()}


def main(argv: list[str] | None = None) -> int:
    import repo_lens

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--heads", nargs="+", default=["L2H3", "L3H3"],
                        help="the heads whose top component the causal check removes")
    parser.add_argument("--smollm2", nargs="*", default=["zoo:smollm2-135m-grape", "zoo:smollm2-135m-repo"],
                        help="SmolLM2 conversions whose sentence ends and needles are attributed (none: skip)")
    parser.add_argument("--smollm2-needles", type=int, default=5)
    parser.add_argument("--no-figures", action="store_true", help="skip the paper figure (it needs Chromium)")
    args = parser.parse_args(argv)
    from tqdm.auto import tqdm

    args.out.mkdir(parents=True, exist_ok=True)
    lens = repo_lens.load(MODEL, device="cpu", dtype="float32")
    prompts = needle_prompts(lens, args.prompts)
    per_prompt: dict[str, list[dict]] = {"ablation": [], "gradient": [], "context": []}
    for seed, prompt in enumerate(tqdm(prompts, desc="attributing the needle")):
        needle = list(range(*prompt.spans["value"]))
        ablation = attributed(lens, prompt, {"needle": needle, "context": context_bytes(prompt, len(needle), seed)},
                              "ablation")
        per_prompt["ablation"].append(ablation["needle"])
        per_prompt["context"].append(ablation["context"])
        per_prompt["gradient"].append(attributed(lens, prompt, {"needle": needle}, "gradient")["needle"])
    summary: dict[str, Any] = {"model": MODEL, "prompts": len(prompts), "length": LENGTH,
                               "heads": summarise(per_prompt, lens.model.cfg.n_heads)}
    summary["causal"] = [causal_check(lens, prompts, summary["heads"], name) for name in args.heads]
    if not args.no_figures:
        summary["figures"] = [str(path) for path in paper_figures(lens, prompts[0], args.out)]
    summary["smollm2"] = [smollm2_findings(source, args.smollm2_needles) for source in args.smollm2]
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({key: {k: v for k, v in summary["heads"][key].items() if k != "needle_mean_position_moved"}
                      for key in args.heads}, indent=1))
    print(json.dumps(summary["causal"], indent=1))
    print(json.dumps(summary["smollm2"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
