"""The ``attention_sources`` study on language models (the SmolLM2-135M conversions, or any model not trained
on a task): which rotary bands carry the position part of the score, whether learned positions move it
between bands, and where the first token's attention comes from.

Windows of held-out Brown text (the zoo's held-out English documents) and a few layers spread over the
model, each window measured by the ``bands`` study's record (:func:`repo_lens.studies.band_items.band_record`,
the record of ``repo-lens analyze --study bands``): per head, each band's mean |term| of the position part
(the band's term less its term with every position equal) at the layer's own positions and at the integers
(the same queries and keys rotated there), the two parts' mean magnitudes, and the first token's attention
under the four patterns of :func:`repo_lens.analysis.score_decomposition`. Here each window's heads are pooled
per layer and the windows give the intervals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from repo_lens.interventions import stats

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.protocol import LensProtocol

WINDOWS, WINDOW_TOKENS, ROWS, LAYERS = 4, 256, 32, 4
QUICK = (1, 64, 8, 2)  # windows, tokens, rows, layers of --quick
QUARTERS = ("fastest quarter", "second quarter", "third quarter", "slowest quarter")
FIRST_TOKEN = {"actual": "sink_mass", "content": "sink_mass_content", "position": "sink_mass_position",
               "reference": "sink_mass_integer"}


def held_out_windows(lens: LensProtocol, count: int, length: int) -> list[list[int]]:
    """``count`` windows of ``length`` tokens from the zoo's held-out English documents, spread over them."""
    from repo_lens.data.bilingual import is_validation
    from repo_lens.data.brown import brown_documents

    text = "\n".join(document.text for document in brown_documents() if is_validation(document.name))
    span = 16 * length  # characters: enough for ``length`` tokens of any tokenizer
    windows = []
    for start in np.linspace(0, len(text) - span, count).astype(int):
        windows.append(lens.encode(text[start:start + span])[:length])
    return windows


def spread(count: int, first: int, last: int) -> list[int]:
    """``count`` integers evenly spread from ``first`` to ``last`` (fewer where the range is shorter).

    >>> spread(5, 0, 29), spread(3, 4, 5)
    ([0, 7, 14, 22, 29], [4, 5])
    """
    return sorted({int(round(value)) for value in np.linspace(first, last, count)})


def decomposed_at(lens: Lens, ids: list[int], layer: int, rows: list[int], positions: torch.Tensor,
                  heads: list[int] | None = None):
    """The decomposition of ``layer``'s ``heads`` (default all) with ``positions`` [token] written into its
    ``hook_pos`` for every head (a rotary layer: it rotates its queries and keys there)."""
    from repo_lens.analysis import score_decomposition

    def write(value: torch.Tensor, hook: Any) -> torch.Tensor:
        return positions.to(value.device, value.dtype).expand_as(value).clone()

    with lens.model.hooks(fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", write)]):
        return score_decomposition(lens, ids, layer, heads=heads, queries=rows, reference=None)


def window_values(record: dict[str, Any], index: int) -> dict[str, Any]:
    """One window and layer (``index`` in the record's layers), its heads pooled: the first token's attention
    under each pattern and the content part's share of its score magnitude (means over heads), the position
    part's share of the score magnitude, and the position part's profile over the bands at the layer's own
    positions and at the integers (each band's share of Σ_heads mean |position term|).

    >>> record = {"sink_mass": [[0.5, 0.3]], "sink_mass_content": [[0.4, 0.2]], "sink_mass_position": [[0.1, 0.1]],
    ...           "sink_mass_integer": [[0.5, 0.3]], "sink_content_share": [[0.9, None]],
    ...           "content_abs_mean": [[3.0, 1.0]], "position_abs_mean": [[1.0, 1.0]],
    ...           "position_band_abs_mean": [[[1.0, 0.0], [1.0, 2.0]]],
    ...           "position_band_abs_mean_integer": [[[1.0, 1.0], [1.0, 1.0]]], "band_frequencies": [[[1.0, 0.1]] * 2]}
    >>> values = window_values(record, 0)
    >>> values["first_token"]["actual"], values["sink_content_share"], values["position_share"], values["bands"]
    (0.4, 0.9, 0.3333333333333333, [0.5, 0.5])
    """
    def heads(name: str) -> np.ndarray:
        return np.asarray(record[name][index], dtype=np.float64)

    out: dict[str, Any] = {
        "first_token": {pattern: float(heads(name).mean()) for pattern, name in FIRST_TOKEN.items()},
        "sink_content_share": float(np.nanmean(heads("sink_content_share"))),
        "position_share": float(heads("position_abs_mean").sum()
                                / (heads("position_abs_mean").sum() + heads("content_abs_mean").sum()))}
    learned, integer = heads("position_band_abs_mean"), heads("position_band_abs_mean_integer")
    if learned.size:
        out["bands"] = (learned.sum(0) / learned.sum()).tolist()
        out["bands_integer"] = (integer.sum(0) / integer.sum()).tolist()
        out["wavelengths"] = (2 * np.pi / np.maximum(heads("band_frequencies").mean(0), 1e-12)).tolist()
    return out


def quarters(shares: np.ndarray) -> np.ndarray:
    """[..., band] shares summed over four equal groups of bands, fastest (band 0) to slowest.

    >>> quarters(np.arange(8.0)).tolist()
    [1.0, 5.0, 9.0, 13.0]
    """
    return np.stack([group.sum(-1) for group in np.array_split(shares, 4, axis=-1)], axis=-1)


def layer_summary(windows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Means over the windows (of :func:`window_values`) with their bootstrap intervals; the dominant band: the
    band with the largest mean share of the position part."""
    first = {name: stats.bootstrap_mean([window["first_token"][name] for window in windows])
             for name in FIRST_TOKEN}
    out: dict[str, Any] = {"kind": kind, "windows": len(windows), "first_token": first,
                           "sink_content_share": stats.bootstrap_mean([w["sink_content_share"] for w in windows]),
                           "position_share": stats.bootstrap_mean([w["position_share"] for w in windows])}
    if "bands" not in windows[0]:
        return out
    learned, integer = (np.array([window[key] for window in windows]) for key in ("bands", "bands_integer"))
    out.update(
        bands=learned.mean(0).tolist(), bands_integer=integer.mean(0).tolist(), wavelengths=windows[0]["wavelengths"],
        dominant_band=int(np.argmax(learned.mean(0))), dominant_band_integer=int(np.argmax(integer.mean(0))),
        quarters={name: stats.bootstrap_mean(quarters(learned)[:, index]) for index, name in enumerate(QUARTERS)},
        quarters_integer={name: stats.bootstrap_mean(quarters(integer)[:, index]) for index, name in enumerate(QUARTERS)},
        moved=stats.bootstrap_mean(0.5 * np.abs(learned - integer).sum(-1)))
    return out


def language_model(lens: Lens, quick: bool, progress: bool, name: str) -> dict[str, Any]:
    """Every sampled layer's summary over the windows (see the module description)."""
    from tqdm.auto import tqdm

    from repo_lens.studies.band_items import band_record

    n_windows, length, n_rows, n_layers = QUICK if quick else (WINDOWS, WINDOW_TOKENS, ROWS, LAYERS)
    length = min(length, lens.context_length)
    kinds = [str(kind) for kind in lens.model.cfg.layer_mechanisms]
    layers = spread(n_layers, 0, len(kinds) - 1)
    values: dict[int, list[dict[str, Any]]] = {layer: [] for layer in layers}
    rows: list[int] = []
    for ids in tqdm(held_out_windows(lens, n_windows, length), desc=f"bands {name}", disable=not progress):
        record = band_record(lens, ids, layers, n_rows)
        rows = record["query_rows"]
        for index, layer in enumerate(layers):
            values[layer].append(window_values(record, index))
    return {"protocol": "bands", "layer_kinds": kinds, "windows": n_windows, "window_tokens": length, "rows": rows,
            "layers": {str(layer): layer_summary(found, kinds[layer]) for layer, found in values.items()}}
