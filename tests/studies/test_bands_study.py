"""The bands study (repo_lens.studies.band_items, `repo-lens analyze --study bands`): its records against a brute
force written here from the model's own hooks (q and k at position 0 through the layer's qk-norm, hook_pos and an
explicit 2 × 2 rotation per band at the layer's positions and at the integers; the bias from hook_attn_scores;
the sink from hook_pattern and from the pattern of a forward whose positions interventions.ablate set to the
integers), the pooled summary against the same brute force over two windows, resume after a failed shard, bad
options named, and the command line with its figure."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.registry import mechanism_kinds, mechanism_traits
from repo_lens.model.attention import apply_rotary, rotary_cos_sin
from repo_lens.model.tiny import tiny_model
from repo_lens.studies import shards
from repo_lens.studies.band_items import _decomposed, band_record, sampled_query_rows, summarize_bands
from repo_lens.studies.builtin import BANDS, BUILTIN_STUDIES
from repo_lens.data.windows import WindowSpec
from repo_lens.studies.runner import RunOptions, analyze

TOLERANCE = dict(rtol=1e-6, atol=1e-6)  # float64 models whose rotation angles are float32
WINDOWS = ([5, 9, 2, 33, 4, 4, 80, 1, 7, 19, 26, 3, 61, 62, 8, 8, 100, 3, 7, 40, 41, 9, 11, 2],
           [70, 71, 72, 3, 3, 3, 9, 10, 120, 121, 5, 6, 7, 8, 9])
QUERY_ROWS = 5
HAVE_CHROMIUM = any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))


def _perturbed(model):
    """Every position module moved off its initialisation (so that RePo's z vary from token to token)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for block in model.blocks:
            for parameter in block.attn.mechanism.parameters():
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return model


@pytest.fixture(scope="module", params=["repo", "nope", "fox"])
def case(request):
    """A float64 model: a RoPE layer, then two layers of the kind (RePo rotates at learned positions, NoPE at a
    constant, FoX adds a bias and rotates nothing)."""
    model = _perturbed(tiny_model(request.param, n_layers=3, d_model=32, n_heads=4, seed=3).double())
    return Lens(model, None)


# ------------------------------------------------------------------------------------------- brute force


def _layer_hooks(model, ids, layer):
    _, cache = model.run_with_cache(torch.tensor([ids]))
    prefix = f"blocks.{layer}.attn."
    return {name.removeprefix(prefix): value[0].detach().double() for name, value in cache.items()
            if name.startswith(prefix)}


def _softmax_rows(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    shifted = np.where(mask, scores, -np.inf)
    weights = np.exp(shifted - shifted.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def _integer_pattern(lens, ids, layer) -> np.ndarray:
    """The layer's pattern [head, T, T] in a forward whose positions at ``layer`` are the integers (interventions)."""
    seen = {}

    def keep(pattern, hook):
        seen["pattern"] = pattern[0].detach().double().numpy()

    with lens.model.hooks(fwd_hooks=[(f"blocks.{layer}.attn.hook_pattern", keep)]):
        interventions.ablate(lens, ids, layers=[layer], mode="integer")
    return seen["pattern"]


def _band_terms(attn, hooks, n_tokens):
    """(band terms at the layer's positions, at the integers, content terms [head, i, j, band], the frequencies):
    t_b = (cos φ · (u1 w1 + u2 w2) + sin φ · (u2 w1 − u1 w2)) / √d, φ = θ_b (p_j − p_i), u and w the queries and
    keys at position 0 (after the layer's qk-norm)."""
    d_head, n_heads = attn.d_head, attn.n_heads
    q, k = hooks["hook_q"], hooks["hook_k"]
    if attn.qk_norm:
        q = attn.q_norm(q.reshape(n_tokens, -1)).view(n_tokens, -1, d_head)
        k = attn.k_norm(k.reshape(n_tokens, -1)).view(n_tokens, -1, d_head)
    cos0, sin0 = rotary_cos_sin(torch.zeros(1, 1, n_tokens), attn.inv_freq, attn.attention_scaling)
    u = apply_rotary(q.transpose(0, 1)[None], cos0, sin0)[0].double()
    w = apply_rotary(k.repeat_interleave(n_heads // k.shape[1], dim=1).transpose(0, 1)[None], cos0, sin0)[0].double()
    theta = attn.rope.inv_freq_at(n_tokens, attn.inv_freq).double()
    half = d_head // 2
    dot = u[..., :half][:, :, None] * w[..., :half][:, None] + u[..., half:][:, :, None] * w[..., half:][:, None]
    cross = u[..., half:][:, :, None] * w[..., :half][:, None] - u[..., :half][:, :, None] * w[..., half:][:, None]

    def at(positions):  # [head, T]
        phi = theta * (positions[:, None, :, None] - positions[:, :, None, None])
        return ((phi.cos() * dot + phi.sin() * cross) / math.sqrt(d_head)).numpy()

    index = torch.arange(n_tokens, dtype=torch.float64).expand(n_heads, -1)
    return at(hooks["hook_pos"]), at(index), (dot / math.sqrt(d_head)).numpy(), theta.numpy()


@torch.no_grad()
def brute_force(lens, ids, layer, rows):
    """What a record holds for one layer, from the model's hooks and the formulas of the study's definitions:
    per head the sums over the visible pairs (``sums``) and the sink's values (``sink``), the band terms' sums
    (``bands``, None for a layer that rotates nothing)."""
    model, n_tokens = lens.model, len(ids)
    attn = model.blocks[layer].attn
    hooks = _layer_hooks(model, ids, layer)
    mask = np.arange(n_tokens)[None, :] <= np.array(rows)[:, None]  # [row, key]
    rotary = mechanism_traits(attn.kind).role == "rotary"
    if rotary:
        actual, integer, content_bands, theta = _band_terms(attn, hooks, n_tokens)
        content, score = content_bands.sum(-1), actual.sum(-1)
    else:
        q, k = hooks["hook_rot_q"].transpose(0, 1), hooks["hook_rot_k"].transpose(0, 1)
        content = (q @ k.transpose(-1, -2) / math.sqrt(attn.d_head)).numpy()
        score = hooks["hook_attn_scores"].numpy()
    position = score - content
    content, position = content[:, rows], position[:, rows]
    full_mask = np.arange(n_tokens)[None, :] <= np.arange(n_tokens)[:, None]
    out = {"pairs": mask.sum(), "rows": len(rows),
           "content_abs": np.where(mask, np.abs(content), 0).sum((1, 2)),
           "position_abs": np.where(mask, np.abs(position), 0).sum((1, 2)),
           "sink_mass": hooks["hook_pattern"].numpy()[:, rows, 0].sum(1),
           "sink_mass_content": _softmax_rows(content, mask)[:, :, 0].sum(1),
           "sink_mass_position": _softmax_rows(position, mask)[:, :, 0].sum(1),
           "sink_mass_integer": _integer_pattern(lens, ids, layer)[:, rows, 0].sum(1),
           "sink_content": content[:, :, 0].sum(1), "sink_position": position[:, :, 0].sum(1),
           "sink_content_abs": np.abs(content[:, :, 0]).sum(1), "sink_position_abs": np.abs(position[:, :, 0]).sum(1)}
    np.testing.assert_allclose(hooks["hook_pattern"].numpy(), _softmax_rows(score, full_mask), **TOLERANCE)
    out["bands"] = None
    if rotary:
        visible = mask[None, :, :, None]

        def summed(values):
            return np.where(visible, np.abs(values[:, rows]), 0).sum((1, 2))

        out["bands"] = {"actual": summed(actual), "integer": summed(integer),
                        "position": summed(actual - content_bands), "position_integer": summed(integer - content_bands),
                        "frequencies": theta}
    return out


def _array(values):
    return np.asarray(values, dtype=np.float64)


# ----------------------------------------------------------------------------------------------- records


def test_query_rows_are_evenly_spaced_and_never_row_zero():
    assert sampled_query_rows(24, 100) == list(range(1, 24)) and sampled_query_rows(2, 3) == [1]
    assert sampled_query_rows(24, 1) == [23] and sampled_query_rows(1, 4) == []
    for n_tokens in range(3, 40):
        for count in range(2, 12):
            rows = sampled_query_rows(n_tokens, count)
            assert (rows[0], rows[-1], len(rows)) == (1, n_tokens - 1, min(count, n_tokens - 1))
            gaps = np.diff(rows)
            assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1  # evenly spaced, to the nearest row


def test_records_equal_the_brute_force_from_the_hooks(case):
    ids = WINDOWS[0]
    record = band_record(case, ids, [0, 1, 2], QUERY_ROWS)
    rows = record["query_rows"]
    assert rows == sampled_query_rows(len(ids), QUERY_ROWS) and record["n_pairs"] == sum(row + 1 for row in rows)
    for index, layer in enumerate(record["layers"]):
        expected = brute_force(case, ids, layer, rows)
        pairs, n_rows = expected["pairs"], expected["rows"]
        got = {name: _array(record[name][index]) for name in record if name.startswith(("content_", "position_a",
                                                                                         "sink_"))}
        np.testing.assert_allclose(got["content_abs_mean"], expected["content_abs"] / pairs, **TOLERANCE)
        np.testing.assert_allclose(got["position_abs_mean"], expected["position_abs"] / pairs, **TOLERANCE)
        for name in ("sink_mass", "sink_mass_content", "sink_mass_position", "sink_mass_integer", "sink_content",
                     "sink_position", "sink_content_abs", "sink_position_abs"):
            np.testing.assert_allclose(got[name], expected[name] / n_rows, **TOLERANCE, err_msg=f"L{layer} {name}")
        share = expected["sink_content_abs"] / (expected["sink_content_abs"] + expected["sink_position_abs"])
        np.testing.assert_allclose(got["sink_content_share"], share, **TOLERANCE)
        _check_band_fields(record, index, expected["bands"], pairs, case.model.blocks[layer].attn.n_heads)


def _check_band_fields(record, index, bands, pairs, n_heads):
    if bands is None:  # a layer that only biases: empty band fields
        assert record["band_share"][index] == [[]] * n_heads and record["band_abs_mean"][index] == [[]] * n_heads
        assert record["dominant_position_band"][index] == [None] * n_heads
        return
    np.testing.assert_allclose(_array(record["band_frequencies"][index])[0], bands["frequencies"], rtol=1e-6)
    for field, source in (("band_abs_mean", "actual"), ("band_abs_mean_integer", "integer"),
                          ("position_band_abs_mean", "position"), ("position_band_abs_mean_integer", "position_integer")):
        np.testing.assert_allclose(_array(record[field][index]), bands[source] / pairs, **TOLERANCE, err_msg=field)
    for field, source in (("band_share", "actual"), ("band_share_integer", "integer")):
        np.testing.assert_allclose(_array(record[field][index]), bands[source] / bands[source].sum(-1, keepdims=True),
                                   **TOLERANCE)
    for field, source in (("dominant_position_band", "position"), ("dominant_position_band_integer", "position_integer")):
        position = bands[source]
        expected = [None if row.max() < 1e-9 else int(np.argmax(row)) for row in position]
        assert record[field][index] == expected, field


@pytest.mark.parametrize("kind", [kind for kind in mechanism_kinds() if mechanism_traits(kind).role == "rotary"])
def test_moving_hook_pos_keeps_q_and_k_for_every_rotary_mechanism(kind):
    """What the integer and content terms rest on: with the layer's positions set to a constant the bands add up to
    the content part, and set to the integers the content part is unchanged and the pattern is the integer
    reference pattern (the pattern interventions.ablate gives)."""
    model = _perturbed(tiny_model(kind, n_layers=2, d_model=32, n_heads=4, seed=0).double())
    lens, ids, rows = Lens(model, None), WINDOWS[0], [5, 11, 23]
    found = _decomposed(lens, model, ids, 1, rows)
    constant = _decomposed(lens, model, ids, 1, rows, at="constant", reference=None)
    integer = _decomposed(lens, model, ids, 1, rows, at="integer", reference=None)
    visible = found.mask
    np.testing.assert_allclose(constant.bands.sum(-1)[:, visible], found.content[:, visible], **TOLERANCE)
    np.testing.assert_allclose(integer.content[:, visible], found.content[:, visible], **TOLERANCE)
    np.testing.assert_allclose(integer.patterns["actual"][:, visible], found.patterns["reference"][:, visible],
                               **TOLERANCE)


def test_what_each_mechanism_shows(case):
    """RoPE: the integers are its positions; NoPE: no position part at all, but one at the integers; RePo: the
    learned positions change the bands' shares; FoX: no bands, a bias."""
    record = band_record(case, WINDOWS[0], [0, 1, 2], QUERY_ROWS)
    kind = case.model.blocks[1].attn.kind
    assert record["band_share"][0] == record["band_share_integer"][0]  # RoPE below
    assert record["layer_kinds"] == ["rope", kind, kind]
    if kind == "nope":
        assert record["dominant_position_band"][1] == [None] * 4 and None not in record["dominant_position_band_integer"][1]
        assert np.allclose(_array(record["position_abs_mean"][1]), 0.0)
    elif kind == "repo":
        assert not np.allclose(_array(record["band_share"][1]), _array(record["band_share_integer"][1]))
    else:
        assert record["band_share"][1] == [[]] * 4 and min(_array(record["position_abs_mean"][1])) > 0


def test_the_summary_pools_the_windows_as_the_brute_force_does(case):
    records = [band_record(case, ids, [1, 2], QUERY_ROWS) for ids in WINDOWS]
    records.insert(1, band_record(case, [7], [1, 2], QUERY_ROWS))  # one token: no query row, counted apart
    summary = summarize_bands(records)
    assert (summary["windows"], summary["windows_without_query_rows"], summary["layers"]) == (2, 1, [1, 2])
    for index, layer in enumerate([1, 2]):
        found = [brute_force(case, ids, layer, sampled_query_rows(len(ids), QUERY_ROWS)) for ids in WINDOWS]
        pairs, rows = sum(one["pairs"] for one in found), sum(one["rows"] for one in found)

        def total(name):
            return sum(one[name] for one in found)

        np.testing.assert_allclose(_array(summary["sink_mass_by_layer_head"][index]), total("sink_mass") / rows,
                                   **TOLERANCE)
        np.testing.assert_allclose(_array(summary["position_share_by_layer_head"][index]),
                                   total("position_abs") / (total("position_abs") + total("content_abs")), **TOLERANCE)
        sink_share = total("sink_content_abs") / (total("sink_content_abs") + total("sink_position_abs"))
        np.testing.assert_allclose(_array(summary["sink_content_share_by_layer_head"][index]), sink_share, **TOLERANCE)
        assert summary["sink_mass_by_layer"][index] == pytest.approx(float((total("sink_mass") / rows).mean()))
        if found[0]["bands"] is None:
            assert summary["dominant_position_band_by_layer_head"][index] == [None] * 4
            continue
        _check_pooled_bands(summary, index, [one["bands"] for one in found], pairs)
    table = summary["table_by_layer_head"]
    assert len(table) == 8 and table[4]["layer"] == 2 and table[4]["head"] == 0
    assert summary["markdown_by_layer_head"].count("\n") == 9  # a header, a rule and a line per layer and head


def _check_pooled_bands(summary, index, bands, pairs):
    actual, integer = sum(one["actual"] for one in bands), sum(one["integer"] for one in bands)
    position = sum(one["position"] for one in bands)
    np.testing.assert_allclose(_array(summary["band_share_by_layer_head"][index]),
                               actual / actual.sum(-1, keepdims=True), **TOLERANCE)
    np.testing.assert_allclose(_array(summary["band_share_integer_by_layer_head"][index]),
                               integer / integer.sum(-1, keepdims=True), **TOLERANCE)
    dominant = [None if row.max() < 1e-9 else int(np.argmax(row)) for row in position]
    assert summary["dominant_position_band_by_layer_head"][index] == dominant
    theta = bands[0]["frequencies"]
    expected_wavelengths = [None if band is None else pytest.approx(2 * math.pi / theta[band]) for band in dominant]
    assert summary["dominant_position_wavelength_by_layer_head"][index] == expected_wavelengths
    fast = theta > np.median(theta)  # every band rotates here
    np.testing.assert_allclose(_array(summary["fast_band_share_by_layer_head"][index]),
                               (actual / actual.sum(-1, keepdims=True))[:, fast].sum(-1), **TOLERANCE)
    windows_dominant = [[None if row.max() < 1e-9 else int(np.argmax(row)) for row in one["position"]] for one in bands]
    agreement = [None if band is None else sum(window[head] == band for window in windows_dominant)
                 / sum(window[head] is not None for window in windows_dominant)
                 for head, band in enumerate(dominant)]
    assert summary["dominant_position_band_agreement_by_layer_head"][index] == agreement


# -------------------------------------------------------------------------------------- runs and options


@pytest.fixture(scope="module")
def byte_lens():
    return Lens(_perturbed(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=1, context=48)), ByteTokenizer())


TEXTS = ["The needle is hidden in the haystack; heads attend to it.", "", "positions drift " * 6,
         "A short one.", "Windows of a long document are measured one by one, never truncated at all."]


def test_the_study_is_registered_with_its_options():
    assert BANDS in BUILTIN_STUDIES and BANDS.name == "bands" and BANDS.default_corpus == "brown"
    assert {option.name: option.default for option in BANDS.options} == {"query_rows": 32, "layers": []}
    assert BANDS.figures is not None


@pytest.mark.study
def test_a_run_killed_after_one_shard_resumes_to_the_summary_of_one_go(byte_lens, tmp_path, monkeypatch):
    options = {"query_rows": 6, "layers": [0, 2]}
    whole = analyze(byte_lens, "bands", TEXTS, out=tmp_path / "whole", options=options,
                    run=RunOptions(shard_size=2, progress=False, figures=False))
    real_write = shards.write_shard

    def fail_after_the_first(out, index, records, counts):
        if index >= 1:
            raise OSError(28, "No space left on device")
        real_write(out, index, records, counts)

    monkeypatch.setattr("repo_lens.studies.runner.write_shard", fail_after_the_first)
    with pytest.raises(OSError):
        analyze(byte_lens, "bands", TEXTS, out=tmp_path / "resumed", options=options,
                run=RunOptions(shard_size=2, progress=False, figures=False))
    assert [path.name for path in (tmp_path / "resumed" / "shards").iterdir()] == ["part-000000.json"]
    monkeypatch.setattr("repo_lens.studies.runner.write_shard", real_write)
    resumed = analyze(byte_lens, "bands", TEXTS, out=tmp_path / "resumed", options=options,
                      run=RunOptions(progress=False, figures=False))
    assert resumed.summary == whole.summary
    pd.testing.assert_frame_equal(resumed.records(), whole.records())
    assert whole.summary["windows"] == whole.counts["windows"] == len(whole.records())
    with pytest.raises(InputError, match="holds a run with other settings"):
        analyze(byte_lens, "bands", TEXTS, out=tmp_path / "resumed", options={"query_rows": 3},
                run=RunOptions(progress=False))


def test_bad_options_are_named_with_the_fix(byte_lens, tmp_path):
    def run(name, **options):
        return analyze(byte_lens, "bands", ["some text to measure"], out=tmp_path / name, options=options,
                       run=RunOptions(progress=False, figures=False))

    with pytest.raises(InputError, match=r"option query_rows: every value must be within \[1, inf\], got 0"):
        run("a", query_rows=0)
    with pytest.raises(InputError, match=r"--layers 3: the model has 3 layers \(0..2\)"):
        run("b", layers=[0, 3])
    with pytest.raises(InputError, match="--layers lists a layer more than once"):
        run("c", layers=[1, 1])
    with pytest.raises(InputError, match="option layers: expected int, got 'x'"):
        run("d", layers=["x"])
    with pytest.raises(InputError, match="decomposes windows within the model's context of 48 tokens"):
        analyze(byte_lens, "bands", ["x" * 60], out=tmp_path / "e",
                windows=WindowSpec(size=60, beyond_context=True), run=RunOptions(progress=False, figures=False))


def test_a_lens_without_repo_lens_hooks_is_refused(tmp_path):
    from types import SimpleNamespace

    from repo_lens.studies.band_items import band_window_records

    with pytest.raises(InputError, match="the bands study needs a model loaded by repo_lens"):
        band_window_records(SimpleNamespace(hf_model=object(), context_length=8), [], {"query_rows": 4, "layers": []})


# ------------------------------------------------------------------------------------------ command line


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bands-model")
    save_checkpoint(_perturbed(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=1, context=48)), directory,
                    info={"name": "tiny-bands"})
    return directory


def _argv(checkpoint, corpus, out, *extra):
    return ["analyze", "--study", "bands", "--corpus", str(corpus), "--model", str(checkpoint), "--out", str(out),
            "--device", "cpu", "--quiet", *extra]


@pytest.mark.study
def test_the_command_line_writes_records_summary_table_and_the_band_map(checkpoint, tmp_path, capsys):
    corpus = tmp_path / "data.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    out = tmp_path / "run"
    assert main(_argv(checkpoint, corpus, out, "--query-rows", "4", "--layers", "0,2", "--shard-size", "2")) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((out / "summary.json").read_text())
    frame = pd.read_parquet(out / "records")
    assert summary["study"] == "bands" and summary["layers"] == [0, 2] and summary["windows"] == len(frame)
    assert printed["sink_mass_by_layer"] == summary["sink_mass_by_layer"]
    assert "markdown_by_layer_head" not in printed and "| layer | kind | head |" in summary["markdown_by_layer_head"]
    assert (frame.n_query_rows <= 4).all() and all(list(layers) == [0, 2] for layers in frame.layers)
    lens = repo_lens.load(str(checkpoint), device="cpu")
    first = frame.iloc[0]
    again = band_record(lens, list(ByteTokenizer().encode(TEXTS[0]))[first.token_start:first.token_end], [0, 2], 4)
    np.testing.assert_allclose(np.stack(first.sink_mass), _array(again["sink_mass"]), rtol=1e-5)
    _check_figure_files(out, summary)
    no_figures = tmp_path / "plain"
    assert main(_argv(checkpoint, corpus, no_figures, "--query-rows", "4", "--layers", "0", "--no-figures")) == 0
    assert not list(no_figures.glob("*.pdf")) and "figures" not in json.loads((no_figures / "summary.json").read_text())


def _check_figure_files(out, summary):
    if not HAVE_CHROMIUM and "figures_not_rendered" in summary:  # no browser here: named, not lost
        assert set(summary["figures_not_rendered"]) == {"band_usage.pdf", "band_usage.svg"}
        return
    assert summary["figures"] == ["band_usage.pdf", "band_usage.svg"]
    pdf = (out / "band_usage.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and len(pdf) > 2000 and b"%%EOF" in pdf[-64:]
    svg = (out / "band_usage.svg").read_text()
    assert svg.lstrip().startswith(("<svg", "<?xml")) and "sink mass" in svg
    try:
        import pymupdf
    except ImportError:
        return
    with pymupdf.open(stream=pdf, filetype="pdf") as document:
        assert document.page_count == 1
        assert document[0].rect.width == pytest.approx(6.75 * 72, abs=1)  # two-column width, the default
        assert "sink mass" in document[0].get_text()


@pytest.mark.parametrize("extra, message", [
    (["--query-rows", "0"], "argument --query-rows"),
    (["--layers", "0,x"], "argument --layers"),
    (["--layers", "5"], "--layers 5: the model has 3 layers"),
])
@pytest.mark.slow
def test_bad_options_on_the_command_line_are_one_error_line(extra, message, checkpoint, tmp_path, capsys):
    corpus = tmp_path / "data.txt"
    corpus.write_text("One paragraph of text to measure.\n")
    assert main(_argv(checkpoint, corpus, tmp_path / "out", *extra)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "out" / "records").exists()
