"""`repo-lens reproduce` and the analyses/ scripts: each study's invariants on the zoo models,
the helpers against hand-computed cases, and paper-sized vector export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repo_lens.studies.reproductions import STUDIES, reproduce
from repo_lens.studies.reproductions.case_study import correlation_ratio
from repo_lens.studies.reproductions.reversal import mirror_ratios

pytestmark = pytest.mark.study

ROOT = Path(__file__).resolve().parents[2]


def test_mirror_ratio_hand_cases():
    # tokens: 2 prompt tokens, inputs a b c at 2..4, 1 separator, outputs c b a at 6..8
    linear = np.arange(9.0)[None, None, :]
    assert mirror_ratios(linear, 2, 6, 3)[0, 0] == pytest.approx(1.0)  # linear positions: no mirror effect
    mirrored = np.array([0, 0, 1.0, 2.0, 3.0, 9.0, 3.0, 2.0, 1.0])[None, None, :]
    assert mirror_ratios(mirrored, 2, 6, 3)[0, 0] == 0.0  # each copy at its source's position
    assert np.isnan(mirror_ratios(np.zeros((1, 1, 9)), 2, 6, 3)[0, 0])  # constant head


def test_correlation_ratio_hand_cases():
    labels = np.array([0, 0, 1, 1])
    assert correlation_ratio(np.array([1.0, 1.0, 5.0, 5.0]), labels) == pytest.approx(1.0)
    assert correlation_ratio(np.array([1.0, 5.0, 1.0, 5.0]), labels) == pytest.approx(0.0)
    assert correlation_ratio(np.array([0.0, 2.0, 4.0, 6.0]), labels) == pytest.approx(16 / 20)


def test_rope_ranges_are_the_length_and_reversal_rope_does_not_mirror(tmp_path):
    ranges = STUDIES["range_stats"].load()(tmp_path / "ranges", ["zoo:bytes-rope"], quick=True, figures=False,
                                            progress=False)
    for length, row in ranges["results"]["zoo:bytes-rope"]["lengths"].items():
        np.testing.assert_allclose(row["d_by_layer_head"], int(length) - 1)
    mirror = STUDIES["reversal_mirror"].load()(tmp_path / "mirror", ["zoo:reversal-rope", "zoo:reversal-repo"],
                                              quick=True, figures=False, progress=False)
    np.testing.assert_allclose(mirror["results"]["zoo:reversal-rope"]["mean_by_layer"], 1.0, atol=1e-6)
    # the shipped RePo reversal model mirrors in its last layer (RePo App. C sees it in layers 0, 2, 3)
    assert mirror["results"]["zoo:reversal-repo"]["mean_by_layer"][3] < 0.5
    saved = json.loads((tmp_path / "mirror" / "results.json").read_text())
    assert saved["markdown"] == mirror["markdown"]


def test_attention_mass_study_writes_json_table_and_vector_figures(tmp_path):
    document = STUDIES["attention_mass"].load()(tmp_path, ["zoo:bytes-rope", "zoo:bytes-fox"], quick=True,
                                                progress=False)
    for model in ("zoo:bytes-rope", "zoo:bytes-fox"):
        row = document["results"][model]["per_token"]
        assert all(0 < row[span] < 1 for span in ("needle", "query", "rest"))
        assert len(document["results"][model]["cells"]) == 3
    assert (tmp_path / "table4_attention_mass.pdf").read_bytes()[:4] == b"%PDF"
    assert (tmp_path / "table4_attention_mass.svg").read_text().lstrip().startswith("<svg")
    assert "| zoo:bytes-fox, 512 tokens (beyond context) |" in (tmp_path / "table.md").read_text()


def _numbers(value, path=""):
    """Every number in a JSON document, keyed by where it sits."""
    if isinstance(value, dict):
        return {key: number for name, item in value.items() if name != "seconds"
                for key, number in _numbers(item, f"{path}/{name}").items()}
    if isinstance(value, list):
        return {key: number for index, item in enumerate(value) for key, number in _numbers(item, f"{path}/{index}").items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {path: float(value)}
    return {}


def test_reproduce_in_batches_gives_the_numbers_of_one_at_a_time(tmp_path):
    names = ["range_stats", "attention_mass"]
    documents = {}
    for batch_size in (1, 3):
        reproduce(names, tmp_path / str(batch_size), models=["zoo:bytes-repo"], quick=True, figures=False,
                  progress=False, batch_size=batch_size)
        documents[batch_size] = {name: json.loads((tmp_path / str(batch_size) / name / "results.json").read_text())
                                 for name in names}
    for name in names:
        one, batched = _numbers(documents[1][name]), _numbers(documents[3][name])
        assert one.keys() == batched.keys() and len(one) > 20
        for key, number in one.items():
            assert batched[key] == pytest.approx(number, abs=1e-5), (name, key)
    # the learned RePo layers do move their positions, so the comparison is not of constants
    lengths = documents[1]["range_stats"]["results"]["zoo:bytes-repo"]["lengths"]
    assert all(row["n_texts"] > 1 and 0 < row["mean_d"] for row in lengths.values())
    mirror = STUDIES["reversal_mirror"].load()
    one, batched = (_numbers(mirror(tmp_path / f"mirror{size}", ["zoo:reversal-repo"], quick=True, figures=False,
                                    progress=False, batch_size=size)) for size in (1, 4))
    assert one.keys() == batched.keys()
    assert all(batched[key] == pytest.approx(number, abs=1e-5) for key, number in one.items())
    with pytest.raises(Exception, match="batch_size must be a positive integer"):
        reproduce(names, tmp_path / "0", models=["zoo:bytes-repo"], quick=True, figures=False, progress=False,
                  batch_size=0)


def test_flipflop_study_matches_the_cards_at_the_training_length(tmp_path):
    """The card's error is 0 on its 1,000 test sequences at 128 tokens, so it is 0 on the study's first 40 of
    them too (tests/zoo/test_zoo.py checks the cards on all 1,000)."""
    import repo_lens

    document = STUDIES["flipflop"].load()(tmp_path, ["zoo:flipflop-cope"], sequences=40, progress=False)
    rows = document["results"]["zoo:flipflop-cope"]["by_length"]
    assert list(rows) == ["128", "256", "512"] and document["settings"]["test_sequences"] == 40
    card = repo_lens.load("zoo:flipflop-cope", device="cpu").meta["info"]["metrics"]
    assert card["error_in_distribution"] == 0.0 and rows["128"]["error_in_distribution"] == 0.0
    assert all(0.0 <= row[key] <= 1.0 for row in rows.values() for key in row)


def test_reproduce_command_lists_and_refuses_unknown_results(tmp_path):
    with pytest.raises(Exception, match="unknown result"):
        reproduce(["fig99"], tmp_path, progress=False)
    listed = subprocess.run([sys.executable, "-m", "repo_lens.cli", "reproduce", "--list"], check=True,
                            capture_output=True, text=True).stdout
    assert all(name in listed for name in STUDIES)
    bad = subprocess.run([sys.executable, "-m", "repo_lens.cli", "reproduce", "fig99", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown result ['fig99']" in bad.stderr and "Traceback" not in bad.stderr


def test_analyses_script_runs_a_study(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "analyses" / "case_study.py"), "--out", str(tmp_path),
                           "--model", "zoo:bytes-repo", "--quick", "--no-figures", "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "results.json").read_text())["results"]["zoo:bytes-repo"]
    assert result["learned_heads"] == 16  # 4 RePo layers x 4 heads
    assert "| zoo:bytes-repo |" in done.stdout


def test_case_study_reports_a_model_without_learned_positions_instead_of_failing(tmp_path):
    document = STUDIES["case_study"].load()(tmp_path, ["zoo:bytes-rope", "zoo:bytes-repo"], quick=True,
                                            figures=False, progress=False)
    rope = document["results"]["zoo:bytes-rope"]
    assert rope["learned_heads"] == 0 and rope["negative_share"] is None
    assert "| zoo:bytes-rope | no learned positions (layers: rope) | — | — |" in document["markdown"]
    assert document["results"]["zoo:bytes-repo"]["learned_heads"] == 16


def test_paper_layouts_set_the_physical_size(tmp_path):
    import plotly.graph_objects as go
    import pymupdf

    from repo_lens.plots import export

    fig = go.Figure(go.Bar(y=[1, 2]))
    pdf = export(fig, tmp_path / "one_column.pdf", layout="one-column").read_bytes()
    with pymupdf.open(stream=pdf, filetype="pdf") as document:
        width = document[0].rect.width  # points, read from the page as a PDF viewer does
    assert width == pytest.approx(3.25 * 72, abs=0.5)
    from repo_lens.errors import InputError

    with pytest.raises(InputError, match="unknown paper layout 'poster'"):
        export(fig, tmp_path / "x.pdf", layout="poster")


def test_niah_accuracy_study_matches_the_cards_in_context_and_refuses_other_models(tmp_path):
    """The study scores the cards' own held-out prompts: at 1,024 and 2,048 bytes it must give the
    shipped niah_* metrics exactly (bytes1k-rope's run from 0.25 to 1.00, so a wrong cell shows); a
    model not trained on the retrieval mixture is refused by name."""
    import repo_lens
    from repo_lens.errors import InputError

    document = STUDIES["niah_accuracy"].load()(tmp_path, ["zoo:bytes1k-rope"], quick=False, figures=False,
                                               progress=False, batch_size=4)
    cells = document["results"]["zoo:bytes1k-rope"]["cells"]
    assert list(cells) == ["512", "1024", "2048", "4096", "essay 1024", "4 keys 1024"]
    card = repo_lens.load("zoo:bytes1k-rope", device="cpu").meta["info"]["metrics"]
    for label, metric in (("512", "niah_512"), ("1024", "niah_1024"), ("2048", "niah_2048"),
                          ("essay 1024", "niah_essay_1024"), ("4 keys 1024", "niah_multikey4_1024")):
        assert cells[label]["accuracy"] == pytest.approx(card[metric], abs=1e-9), label
    assert [cells[label]["in_context"] for label in ("1024", "2048")] == [True, False]
    assert "| zoo:bytes1k-rope |" in (tmp_path / "table.md").read_text()
    with pytest.raises(InputError, match="not trained on the retrieval mixture"):
        STUDIES["niah_accuracy"].load()(tmp_path / "other", ["zoo:bytes-repo"], quick=True, figures=False,
                                        progress=False)


def test_niah_table_keeps_each_models_cells_in_their_own_columns():
    """Models of different contexts have different cells: the table's columns are the union (noise
    lengths ascending, then the rest), and a cell a model lacks is "–", so no value shifts column."""
    from repo_lens.studies.reproductions.retrieval import accuracy_table, settings_for

    def cells(context: int, accuracy: float) -> dict:
        return {label: {"length": length, "haystack": haystack, "keys": keys, "accuracy": accuracy}
                for label, length, haystack, keys in settings_for(context)}

    table = accuracy_table({"short": {"cells": cells(512, 0.25)}, "long": {"cells": cells(1024, 0.5)}})
    header, _, short, long = table.splitlines()
    columns = [part.strip() for part in header.strip("|").split("|")][1:]
    assert columns == ["512", "1024", "2048", "4096", "essay 512", "4 keys 512", "essay 1024", "4 keys 1024"]
    row = lambda line: [part.strip() for part in line.strip("|").split("|")][1:]
    assert row(short) == ["0.25", "0.25", "0.25", "–", "0.25", "0.25", "–", "–"]
    assert row(long) == ["0.50", "0.50", "0.50", "0.50", "–", "–", "0.50", "0.50"]


def test_the_docs_list_each_studys_default_models():
    """The documentation's table of `repo-lens reproduce` results (docs/guide/reproductions.md) names the
    models each study runs by default."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "reproductions.md").read_text()
    table = page.split("| NAME | result | default models |", 1)[1].split("\n\n", 1)[0].splitlines()
    for name, study in STUDIES.items():
        [row] = [line for line in table if line.startswith(f"| `{name}` |")]
        listed = row.rstrip(" |").rsplit("|", 1)[1]
        if listed.strip() == "every byte model":
            assert all(model.startswith("zoo:bytes") for model in study.default_models)
            continue
        expanded, family = [], ""
        for part in (part.strip() for part in listed.split(",")):
            family = part.rsplit("-", 1)[0] if not part.startswith("-") else family
            expanded.append(family + part if part.startswith("-") else part)
        assert sorted(expanded) == sorted(model.removeprefix("zoo:") for model in study.default_models), name


def test_each_studys_default_models_are_in_the_zoo():
    """A study runs by default only on models the zoo has: a shipped folder (config.json or recipe.json) or an
    external model. Stored results under analyses/results/ may still hold models no longer shipped."""
    from repo_lens.zoo import ZOO_DIR
    from repo_lens.zoo.external import EXTERNAL_MODELS

    shipped = {path.name for path in ZOO_DIR.iterdir()
               if (path / "config.json").is_file() or (path / "recipe.json").is_file()}
    for name, study in STUDIES.items():
        assert study.default_models, name
        for model in study.default_models:
            assert model.startswith("zoo:"), (name, model)
            assert model.removeprefix("zoo:") in shipped | set(EXTERNAL_MODELS), (name, model)


def test_variance_shares_script_tells_running_sums_from_repo_positions():
    """analyses/variance_shares.py on two zoo models: the learned increments' positions are running sums,
    so the token index explains all of each head's variance; the 256-byte RePo's follow no trend; in every
    row the shares' means add up to 1."""
    import re

    done = subprocess.run([sys.executable, str(ROOT / "analyses" / "variance_shares.py"), "--model", "bytes-post-lpi",
                           "--model", "zoo:bytes-repo"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    blocks = dict(re.findall(r"^(bytes-\S+) \(.*?\n\n(.*?)(?:\n\n|\Z)", done.stdout, flags=re.S | re.M))
    assert set(blocks) == {"bytes-post-lpi", "bytes-repo"}, done.stdout
    for name, table in blocks.items():
        rows = [line for line in table.splitlines() if line.startswith("| L")]
        assert rows, table
        for row in rows:
            means = [float(cell.split()[0]) for cell in row.strip("|").split("|")[1:]]
            assert abs(sum(means) - 1) <= 0.02, row
            assert (means[0] >= 0.95) if name == "bytes-post-lpi" else (means[0] <= 0.01), row


def test_case_study_reads_boundaries_from_subword_tokens_too():
    """A subword token that is only space or punctuation is a boundary; a word with its leading space is not."""
    from types import SimpleNamespace

    from repo_lens.studies.reproductions.case_study import boundary_tokens

    vocab = ["Hello", "Ġworld", ",", "Ċ", "Ġ", "ĠA", ":"]
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda ids: [vocab[i] for i in ids])
    assert boundary_tokens(tokenizer, range(len(vocab))).tolist() == [False, False, True, True, True, False, True]
