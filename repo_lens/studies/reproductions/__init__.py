"""One command per result of the sources, on the zoo models or your own checkpoint.

``repo-lens reproduce NAME|all --out DIR`` (or ``python analyses/NAME.py --out DIR``) writes, per
study, ``DIR/NAME/results.json``, a Markdown table and vector PDF + SVG figures sized for a
two-column paper. ``--model`` replaces the study's default models. Every study is a function
``study(out, models, quick=False, figures=True, progress=True) -> dict`` (the JSON document);
the studies that trace or measure many inputs also take ``batch_size`` (inputs per forward pass,
the same numbers within 1e-5).

Under ``torchrun`` / ``accelerate launch`` the ranks share the results (whole studies, in the
order asked) through :func:`repo_lens.studies.resumable.run_items` in ``DIR/distributed_run/`` (one JSON
document per finished result there): a relaunch after a killed rank reruns only the unfinished ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from repo_lens.errors import InputError
from repo_lens.inputs import check_batch_size
from repo_lens.run_lock import run_lock
from repo_lens.studies.distributed import ranks_from_env
from repo_lens.studies.reproductions import common
from repo_lens.studies.resumable import run_items


@dataclass(frozen=True)
class Study:
    """A reproduced result: its name, its source, where its function lives, the models it runs on by default."""

    name: str
    source: str
    module: str
    function: str
    default_models: tuple[str, ...]
    batched: bool = False  # the study function takes ``batch_size``

    def load(self) -> Callable[..., dict[str, Any]]:
        import importlib

        return getattr(importlib.import_module(f"repo_lens.studies.reproductions.{self.module}"), self.function)


STUDIES: dict[str, Study] = {study.name: study for study in (
    Study("range_stats", "RePo Fig. 2: ranges of assigned positions", "positions", "range_study",
          ("zoo:bytes-repo", "zoo:bytes-fox", "zoo:bytes-rope", "zoo:bytes1k-repo", "zoo:bytes1k-rope",
           "zoo:bytes1k-lpi"), batched=True),
    Study("pattern_fractions", "RePo Fig. 3: constant / mono / hybrid chunks", "positions", "pattern_study",
          ("zoo:bytes-repo", "zoo:bytes-fox", "zoo:bytes1k-repo", "zoo:bytes1k-lpi"), batched=True),
    Study("attention_mass", "RePo Table 4: NIAH attention mass", "attention", "attention_study",
          ("zoo:bytes-rope", "zoo:bytes-nope", "zoo:bytes-repo", "zoo:bytes-fox", "zoo:bytes-cope",
           "zoo:bytes1k-rope", "zoo:bytes1k-nope", "zoo:bytes1k-repo", "zoo:bytes1k-lpi"), batched=True),
    Study("niah_accuracy", "retrieval models: NIAH accuracy in and beyond the context", "retrieval", "niah_accuracy_study",
          ("zoo:bytes1k-rope", "zoo:bytes1k-nope", "zoo:bytes1k-repo", "zoo:bytes1k-lpi"), batched=True),
    Study("reversal_mirror", "RePo App. C Fig. 6: mirror effect", "reversal", "reversal_study",
          ("zoo:reversal-repo", "zoo:reversal-rope", "zoo:reversal-nope"), batched=True),
    Study("case_study", "RePo App. D Fig. 8: case-study positions", "case_study", "fewshot_study",
          ("zoo:bytes-repo", "zoo:bytes1k-repo", "zoo:bytes1k-lpi")),
    Study("increment_findings", "the learned-increments post: increments by category, word boundaries, entities",
          "increment_findings", "increment_findings_study", ("zoo:bytes-post-lpi", "zoo:bytes-post-lpi-resid")),
    Study("increment_post_scripts", "the learned-increments post's byte-model scripts: byte table, Chinese "
          "word-boundary AUC in 512-byte windows, 79 entities x 5 carriers, character spacing",
          "post_analyses", "post_scripts_study", ("zoo:bytes-post-lpi", "zoo:bytes-post-lpi-resid")),
    Study("increment_post_by_step", "the learned-increments post's findings along training: each snapshot of a "
          "run (or a checkpoint) reduced to the post's findings, beside the post and its rerun", "post_by_step",
          "post_findings_by_step", ("zoo:bytes-post-lpi-resid",)),
    Study("increment_post_vocabulary", "the learned-increments post's delta-graft vocabulary table and relative drift",
          "post_vocabulary", "post_vocabulary_study", ("zoo:smollm2-135m-graft", "zoo:smollm2-135m-lpi")),
    Study("flipflop", "CoPE Table 2: Flip-Flop errors", "flipflop", "flipflop_study",
          ("zoo:flipflop-rope", "zoo:flipflop-cope")),
    Study("position_interventions", "causal studies: edits of learned positions on and off their own scale, "
          "controls, intervals and span-restricted patching",
          "position_interventions", "position_interventions_study",
          ("zoo:bytes1k-repo", "zoo:bytes1k-rope", "zoo:bytes1k-lpi", "zoo:bytes-repo", "zoo:bytes-fox",
           "zoo:bytes-cope", "zoo:flipflop-cope", "zoo:flipflop-grape-m", "zoo:flipflop-rope",
           "zoo:reversal-repo", "zoo:reversal-rope"),
          batched=True),
    Study("attention_sources", "why a head attends where it does: content or learned position (score "
          "decomposition), each answer with its causal check", "attention_sources", "attention_sources_study",
          ("zoo:bytes1k-repo", "zoo:reversal-repo", "zoo:flipflop-cope", "zoo:smollm2-135m", "zoo:smollm2-135m-grape",
           "zoo:smollm2-135m-lpi", "zoo:smollm2-135m-repo"), batched=True),
)}


DISTRIBUTED_RUN = "distributed_run"


def reproduce(names: Sequence[str], out: str | Path, models: Sequence[str] | None = None, quick: bool = False,
              figures: bool = True, progress: bool = True, batch_size: int = 1,
              figure_options: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Run the named studies (``["all"]`` for every one) into ``out/NAME/``; returns their documents.
    ``batch_size`` inputs go through each forward pass in the studies that batch (same numbers).
    ``figure_options``: how the figures are exported (:func:`repo_lens.plots.export`'s ``layout``,
    ``aspect``, ``font_pt`` and ``font``; default two-column, 8-point sans).

    Example:
        >>> {"attention_mass", "case_study", "flipflop"} <= set(STUDIES)
        True
    """
    chosen = list(STUDIES) if list(names) == ["all"] else list(names)
    unknown = [name for name in chosen if name not in STUDIES]
    if unknown:
        raise InputError(f"unknown result {unknown}; choose from: all, {', '.join(STUDIES)}")
    batch_size = check_batch_size(batch_size)
    with common.figure_options(figure_options):  # checked before any study runs
        return _reproduce(chosen, Path(out), models, quick, figures, progress, batch_size)


def _reproduce(chosen: list[str], out: Path, models: Sequence[str] | None, quick: bool, figures: bool, progress: bool,
               batch_size: int) -> dict[str, dict[str, Any]]:
    run = partial(_run_study, out=Path(out), models=models, quick=quick, figures=figures, progress=progress,
                  batch_size=batch_size)
    with run_lock(out):  # one writer per output directory; a second `reproduce` into it is refused
        if ranks_from_env().distributed:  # torchrun / accelerate launch: whole results shared among the ranks
            settings = {"results": chosen, "models": list(models) if models else None, "quick": quick,
                        "figures": figures}
            records = run_items(Path(out) / DISTRIBUTED_RUN, [(name, partial(run, name)) for name in chosen],
                                settings, progress=progress, desc="reproduce")
            return {record.pop("item"): record for record in records}
        documents = {}
        bar = tqdm(chosen, desc="reproduce", unit="result", disable=not progress)
        for name in bar:
            bar.set_postfix_str(name)
            documents[name] = run(name)
    return documents


def _run_study(name: str, out: Path, models: Sequence[str] | None, quick: bool, figures: bool, progress: bool,
               batch_size: int) -> dict[str, Any]:
    study = STUDIES[name]
    started = time.perf_counter()
    batching = {"batch_size": batch_size} if study.batched else {}
    document = study.load()(out / name, list(models or study.default_models), quick=quick, figures=figures,
                            progress=progress, **batching)
    document["seconds"] = round(time.perf_counter() - started, 1)
    return document
