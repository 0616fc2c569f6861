"""Tables of a study: per-layer position summaries for the terminal, result records as CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np

from repo_lens.trace import Trace


def layer_summary(trace: Trace, per_head: bool = False) -> str:
    """One row per layer (or per layer and head): kind, min, max and range of the positions.

    Layer rows give the min/max over all heads and the smallest, mean and largest per-head range.

    >>> import numpy as np
    >>> t = Trace(tokens=["a", "b", "c"], token_ids=np.array([1, 2, 3]), layer_kinds=["rope"],
    ...           positions=np.array([[[0, 1, 2], [0, 1, 2]]], dtype=np.float32))
    >>> print(layer_summary(t))
    layer  kind        min       max  range min  range mean  range max
        0  rope      0.000     2.000      2.000       2.000      2.000
    """
    if per_head:
        with np.errstate(invalid="ignore"):
            lows, highs = np.nanmin(trace.positions, axis=2), np.nanmax(trace.positions, axis=2)
        ranges = highs - lows
        lines = [f"{'layer':>5}  {'head':>4}  {'kind':<5} {'min':>9} {'max':>9} {'range':>9}"]
        for layer, kind in enumerate(trace.layer_kinds):
            for head in range(trace.n_heads):
                lines.append(f"{layer:>5}  {head:>4}  {kind:<5} {lows[layer, head]:>9.3f} "
                             f"{highs[layer, head]:>9.3f} {ranges[layer, head]:>9.3f}")
        return "\n".join(lines)
    lines = [f"{'layer':>5}  {'kind':<5} {'min':>9} {'max':>9} {'range min':>10} {'range mean':>11} {'range max':>10}"]
    per_layer = trace.layer_ranges()
    for layer, kind in enumerate(trace.layer_kinds):
        lines.append(
            f"{layer:>5}  {kind:<5} {per_layer['min'][layer]:>9.3f} {per_layer['max'][layer]:>9.3f} "
            f"{per_layer['range_min'][layer]:>10.3f} {per_layer['range_mean'][layer]:>11.3f} "
            f"{per_layer['range_max'][layer]:>10.3f}"
        )
    return "\n".join(lines)


def records_to_csv(records: list[dict[str, Any]]) -> str:
    """Scalar fields as columns (nested dicts flattened with '.'); lists and arrays stay in the JSON.

    >>> print(records_to_csv([{"item": "a", "mass": {"needle": 0.5}, "by_layer": [1, 2]}, {"item": "b", "n": 3}]))
    item,mass.needle,n
    a,0.5,
    b,,3
    <BLANKLINE>
    """
    rows = [_flatten(record) for record in records]
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        elif isinstance(value, (str, int, float, bool)) or value is None:
            flat[name] = value
    return flat
