"""What writes the needle's learned positions in ``zoo:bytes1k-repo`` (RePo in layers 2 and 3), by both
attribution methods, and what ablating the top component in the full forward does.

For each of ``--prompts`` RULER needle prompts (1,000 bytes, the needle at depths 0.2-0.8), every head of
layers 2 and 3 is attributed at the needle's value bytes (``position_attribution``, path ablation and
gradient); a component's value is its mean over those bytes. Beside it, the same for as many context bytes
outside the needle (the baseline the needle is compared with). The summary gives, per layer and head, the
top five components by each method, their agreement (the top fives' overlap and the Spearman correlation
of the components' mean values) and the gradient's completeness error. Then the causal check: the top
component of the chosen head is zeroed in the full forward (``blocks.L.hook_mlp_out`` or one head's
``hook_z``), and so is a control, the component of the same kind with the smallest attribution; for each
the needle's position in that head (how far it moves, whether it stays at an extreme of the head's
positions) and exact-match retrieval, with 95 % Wilson intervals and exact McNemar tests against the
unedited model.

    python analyses/position_attribution_findings.py --out build/attribution [--prompts 40] [--head 2 3]
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


def attributed(lens: Any, prompt: Any, tokens: list[int], method: str) -> dict[int, Any]:
    """Layer -> (mean value [head, component], labels, completeness error [head] or None) over ``tokens``."""
    from repo_lens.analysis import position_attribution

    out = {}
    for layer in LAYERS:
        found = position_attribution(lens, prompt.ids, layer, tokens=tokens, method=method)
        error = None if found.completeness_error is None else np.abs(found.completeness_error).mean(axis=1)
        out[layer] = (found.values.mean(axis=1), found.labels, error)
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float) for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


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
    """The hook that removes component ``label`` from the full forward (its output set to zero)."""
    if label.endswith("_mlp_out") or label.endswith("_attn_out"):
        layer, kind = label.split("_", 1)
        name = f"blocks.{layer}.hook_{kind}"

        def zero(value: Any, hook: Any) -> Any:
            return value * 0

        return name, zero
    if label.startswith("L") and "H" in label:
        layer, head = (int(part) for part in label[1:].split("H"))

        def zero_head(value: Any, hook: Any) -> Any:
            value = value.clone()
            value[:, :, head] = 0
            return value

        return f"blocks.{layer}.attn.hook_z", zero_head
    raise ValueError(f"the causal check removes an attention output, an MLP output or a head, not {label!r}")


def needle_check(lens: Any, prompt: Any, layer: int, head: int, hooks: list) -> dict[str, float]:
    """Under ``hooks``: the needle's value bytes' mean position in (layer, head), its percentile among the
    context bytes outside the needle, whether that is an extreme (outside their central 90 %), and
    exact-match retrieval of the answer."""
    import torch

    seen: dict[str, Any] = {}

    def keep(value: Any, hook: Any) -> None:
        seen["z"] = value[0, head].detach().double().cpu().numpy()

    ids = torch.tensor([list(prompt.ids)])
    with torch.no_grad():
        logits = lens.model.run_with_hooks(ids, fwd_hooks=[*hooks, (f"blocks.{layer}.attn.hook_pos", keep)])
    start, end = prompt.query
    exact = float((logits[0, start - 1:end - 1].argmax(-1) == ids[0, start:end]).all())
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
    """The causal check of head ``name`` ("L3H3"): its top component (not the embedding) and a control, the
    component of the same kind with the smallest attribution, each zeroed in the full forward."""
    layer, head = (int(part) for part in name[1:].split("H"))
    ranked = heads[name]["needle_mean_position_moved"]
    top = max((label for label in ranked if label != "embed"), key=lambda label: abs(ranked[label]))
    kind = "head" if top.startswith("L") else top.split("_", 1)[1]
    same_kind = [label for label in ranked if label not in (top, "embed")
                 and (label.startswith("L") if kind == "head" else label.endswith(kind))]
    control = min(same_kind, key=lambda label: abs(ranked[label]))
    return {"head": name, "top_component": top, "control_component": control,
            "results": causal(lens, prompts, layer, head, top, control)}


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
    args = parser.parse_args(argv)
    from tqdm.auto import tqdm

    lens = repo_lens.load(MODEL, device="cpu", dtype="float32")
    prompts = needle_prompts(lens, args.prompts)
    per_prompt: dict[str, list[dict]] = {"ablation": [], "gradient": [], "context": []}
    for seed, prompt in enumerate(tqdm(prompts, desc="attributing the needle")):
        needle = list(range(*prompt.spans["value"]))
        per_prompt["ablation"].append(attributed(lens, prompt, needle, "ablation"))
        per_prompt["gradient"].append(attributed(lens, prompt, needle, "gradient"))
        per_prompt["context"].append(attributed(lens, prompt, context_bytes(prompt, len(needle), seed), "ablation"))
    summary: dict[str, Any] = {"model": MODEL, "prompts": len(prompts), "length": LENGTH,
                               "heads": summarise(per_prompt, lens.model.cfg.n_heads)}
    summary["causal"] = [causal_check(lens, prompts, summary["heads"], name) for name in args.heads]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({key: {k: v for k, v in summary["heads"][key].items() if k != "needle_mean_position_moved"}
                      for key in args.heads}, indent=1))
    print(json.dumps(summary["causal"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
