"""Causal studies of positions: which layers and heads carry a model's use of its positions, and what
kind of information there (scale, order, exact layout) it needs.

Retrieval models (context ≥ 512 tokens) are scored on prompts of several families
(``repo_lens.data.retrieval_families``: RULER needles in noise and in running text, key–value lines,
a fact in other words; needle depths and haystacks varied): exact match of the greedy answer (teacher
forced) and its log-probability. The positions of every learned layer, of each layer and of each head
are replaced by edits of two kinds:

- off the positions' scale: "integer" (RoPE's 0..T−1), "constant" (NoPE-like), "mean", "shuffle",
  and the RePo authors' interpolation z' = (1 − p)·z + p·t (``dynamic_pe_pdrop``) and toward a constant;
- on their own scale: "affine" (each head's least-squares line), "rank" (order kept, spacing even),
  "scaled" (the integers rescaled to the head's range);

with controls that can fail: "random" (a random direction as long as the "affine" edit) and
"window" (positions permuted within blocks of 8 tokens). Every rate has its Wilson interval, every
mean its bootstrap interval, and every condition a paired test against the unedited run. Patching
pairs (the same fact, the needle moved; each pair its own haystack) give the per-head map of
writing the clean positions into the moved run, for every token, the needle's only, and the rest.
Models with a short context (the 256-byte language models) go through the same edits, scored by
held-out bits per byte (``position_interventions_lm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from repo_lens.interventions import stats
from repo_lens.studies.reproductions import position_interventions_report as report
from repo_lens.studies.reproductions.common import save_study, stem

if TYPE_CHECKING:
    from repo_lens.lens import Lens

SWEEP = (0.05, 0.2, 0.5)
QUICK_SWEEP = (0.5,)
ALL_MODES = ("integer", "constant", "mean", "shuffle", "affine", "rank", "scaled", "random", "window")
LAYER_MODES = ("integer", "constant", "affine", "rank", "scaled", "random", "window")
HEAD_MODES = ("integer", "constant", "affine", "rank", "random")
QUICK_ALL_MODES = ("integer", "constant", "affine", "rank", "scaled", "random", "window")
QUICK_UNIT_MODES = ("constant", "affine")  # quick mode, for tests: one off-scale and one on-scale edit per unit
FOCUS_LAYER_MODES = ("integer", "constant", "affine", "scaled", "random")  # focus: a cheaper plan (see study)
FOCUS_HEAD_MODES = ("integer", "constant", "affine", "scaled")
PATCH_TOKENS = {"every token": None, "needle": "needle", "question": "question", "answer": "answer", "rest": "rest"}
RETRIEVAL_CONTEXT = 512  # models with at least this context are scored on retrieval prompts
MIN_ACCURACY = 0.2  # ... if they retrieve: below this unedited accuracy, on held-out bits per byte instead


def held_out_text() -> str:
    """Held-out English documents of the bilingual corpus (fetched into the cache on first use)."""
    from repo_lens.data.bilingual import bilingual_splits

    return "\n".join(bilingual_splits()["en"][1])


def study_prompts(tokenizer: Any, length: int, per_family: int, text: str | None) -> list:
    """``per_family`` prompts of every family (seeds disjoint from training's), in family order.

    >>> from repo_lens.data.retrieval_families import FAMILIES
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> prompts = study_prompts(ByteTokenizer(), 512, 1, None)
    >>> sorted({p.meta["family"] for p in prompts}) == sorted(FAMILIES), all(len(p) <= 512 for p in prompts)
    (True, True)
    """
    from repo_lens.data.retrieval_families import retrieval_prompts
    from repo_lens.train.mixture import EVAL_SEED_OFFSET

    return retrieval_prompts(tokenizer, length, per_family, seed=EVAL_SEED_OFFSET + 7000, text=text)


class Scorer:
    """Scores ``prompts`` under many edits: the residual stream entering the first learned layer (which
    no edit changes) is computed once per batch, and each edit runs only the blocks from there on.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> from repo_lens.data import PromptEncoding, niah_prompt
    >>> lens = Lens(tiny_model("repo", context=512), ByteTokenizer())
    >>> no_bos = PromptEncoding(add_special_tokens=False)
    >>> prompts = [niah_prompt(lens.tokenizer, 450, seed=seed, encoding=no_bos) for seed in (1, 2)]
    >>> hits, logprobs = Scorer(lens, prompts, 2)("constant", layers=2, heads=1)
    >>> from repo_lens import interventions
    >>> bool(np.allclose(logprobs, interventions.ablate(lens, prompts, mode="constant", layers=2, heads=1,
    ...      metric=interventions.answer_logprob(prompts)), atol=1e-4))
    True
    """

    def __init__(self, lens: Lens, prompts: list, batch_size: int) -> None:
        import torch

        from repo_lens import interventions
        from repo_lens.interventions.edited_runs import as_batch, block_inputs

        self.lens, self.prompts = lens, prompts
        self.start = min(site.layer for site in interventions.select_sites(lens.model, None))
        self.chunks = []
        for first in range(0, len(prompts), batch_size):
            chunk = prompts[first:first + batch_size]
            batch = as_batch(lens, chunk)
            with torch.no_grad():
                inputs = block_inputs(lens.model, batch.ids, self.start)
            self.chunks.append((chunk, batch, inputs, interventions.niah_exact_match(chunk),
                                interventions.answer_logprob(chunk)))
        self._means: dict | None = None

    def means(self, sites: list) -> dict:
        """Each site's mean over every prompt (the reference of "mean"), computed once."""
        from repo_lens.interventions.ablation import checked_means

        if self._means is None:  # the 16 longest prompts: one batch that covers every width
            reference = sorted(self.prompts, key=len)[-16:]
            self._means = checked_means(self.lens, reference, sites, max(len(p) for p in self.prompts))
        return {site.layer: self._means[site.layer] for site in sites}

    def __call__(self, mode: Any, layers: Any = None, heads: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Per prompt: exact match (0/1) and answer log-probability under the edit."""
        import torch

        from repo_lens.capture import forward_lock
        from repo_lens.interventions import parse_mode, select_sites
        from repo_lens.interventions.ablation import edit_hooks
        from repo_lens.interventions.edit_targets import head_mask
        from repo_lens.interventions.metrics import first_logit_row
        from repo_lens.interventions.edited_runs import run_from, with_unread_rows

        parsed, model = parse_mode(mode), self.lens.model
        sites = select_sites(model, layers)
        means = self.means(select_sites(model, None)) if parsed.name == "mean" else None
        hits, logprobs = [], []
        for chunk, batch, inputs, exact, logprob in self.chunks:
            hooks = edit_hooks(self.lens, batch, parsed, sites, head_mask(model, heads),
                               means=None if means is None else {s.layer: means[s.layer] for s in sites})
            unread = first_logit_row([exact, logprob], batch.ids.shape[1])  # the answers' rows only
            with torch.no_grad(), forward_lock(model), model.hooks(fwd_hooks=hooks):
                logits = with_unread_rows(run_from(model, self.start, inputs[0], inputs[1:], rows_from=unread), unread)
            hits += exact(logits).tolist()
            logprobs += logprob(logits).tolist()
        return np.asarray(hits, dtype=float), np.asarray(logprobs, dtype=float)


def summarise(hits: np.ndarray, logprobs: np.ndarray, families: list[str], base: tuple | None) -> dict[str, Any]:
    """Accuracy (Wilson) and mean log p (bootstrap), overall and per family; with ``base`` (the unedited
    hits and log p), the paired tests of the change."""
    out: dict[str, Any] = {"accuracy": stats.accuracy(hits), "logprob": stats.bootstrap_mean(logprobs),
                           "by_family": {}}
    names = np.asarray(families)
    for family in dict.fromkeys(families):
        rows = names == family
        out["by_family"][family] = {"accuracy": stats.accuracy(hits[rows]),
                                    "logprob": stats.bootstrap_mean(logprobs[rows])}
    if base is not None:
        out["vs_unedited"] = {"accuracy": stats.paired(hits, base[0], binary=True),
                              "logprob": stats.paired(logprobs, base[1], binary=False)}
    out["hits"], out["logprobs"] = hits.astype(int).tolist(), np.round(logprobs, 3).tolist()
    return out


def conditions(lens: Lens, sweep: tuple[float, ...], plan: str = "full") -> list[tuple[str, Any, Any, Any]]:
    """(group, layer, head, mode) of every edit: every learned layer at once, each layer, each head, the
    sweeps. ``plan``: "full", "quick" (tests) or "focus" (fewer modes; heads only of the layers whose
    own edit breaks the task, see :func:`ablation_study`)."""
    from repo_lens import interventions

    layers = [site.layer for site in interventions.select_sites(lens.model, None)]
    every, per_layer, per_head = {"quick": (QUICK_ALL_MODES, QUICK_UNIT_MODES, QUICK_UNIT_MODES),
                                  "focus": (QUICK_ALL_MODES, FOCUS_LAYER_MODES, FOCUS_HEAD_MODES)}.get(
        plan, (ALL_MODES, LAYER_MODES, HEAD_MODES))
    out: list[tuple[str, Any, Any, Any]] = [("all", None, None, mode) for mode in every]
    out += [("layer", layer, None, mode) for layer in layers for mode in per_layer]
    out += [("head", layer, head, mode) for layer in layers for head in range(lens.n_heads) for mode in per_head]
    out += [("sweep", None, None, interventions.Interpolate(p=p, toward=toward)) for toward in ("integer", "constant")
            for p in sweep]
    return out


def moves_positions(lens: Lens, prompt: Any, mode: Any, layer: Any, head: Any, unchanged: np.ndarray) -> bool:
    """Whether the edit moves any position of ``prompt`` (e.g. "integer" or "affine" leave RoPE's as they are)."""
    from repo_lens import interventions

    parsed = interventions.parse_mode(mode)
    if isinstance(parsed, interventions.Mean):
        parsed = interventions.Mean(reference=[prompt])
    edited = interventions.ablated_positions(lens, prompt, mode=parsed, layers=layer, heads=head)
    return not np.allclose(edited, unchanged, atol=1e-4 * max(1.0, float(np.abs(unchanged).max())))


def condition_key(group: str, layer: Any, head: Any, mode: Any) -> str:
    """A condition's name in results.json, e.g. ``head 2.3 affine`` or ``sweep interpolate 0.05``.

    >>> from repo_lens.interventions import Window
    >>> condition_key("head", 2, 3, "affine"), condition_key("all", None, None, Window(width=8))
    ('head 2.3 affine', 'all window 8')
    """
    from repo_lens.interventions import parse_mode

    where = {"all": "all", "layer": f"layer {layer}", "head": f"head {layer}.{head}", "sweep": "sweep"}[group]
    return f"{where} {parse_mode(mode).label}"


def ablation_study(lens: Lens, families: list[str], probe: Any, sweep: tuple[float, ...], scorer: Any,
                   progress: bool, name: str, plan: str = "full") -> dict[str, Any]:
    """Every condition scored by ``scorer`` (a :class:`Scorer`, or any callable ``(mode, layers, heads)`` →
    per-input hits and log p, whose inputs belong to ``families``); an edit that moves no position
    (checked on ``probe``, one input) is recorded with ``"moves": False`` and not run. In the "focus"
    plan, heads are edited only in the layers where an edit of the whole layer lowers accuracy by more
    than 0.2."""
    from repo_lens.interventions import Interpolate

    base: tuple[np.ndarray, np.ndarray] = scorer(Interpolate(p=0.0))
    result: dict[str, Any] = {"unedited": summarise(base[0], base[1], families, None), "conditions": {}}
    unchanged = lens.trace(probe, progress=False).positions
    for group, layer, head, mode in tqdm(conditions(lens, sweep, plan), desc=f"edits {name}", disable=not progress):
        if group == "head" and plan == "focus" and not _breaks(result, layer, base[0].mean()):
            continue
        entry = {"group": group, "layer": layer, "head": head, "mode": report.mode_label(mode)}
        is_mean = mode == "mean"
        if not is_mean and not moves_positions(lens, probe, mode, layer, head, unchanged):
            entry["moves"] = False
        else:
            hits, logprobs = scorer(mode, layer, head)
            entry.update(moves=True, **summarise(hits, logprobs, families, base))
        result["conditions"][condition_key(group, layer, head, mode)] = entry
    result["head_comparisons"] = head_comparisons(result)
    return result


def _breaks(result: dict[str, Any], layer: int, unedited: float) -> bool:
    """Whether some edit of the whole ``layer`` lowered accuracy by more than 0.2."""
    return any(entry["group"] == "layer" and entry["layer"] == layer and entry.get("moves")
               and entry["accuracy"]["value"] < unedited - 0.2 for entry in result["conditions"].values())


def head_comparisons(result: dict[str, Any]) -> dict[str, Any]:
    """Per layer and mode, every pair of heads compared on the same prompts (McNemar on exact match)."""
    by_layer: dict[str, dict[str, dict[int, list[int]]]] = {}
    for entry in result["conditions"].values():
        if entry["group"] == "head" and entry.get("moves"):
            by_layer.setdefault(str(entry["layer"]), {}).setdefault(entry["mode"], {})[entry["head"]] = entry["hits"]
    out: dict[str, Any] = {}
    for layer, modes in by_layer.items():
        for mode, heads in modes.items():
            for a in sorted(heads):
                for b in sorted(heads):
                    if a < b:
                        test = stats.paired(heads[a], heads[b], binary=True)
                        out[f"{layer} {mode} h{a} vs h{b}"] = {"difference": test["difference"], "p": test["p"]}
    return out


def patching_study(lens: Lens, pairs: list[tuple[Any, Any]], progress: bool, name: str) -> dict[str, Any]:
    """Per token set (every token, the needle's, the rest), the per-head map of Δ answer log p when the
    clean positions are written into the moved-needle run: mean and bootstrap interval over pairs, overall
    and per prompt family (``by_family``); and the attribution estimate's Pearson correlation with the
    exact map (every token)."""
    from repo_lens import interventions

    effects: dict[str, list[np.ndarray]] = {label: [] for label in PATCH_TOKENS}
    estimates, baselines, cleans, families = [], [], [], []
    for clean, moved in tqdm(pairs, desc=f"patching {name}", disable=not progress):
        metric = interventions.answer_logprob(moved)
        for label, tokens in PATCH_TOKENS.items():
            grid = interventions.patch(lens, clean, moved, metric,
                                       options=interventions.GridOptions(tokens=tokens, progress=False))
            effects[label].append(grid.effects)
            if tokens is None:
                baselines.append(grid.baseline)
                cleans.append(grid.clean)
        estimates.append(interventions.attribute(lens, clean, moved, metric).effects)
        families.append(moved.meta["family"])
    maps = {label: cell_intervals(np.asarray(values)) for label, values in effects.items()}
    names = np.asarray(families)
    by_family = {family: {label: cell_intervals(np.asarray(values)[names == family]) for label, values in effects.items()}
                 for family in dict.fromkeys(families)}
    exact, estimate = np.asarray(effects["every token"]), np.asarray(estimates)
    cells = np.isfinite(exact[0])
    varied = np.abs(exact[:, cells]).sum() > 0
    pearson = float(np.corrcoef(exact[:, cells].ravel(), estimate[:, cells].ravel())[0, 1]) if varied else None
    return {"pairs": len(pairs), "families": families, "maps": maps, "by_family": by_family,
            "moved_logprob": stats.bootstrap_mean(baselines), "clean_logprob": stats.bootstrap_mean(cleans),
            "attribution_pearson": pearson}


def cell_intervals(values: np.ndarray) -> dict[str, Any]:
    """[pairs, layer, head] effects → mean, low, high [layer, head] (NaN where not patched) and n."""
    shape = values.shape[1:]
    mean, low, high = (np.full(shape, np.nan) for _ in range(3))
    for index in zip(*np.nonzero(np.isfinite(values[0]))):
        estimate = stats.bootstrap_mean(values[(slice(None),) + index])
        mean[index], low[index], high[index] = estimate["value"], estimate["low"], estimate["high"]
    return {"value": mean, "low": low, "high": high, "n": int(values.shape[0])}


def retrieval_model(lens: Lens, quick: bool, text: str | None, batch_size: int, progress: bool,
                    name: str, focus: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """The retrieval protocol on one model; None when the model does not retrieve (unedited accuracy
    below ``MIN_ACCURACY``: its edits would have nothing to break). ``focus``: (prompts per family,
    pairs per family) of the cheaper "focus" plan."""
    from repo_lens.data.retrieval_families import FAMILIES, moved_pairs
    from repo_lens.interventions import Interpolate

    per_family, n_pairs, sweep = (2, 1, QUICK_SWEEP) if quick else (50, 8, SWEEP)
    if focus is not None:
        per_family, n_pairs, sweep = focus[0], focus[1], SWEEP[:1]
    plan = "quick" if quick else "focus" if focus else "full"
    prompts = study_prompts(lens.tokenizer, lens.context_length, per_family, text)
    scorer = Scorer(lens, prompts, batch_size)
    if not quick and scorer(Interpolate(p=0.0))[0].mean() < MIN_ACCURACY:
        return None
    pairs = [pair for family in FAMILIES
             for pair in moved_pairs(lens.tokenizer, family, lens.context_length, n_pairs, seed=20_000, text=text)]
    return {"protocol": "retrieval", "layer_kinds": list(lens.model.cfg.layer_mechanisms),
            "context": lens.context_length, "prompts": len(prompts),
            "plan": plan, "ablations": ablation_study(lens, [prompt.meta["family"] for prompt in prompts], prompts[0].ids,
                                                      sweep, scorer, progress, name, plan),
            "patching": patching_study(lens, pairs, progress, name)}


def task_model(lens: Lens, task: str, quick: bool, batch_size: int, progress: bool, name: str) -> dict[str, Any]:
    """The protocol of :func:`retrieval_model` (every condition, its intervals and tests, head against
    head) on a task model, scored by its task (``position_interventions_tasks``); no patching (a task has
    no needle to move). The sequences are short, so at least 64 go through at once."""
    from repo_lens.studies.reproductions.position_interventions_tasks import TaskScorer, task_set

    tasks = task_set(lens, task, 2 if quick else (100 if task == "flipflop" else 40))
    scorer = TaskScorer(lens, tasks, max(batch_size, 64))
    probe = next(iter(tasks.families.values()))[0][0]
    ablations = ablation_study(lens, tasks.labels(), probe, QUICK_SWEEP if quick else SWEEP, scorer, progress, name,
                               "quick" if quick else "full")
    return {"protocol": "task", "task": task, "layer_kinds": list(lens.model.cfg.layer_mechanisms),
            "context": lens.context_length, "prompts": len(tasks), "plan": "quick" if quick else "full",
            "ablations": ablations, "patching": None}


def position_interventions_study(out: Path, models: list[str], quick: bool = False, figures: bool = True,
                                 progress: bool = True, batch_size: int = 8,
                                 focus: tuple[int, int] | None = None) -> dict[str, Any]:
    """Edits, controls and patching maps of each model (see the module docstring); writes results.json
    (after each model, so a long run keeps what it has), the tables and the figures into ``out``.
    ``focus=(prompts per family, pairs per family)``: the cheaper plan for a busy machine (all-layer
    edits and controls, each layer under five edits, heads only where their layer's edit breaks the
    task, the sweep at p = 0.05)."""
    import time

    from repo_lens.loading import load
    from repo_lens.studies.reproductions.position_interventions_lm import language_model
    from repo_lens.studies.reproductions.position_interventions_tasks import TASKS, trained_task

    results: dict[str, Any]
    result: dict[str, Any] | None
    started, results = time.perf_counter(), {}
    text = None if quick else held_out_text()
    settings = {"quick": quick, "focus": focus, "all_modes": list(ALL_MODES), "layer_modes": list(LAYER_MODES),
                "head_modes": list(HEAD_MODES), "sweep": list(QUICK_SWEEP if quick else SWEEP)}

    def document() -> dict[str, Any]:
        return {"study": "position_interventions", "settings": settings, "results": results,
                "seconds": round(time.perf_counter() - started, 1), "markdown": report.markdown(results)}

    for model in models:
        lens = load(model, device="cpu")
        model_started = time.perf_counter()
        task, result = trained_task(lens), None
        if task in TASKS:
            result = task_model(lens, task, quick, batch_size, progress, stem(model))
        else:
            result = retrieval_model(lens, quick, text, batch_size, progress, stem(model), focus) \
                if lens.context_length >= RETRIEVAL_CONTEXT else None
        if result is None:
            result = language_model(lens, quick, text, batch_size, progress, stem(model))
        result["seconds"] = round(time.perf_counter() - model_started, 1)
        results[model] = result
        if model != models[-1]:
            save_study(out, document())
    return save_study(out, document(), report.figures(results) if figures else None)
