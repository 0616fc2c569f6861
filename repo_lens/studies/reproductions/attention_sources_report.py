"""Tables and figures of the ``attention_sources`` study (from its results, nothing recomputed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from repo_lens.interventions.stats import interval_text
from repo_lens.studies.reproductions.common import stem

PATTERN_LABELS = {"mass_actual": "actual", "mass_content": "content only", "mass_position": "position only",
                  "mass_reference": "integer positions"}


def _p(value: float) -> str:
    """A p-value for a table.

    >>> _p(0.0312), _p(2.3e-12)
    ('0.031', '2·10⁻¹²')
    """
    if value >= 0.001:
        return f"{value:.3f}".rstrip("0").rstrip(".") if value < 1 else "1"
    exponent = int(np.floor(np.log10(value)))
    if round(value / 10**exponent) >= 10:
        exponent += 1
    digits = str(exponent).replace("-", "⁻").translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{round(value / 10**exponent):d}·10{digits}"


def _signed(estimate: dict[str, float]) -> str:
    return f"{estimate['value']:+.2f} [{estimate['low']:+.2f}, {estimate['high']:+.2f}]"


def _pair(row: dict[str, Any], learned: str, integer: str) -> str:
    """``learned / integer`` means of a head's row, "–" where a measure does not apply."""
    return " / ".join(f"{row[key]['value']:.2f}" if key in row else "–" for key in (learned, integer))


def _lead(row: dict[str, Any]) -> str:
    return _signed(row["lead_position_integer"]) if "lead_position_integer" in row else "–"


def _range(row: dict[str, Any]) -> str:
    learned = f"{row['range_learned']['value']:.1f}" if "range_learned" in row else "–"
    return f"{learned} / {row['range_integer']['value']:.0f}"


def head_table(result: dict[str, Any]) -> list[str]:
    """One row per picked head: its attention on the targets under each pattern, actual − integer, the targets'
    lead in the score by part, the position part's share of the score, and where the positions put the targets."""
    lines = ["| head | " + " | ".join(PATTERN_LABELS.values()) + " | actual − integer, p | lead: content | "
             "lead: position, learned / integer | position's share of the score: learned / integer | keys closer than the target: "
             "learned / integer | positions' range: learned / integer |", "|---|" + "---|" * 10]
    for head, row in result["heads"].items():
        paired = row["actual_vs_integer"]
        lines.append(f"| {head} | " + " | ".join(interval_text(row[key]) for key in PATTERN_LABELS) +
                     f" | {_signed(paired['difference'])}, {_p(paired['p'])} | {_signed(row['lead_content'])} | "
                     f"{_signed(row['lead_position'])} / {_lead(row)} | {_pair(row, 'share_learned', 'share_integer')} | "
                     f"{_pair(row, 'closer_learned', 'closer_integer')} | {_range(row)} |")
    return lines


def causal_table(result: dict[str, Any]) -> list[str]:
    lines = ["| edit | " + result["score"] + " | Δ vs unedited, McNemar p | mean log p |", "|---|---|---|---|"]
    for entry in result["causal"]:
        where = "" if entry["layer"] is None else f" (layer {entry['layer']}" + (
            "" if entry["heads"] is None else ", heads " + ", ".join(map(str, entry["heads"]))) + ")"
        change = "–"
        if "vs_unedited" in entry:
            test = entry["vs_unedited"]["accuracy"]
            change = f"{_signed(test['difference'])}, {_p(test['p'])}"
        lines.append(f"| {entry['edit']}{where} | {interval_text(entry['accuracy'])} | {change} | "
                     f"{interval_text(entry['logprob'])} |")
    return lines


def task_markdown(model: str, result: dict[str, Any]) -> list[str]:
    chosen = ", ".join(f"{head} {result['selection_mass'][head]:.2f}" for head in result["picked"])
    how = ("mean actual mass on the target ≥ 0.3 and ≥ half the best head's" if result["picked_by_threshold"]
           else "no head reached 0.3: the best head alone")
    return [f"**{model}** ({result['protocol']}; target: {result['target']}; {result['inputs']} inputs). Heads picked "
            f"on {result['selection_inputs']} other inputs ({how}): {chosen}.", "", *head_table(result), "",
            *causal_table(result), "",
            f"Integer reference against the pattern of the edited forward (one input): largest difference "
            f"{result['reference_vs_ablated_max_abs']:.1e}.", ""]


def lm_table(results: dict[str, Any]) -> list[str]:
    """One row per language model and sampled layer (means over the windows)."""
    quarters = "fastest / 2nd / 3rd / slowest quarter of bands"
    lines = ["| model | layer | position's share of the score | position part by band, "
             f"{quarters}: learned | integer | main band: learned / integer | moved | first token's attention: "
             "actual / content only / position only / integer | content's share of the first token's score |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, result in results.items():
        for layer, row in result["layers"].items():
            first = row["first_token"]
            masses = " / ".join(f"{first[key]['value']:.2f}" for key in ("actual", "content", "position", "reference"))
            bands = integer = main = moved = "–"
            if "quarters" in row:
                bands = " / ".join(f"{estimate['value']:.2f}" for estimate in row["quarters"].values())
                integer = " / ".join(f"{estimate['value']:.2f}" for estimate in row["quarters_integer"].values())
                main = f"{row['dominant_band']} / {row['dominant_band_integer']}"
                moved = interval_text(row["moved"])
            lines.append(f"| {model} | L{layer} {row['kind']} | {interval_text(row['position_share'])} | {bands} | "
                         f"{integer} | {main} | {moved} | {masses} | {interval_text(row['sink_content_share'])} |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The study's tables: each task model's heads and causal checks, then the language models' bands."""
    lines: list[str] = []
    for model, result in results.items():
        if result["protocol"] != "bands":
            lines += task_markdown(model, result)
    language = {model: result for model, result in results.items() if result["protocol"] == "bands"}
    if language:
        lines += [f"Language models ({next(iter(language.values()))['windows']} windows of held-out text; means over "
                  "windows, intervals in results.json):", "", *lm_table(language)]
    return "\n".join(lines).strip()


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """Per task model, the picked heads' attention on the targets under each pattern; per language model, the
    position part's band shares at the learned positions and at the integers (mean over the sampled learned
    layers, or over every sampled layer of a model without learned positions)."""
    import plotly.graph_objects as go

    from repo_lens.model.registry import is_learned
    from repo_lens.plots import interval_figure
    from repo_lens.plots.style import series_style, styled

    out: dict[str, Any] = {}
    for model, result in results.items():
        if result["protocol"] != "bands":
            heads = list(result["heads"])
            out[f"sources_{stem(model)}"] = interval_figure(
                {label: [result["heads"][head][key] for head in heads] for key, label in PATTERN_LABELS.items()},
                heads, f"attention on {result['target']}", f"{model}: what makes the attention on the target")
            continue
        rotary = {layer: row for layer, row in result["layers"].items() if "bands" in row}
        learned = {layer: row for layer, row in rotary.items() if is_learned(row["kind"])}
        chosen = learned or rotary  # the learned layers; a model without any: every layer with bands
        if not chosen:
            continue
        layers = list(chosen.values())
        figure = go.Figure()
        for index, key in enumerate(("bands", "bands_integer")):
            look = series_style(index)
            figure.add_scatter(y=np.mean([row[key] for row in layers], axis=0).tolist(), mode="lines+markers",
                               name="learned positions" if key == "bands" else "integer positions",
                               line=dict(color=look["color"], dash=look["dash"]), marker_symbol=look["symbol"])
        figure.update_layout(xaxis_title="band (0: fastest rotation)", yaxis_title="share of the position part")
        out[f"bands_{stem(model)}"] = styled(figure, f"{model}: which bands carry the position part (mean of layers "
                                                      f"{', '.join(chosen)})")
    return out
