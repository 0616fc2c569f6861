"""The built-in studies of ``repo-lens analyze`` (:mod:`repo_lens.studies.registry` starts with them).

Their records and summaries live in :mod:`repo_lens.studies.items` (the ``bands`` study's in
:mod:`repo_lens.studies.band_items`), imported when a study runs (so that building the command line's help
loads no model code).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from repo_lens.errors import InputError
from repo_lens.protocol import LensProtocol
from repo_lens.studies.study import Option, Study

MAX_PROMPT_TOKENS = 2**21  # --lengths: far beyond any context; a longer prompt would take hours to build
SEED_MAX = 2**32 - 1  # what every generator a seed reaches accepts (numpy's legacy one is the narrowest)


def _items() -> ModuleType:
    from repo_lens.studies import items

    return items


def _niah_cells(lens: LensProtocol, options: dict[str, Any]) -> list[dict[str, Any]]:
    """The NIAH sweep's cells, lengths × depths × seeds; a length beyond the context needs ``beyond_context``."""
    context = lens.context_length
    too_long = [length for length in options["lengths"] if context and length > context]
    if too_long and not options["beyond_context"]:
        raise InputError(f"--lengths {too_long[0]} is longer than the model's context of {context}; use lengths "
                         f"up to {context}, or pass --beyond-context to measure extrapolation")
    return [{"length": length, "depth": depth, "seed": seed} for length in options["lengths"]
            for depth in options["depths"] for seed in options["seeds"]]


def _niah_records(lens: LensProtocol, cells: list[dict[str, Any]], options: dict[str, Any]) -> list[dict[str, Any]]:
    triples = [(cell["length"], cell["depth"], cell["seed"]) for cell in cells]
    return _items().niah_records(lens, triples, options["beyond_context"], batch_size=len(cells))


NIAH = Study(
    "niah", "attention mass sweep over RULER niah_single prompts (RePo Table 4)",
    record=_niah_records, summary=lambda records, options: _items().summarize_niah(records, options),
    items=_niah_cells,
    options=(Option("lengths", [256, 512], "niah: prompt lengths in tokens", int, many=True, low=1,
                    high=MAX_PROMPT_TOKENS, example="256,512"),
             Option("depths", [0.0, 0.25, 0.5, 0.75, 1.0], "niah: needle depths, each within [0, 1]", float,
                    many=True, low=0, high=1, example="0,0.5,1"),
             Option("seeds", [0], "niah: seeds", int, many=True, low=0, high=SEED_MAX, example="0,1,2")),
    inputs_help="NIAH prompts at `--lengths` × `--depths` × `--seeds`",
    records_help="attention mass per token on needle, query and the rest (RePo Table 4)", shard_size=8)

POSITIONS = Study(
    "positions", "position ranges (RePo Fig. 2) and chunk patterns (Fig. 3) per layer and head",
    record=lambda lens, windows, options: _items().position_window_records(lens, windows, options),
    summary=lambda records, options: _items().summarize_positions(records, options),
    options=(Option("chunk", 16, "positions: tokens per chunk of the chunk patterns", int, low=2),
             Option("eps", 0.2, "positions: a chunk is constant when every position is within eps of its mean",
                    float, low=0)),
    default_corpus="brown", inputs_help="windows of `--corpus` documents (default: the Brown corpus)",
    records_help="range of positions per layer and head; constant / mono / hybrid chunk shares per layer")

BOUNDARIES = Study(
    "boundaries", "Chinese word-boundary AUC of position increments (the learned-increments post), gold and jieba",
    record=lambda lens, windows, options: _items().boundary_window_records(lens, windows, options),
    summary=lambda records, options: _items().summarize_boundaries(records, options),
    default_corpus="peoples-daily",
    inputs_help="windows of `--corpus` documents (default: People's Daily, gold-segmented)",
    records_help="increments at the scored CJK gaps with jieba's (and the gold) word-boundary labels; pooled AUC")


def _band_items() -> ModuleType:
    from repo_lens.studies import band_items

    return band_items


BANDS = Study(
    "bands", "which rotary frequency band carries each head's position signal (learned vs integer positions) and "
    "the attention sink",
    record=lambda lens, windows, options: _band_items().band_window_records(lens, windows, options),
    summary=lambda records, options: _band_items().summarize_bands(records, options),
    figures=lambda summary, options: _band_items().band_figures(summary, options),
    options=(Option("query_rows", 32, "bands: query rows per window, evenly spaced (each scored against every key "
                    "up to it)", int, low=1),
             Option("layers", [], "bands: the layers to measure (empty: every layer)", int, many=True, low=0,
                    example="0,5,11")),
    default_corpus="brown", inputs_help="windows of `--corpus` documents (default: the Brown corpus)",
    records_help="per layer and head: each rotary band's share of the score and of its position part at the actual "
                 "and at integer positions, the dominant position band; the first token's attention (sink) and its "
                 "content and position parts")

BUILTIN_STUDIES = (NIAH, POSITIONS, BOUNDARIES, BANDS)
