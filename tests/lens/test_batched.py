"""Batched tracing and batched attention mass equal one text at a time (issue 14 item 5).

Every registered mechanism gets a small random model; texts of different lengths are traced one at
a time and in right-padded batches of 2 and 3 (7 texts: a remainder in both), and every field of
every trace must agree: positions and increments within 1e-5 (absolute, or relative for the running
sums that grow past 1, whose float32 ulp is larger), the rest exactly. A padded forward runs other
kernel shapes, so float32 rounding differs by an ulp here and there; two precisions are checked:
the default initialisation in float32 (what a user runs), and weights 0.3-normal, large enough to
make every mechanism's positions vary, with the residual stream in float64 (positions are float32
either way), so that their amplification of rounding does not hide what batching does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens.analysis import attention_mass
from repo_lens.analysis.attention_mass import attention_mass_batch
from repo_lens.capture import capture_batch
from repo_lens.errors import InputError
from repo_lens.inputs import length_batches
from repo_lens.lens import Lens
from repo_lens.lens_inputs import trace_many
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.registry import block_families, mechanism_kinds

TEXTS = ["a", "the cat sat", "positions move when content moves", "短文本", "x" * 40, "one more, of medium size",
         "the last text of the set, long enough to pad every other one by a good margin"]
TOLERANCE = 1e-5
CLOSE = {"atol": TOLERANCE, "rtol": TOLERANCE}


def make_lens(kind: str, seed: int = 0, std: float | None = 0.3, dtype: torch.dtype = torch.float64,
              **config) -> Lens:
    """Layers rope, kind, kind (block family olmo2, or the family of the attention that runs ``kind``); weights
    0.3-normal (``std=None``: the default initialisation)."""
    cfg = ModelConfig(family=block_families(kind)[0], vocab_size=257, d_model=32, n_layers=3, n_heads=4, d_mlp=64,
                      layer_mechanisms=["rope", kind, kind], max_position_embeddings=config.pop("context", 128),
                      **config)
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2 and std is not None:
                param.normal_(std=std)
    return Lens(model.to(dtype), ByteTokenizer(), {"name": f"random-{kind}"})


def assert_same_trace(batched, alone) -> None:
    assert batched.tokens == alone.tokens
    np.testing.assert_array_equal(batched.token_ids, alone.token_ids)
    assert batched.layer_kinds == alone.layer_kinds
    assert batched.positions.dtype == np.float32
    assert batched.positions.shape == alone.positions.shape
    np.testing.assert_allclose(batched.positions, alone.positions, **CLOSE)
    assert sorted(batched.extras) == sorted(alone.extras)
    for name in alone.extras:
        np.testing.assert_allclose(batched.extras[name], alone.extras[name], **CLOSE)
    assert batched.meta == alone.meta


@pytest.mark.parametrize("precision", [{"std": 0.3, "dtype": torch.float64}, {"std": None, "dtype": torch.float32}],
                         ids=["large-weights", "default-float32"])
@pytest.mark.parametrize("kind", mechanism_kinds())
def test_batched_traces_equal_one_at_a_time_for_every_mechanism(kind, precision):
    lens = make_lens(kind, **precision)
    alone = lens.trace(TEXTS, progress=False)
    for batch_size in (2, 3):
        batched = lens.trace(TEXTS, batch_size=batch_size, progress=False)
        assert len(batched) == len(TEXTS)
        for one_batched, one_alone in zip(batched, alone):
            assert_same_trace(one_batched, one_alone)
    learned = [layer for layer in (1, 2) if np.ptp(alone[-1].positions[layer]) > 0]
    assert kind in ("nope",) or learned, "the test model should give its mechanism's layers varying positions"


@pytest.mark.parametrize("kind", ["cope", "grape-ap"])
def test_last_query_positions_are_each_texts_own_last_token(kind):
    """CoPE and GRAPE-AP show positions as seen from the last token: in a padded batch that must be the
    text's own last token, not the last pad (a reference: the text traced alone, and its increments'
    running sum)."""
    lens = make_lens(kind)
    short, long = "short one", "a much longer text that pads the short one"
    batched = lens.trace([short, long], batch_size=2, progress=False)[0]
    alone = lens.trace(short)
    np.testing.assert_allclose(batched.positions, alone.positions, **CLOSE)
    np.testing.assert_allclose(np.cumsum(batched.extras["increments"][1:], axis=-1), batched.positions[1:],
                               **CLOSE)


@pytest.mark.parametrize("kind", ["repo", "lpi", "fox", "cope", "alibi"])
def test_pad_tokens_never_reach_a_trace(kind):
    """Each trace holds exactly its own tokens, and what stands in the pad slots changes nothing."""
    lens = make_lens(kind)
    sequences = [list(range(3, 30)), [7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
    lengths = [len(ids) for ids in sequences]
    width = max(lengths)
    generator = torch.Generator().manual_seed(0)
    results = []
    for pad in ("zeros", "random"):
        padded = (torch.zeros((3, width), dtype=torch.long) if pad == "zeros"
                  else torch.randint(0, 257, (3, width), generator=generator))
        for row, ids in enumerate(sequences):
            padded[row, :len(ids)] = torch.tensor(ids)
        results.append(capture_batch(lens.model, padded, lengths))
    for (zeros, zero_increments), (random, random_increments), length in zip(*results, lengths):
        assert zeros.shape == (3, 4, length)
        np.testing.assert_array_equal(zeros, random)
        for layer in zero_increments:
            assert zero_increments[layer].shape == (4, length)
            np.testing.assert_array_equal(zero_increments[layer], random_increments[layer])
    for trace, ids in zip(lens.trace_batch(sequences, batch_size=3, progress=False), sequences):
        assert trace.token_ids.tolist() == ids
        assert trace.positions.shape == (3, 4, len(ids))
        assert all(extra.shape == (3, 4, len(ids)) for extra in trace.extras.values())


def test_batched_tracing_of_token_ids_truncation_and_beyond_context_with_dynamic_rope():
    """Dynamic NTK rope frequencies depend on the padded length, so a text beyond the context goes alone."""
    lens = make_lens("repo", rope_scaling={"rope_type": "dynamic", "factor": 2.0}, context=16)
    sequences = [list(range(1, 30)), list(range(5, 15)), list(range(2, 22)), [4, 5, 6]]
    alone = [lens.trace(ids, allow_beyond_context=True) for ids in sequences]
    batched = trace_many(lens, sequences, batch_size=4, allow_beyond_context=True)
    for one_batched, one_alone in zip(batched, alone):
        assert_same_trace(one_batched, one_alone)
    truncated = lens.trace_batch(sequences, batch_size=2, truncate=True, progress=False)
    assert [len(trace) for trace in truncated] == [16, 10, 16, 3]
    assert truncated[0].meta["truncation"] == {"original_tokens": 29, "kept_tokens": 16}
    assert_same_trace(truncated[0], lens.trace(sequences[0], truncate=True))


def test_length_batches_sort_by_length_and_keep_every_index_once():
    lengths = [5, 1, 9, 9, 3, 30, 2]
    batches = length_batches(lengths, 3, context_length=10)
    assert batches[0] == [5]  # beyond the context: alone
    assert sorted(index for batch in batches for index in batch) == list(range(7))
    assert all(len(batch) <= 3 for batch in batches)
    flat = [lengths[index] for batch in batches[1:] for index in batch]
    assert flat == sorted(flat, reverse=True)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_bad_batch_size_is_refused_by_name(bad):
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        make_lens("rope").trace(TEXTS, batch_size=bad)


def niah_like_prompts(seed: int = 0) -> list:
    """Prompts of different lengths, each with its own spans and query rows."""
    generator = np.random.default_rng(seed)
    prompts = []
    for length in (40, 17, 64, 25, 33):
        ids = generator.integers(1, 257, size=length).tolist()
        needle = (length // 4, length // 4 + 3)
        question = (length - 9, length - 4)
        prompts.append((ids, {"needle": needle, "question": question}, (length - 4, length)))
    return prompts


@pytest.mark.parametrize("kind", mechanism_kinds())
def test_attention_mass_batch_equals_one_prompt_at_a_time(kind):
    model = make_lens(kind).model
    prompts = niah_like_prompts()
    alone = [attention_mass(model, *prompt) for prompt in prompts]
    for batch_size in (2, 3):
        batched = attention_mass_batch(model, prompts, batch_size=batch_size)
        for one_batched, one_alone in zip(batched, alone):
            assert one_batched.query == one_alone.query and one_batched.span_lengths == one_alone.span_lengths
            assert one_batched.layers == one_alone.layers and one_batched.layer_kinds == one_alone.layer_kinds
            for name, value in one_alone.per_token.items():
                assert one_batched.per_token[name] == pytest.approx(value, abs=TOLERANCE, rel=TOLERANCE)
                np.testing.assert_allclose(one_batched.by_layer_head[name], one_alone.by_layer_head[name],
                                           **CLOSE)
            np.testing.assert_allclose(one_batched.self_mass, one_alone.self_mass, **CLOSE)


def test_attention_mass_batch_checks_each_prompt():
    model = make_lens("repo").model
    prompts = niah_like_prompts()
    with pytest.raises(InputError, match="query rows"):
        attention_mass_batch(model, prompts[:2] + [(list(range(10)), {}, (8, 12))])
    with pytest.raises(InputError, match="triple"):
        attention_mass_batch(model, [list(range(10))])
    with pytest.raises(InputError, match="batch_size"):
        attention_mass_batch(model, prompts, batch_size=0)


def _numbers_close(batched, alone, path="record") -> None:
    """Records equal: numbers within 1e-5, everything else exactly."""
    if isinstance(alone, dict):
        assert sorted(batched) == sorted(alone), path
        for key in alone:
            _numbers_close(batched[key], alone[key], f"{path}.{key}")
    elif isinstance(alone, list):
        assert len(batched) == len(alone), path
        for index, (one_batched, one_alone) in enumerate(zip(batched, alone)):
            _numbers_close(one_batched, one_alone, f"{path}[{index}]")
    elif isinstance(alone, float) and not isinstance(batched, bool):
        assert batched == pytest.approx(alone, abs=TOLERANCE, rel=TOLERANCE, nan_ok=True), path
    else:
        assert batched == alone, path


def test_analyze_batch_size_gives_the_same_results(tmp_path, monkeypatch):
    """`repo-lens analyze --batch-size 3` = one at a time, for the three studies (a remainder in each)."""
    import json

    from repo_lens.cli import main
    from repo_lens.data.corpora import parse_peoples_daily
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    checkpoint = tmp_path / "model"
    save_checkpoint(tiny_model("fox", seed=3), checkpoint, info={"name": "tiny-fox"})
    text_file = tmp_path / "text.txt"
    text_file.write_text("\n\n".join(TEXTS[1:]))
    sample = parse_peoples_daily(["迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  。/w",
                                  "中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr",
                                  "人工智能/n  是/v  一个/m  分支/n  。/w",
                                  "希望/n  的/u  新/a  世纪/n"])
    monkeypatch.setattr("repo_lens.data.peoples_daily", lambda *a, **k: sample)
    studies = {"positions": ["--file", str(text_file)], "boundaries": ["--samples", "4"],
               "niah": ["--lengths", "400,480", "--depths", "0,0.25,0.5,0.75,1"]}
    for study, options in studies.items():
        results = {}
        for batch_size in ("1", "3"):
            out = tmp_path / f"{study}-{batch_size}"
            assert main(["analyze", "--model", str(checkpoint), "--study", study, *options, "--out", str(out),
                         "--quiet", "--device", "cpu", "--batch-size", batch_size]) == 0
            results[batch_size] = json.loads((out / "results.json").read_text())
        assert len(results["1"]) == {"positions": 6, "boundaries": 4, "niah": 10}[study]
        _numbers_close(results["3"], results["1"])
    assert main(["analyze", "--model", str(checkpoint), "--study", "positions", "--file", str(text_file),
                 "--out", str(tmp_path / "bad"), "--quiet", "--device", "cpu", "--batch-size", "0"]) == 2
