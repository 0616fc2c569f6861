"""Bad input to the interventions API: each is one clear error naming what was wrong and what would do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import InputError, interventions
from repo_lens.interventions import GridOptions, Interpolate, Mean, Shift, Shuffle, Stretch, Window
from repo_lens.data.spans import PromptBuilder
from repo_lens.model.byte_tokenizer import ByteTokenizer

from .helpers import tiny_lens

METRIC = interventions.logit_difference(1, 2)


@pytest.fixture(scope="module")
def lens():
    return tiny_lens("repo")


@pytest.mark.parametrize("mode, message", [
    (lambda: "zero", "unknown mode 'zero'"),
    (lambda: "interpolate", "interpolate needs p: pass Interpolate(p=...)"),
    (lambda: Interpolate(p=1.5), "p must be a number in [0, 1], got 1.5"),
    (lambda: Interpolate(p=-0.1), "p must be a number in [0, 1]"),
    (lambda: Interpolate(p=float("nan")), "p must be a number in [0, 1]"),
    (lambda: Interpolate(p="0.5"), "p must be a number in [0, 1]"),
    (lambda: Interpolate(p=0.5, toward="random"), "interpolation target 'random'"),
    (lambda: ("interpolate", 1.5), "p must be a number in [0, 1], got 1.5"),  # the deprecated form checks alike
    (lambda: Window(width=1), "window width must be an integer of at least 2 tokens, got 1"),
    (lambda: Window(width=4.0), "window width must be an integer of at least 2 tokens, got 4.0"),
    (lambda: Shuffle(seed=-1), "seed must be an int >= 0, got -1"),
    (lambda: Shift(offset=float("inf")), "offset must be a finite number, got inf"),
    (lambda: Stretch(factor="2"), "factor must be a finite number, got '2'"),
    (lambda: ("shuffle", 2), "unknown mode"),
    (lambda: None, "unknown mode None"),
])
def test_bad_modes(lens, mode, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        interventions.ablate(lens, "some text", mode=mode())


@pytest.mark.parametrize("layers, heads, message", [
    ([7], None, "layer 7 does not exist; this model has layers 0..2"),
    ([1.5], None, "layer 1.5 is not an integer index"),
    ([], None, "no layers selected"),
    (None, [4], "head 4 does not exist; this model has heads 0..3"),
    (None, ["0"], "head '0' is not an integer index"),
])
def test_unknown_layers_and_heads(lens, layers, heads, message):
    for call in (lambda: interventions.ablate(lens, "some text", mode="integer", layers=layers, heads=heads),
                 lambda: interventions.patch(lens, "some text", "some tent", METRIC, layers=layers, heads=heads),
                 lambda: interventions.attribute(lens, "some text", "some tent", METRIC, layers=layers, heads=heads)):
        with pytest.raises(InputError, match=message):
            call()


def test_bad_grids_inputs_and_metrics(lens):
    with pytest.raises(InputError, match="unknown grid 'heads'; choose one of layer, layer_head, layer_head_position"):
        interventions.patch(lens, "abc", "abd", METRIC, grid="heads")
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        interventions.patch(lens, "abc", "abd", METRIC, options=interventions.GridOptions(batch_size=0))
    with pytest.raises(InputError, match="clean must be one prompt"):
        interventions.patch(lens, ["abc", "abd"], "abd", METRIC)
    with pytest.raises(InputError, match="the text is empty"):
        interventions.ablate(lens, "", mode="integer")
    with pytest.raises(InputError, match="longer than the model's context of 128"):
        interventions.ablate(lens, "x" * 200, mode="integer")
    with pytest.raises(InputError, match=r"one number per batch row \(shape \(1,\)\); it returned shape \(1, 3\)"):
        interventions.ablate(lens, "abc", mode="integer", metric=lambda logits: logits[:, :, 0])
    with pytest.raises(InputError, match="metric must be a callable"):
        interventions.patch(lens, "abc", "abd", "logprob")
    with pytest.raises(InputError, match="attribute needs a differentiable metric"):
        interventions.attribute(lens, "abc", "abd", lambda logits: np.zeros(logits.shape[0]))
    with pytest.raises(InputError, match="mean ablation of 9 tokens needs a reference set at least as long"):
        interventions.ablate(lens, "long text", mode=Mean(reference=["short"]))


def test_grid_options_a_function_has_no_use_for(lens):
    with pytest.raises(InputError, match=r"ablation_grid has no use for GridOptions\(align=...\): align lines up two"):
        interventions.ablation_grid(lens, "abc", METRIC, mode="constant", options=GridOptions(align=["needle"]))
    with pytest.raises(InputError, match=r"attribute has no use for GridOptions\(batch_size=...\)"):
        interventions.attribute(lens, "abc", "abd", METRIC, options=GridOptions(batch_size=4))
    with pytest.raises(InputError, match=r"attribute has no use for GridOptions\(also=...\)"):
        interventions.attribute(lens, "abc", "abd", METRIC, options=GridOptions(also={"same": METRIC}))
    with pytest.raises(InputError, match="progress must be True or False, got 'no'"):
        GridOptions(progress="no")
    with pytest.raises(InputError, match="also must be a mapping of names to metrics"):
        GridOptions(also=[METRIC])
    with pytest.raises(InputError, match="not both"):
        interventions.patch(lens, "abc", "abd", METRIC, options=GridOptions(), progress=False)


def _prompt(filler: str, needle: str):
    builder = PromptBuilder()
    builder.add("Remember " + filler)
    builder.add(needle, "needle")
    builder.add(". Say it:", "question")
    return builder.build(ByteTokenizer(), answer="42", add_special_tokens=False)


def test_prompts_whose_spans_do_not_align(lens):
    clean, corrupted = _prompt("a", "magic 42"), _prompt("a b c", "magic 142")
    with pytest.raises(InputError, match="the clean prompt has 30 tokens and the corrupted one 35: .* align="):
        interventions.patch(lens, clean, corrupted, METRIC)
    with pytest.raises(InputError, match="span 'needle' has 8 tokens in the clean prompt and 9 in the corrupted"):
        interventions.patch(lens, clean, corrupted, METRIC, options=interventions.GridOptions(align=["needle"]))
    with pytest.raises(InputError, match="span 'value' is not in the clean and corrupted prompt"):
        interventions.attribute(lens, clean, corrupted, METRIC, options=interventions.GridOptions(align=["value"]))
    with pytest.raises(InputError, match="aligning by spans needs Prompt inputs"):
        interventions.patch(lens, "abc", "abcd", METRIC, options=interventions.GridOptions(align=["needle"]))
    with pytest.raises(InputError, match="align must be None, 'index' or a list of span names"):
        interventions.patch(lens, clean, corrupted, METRIC, options=interventions.GridOptions(align=[3]))


def test_metric_targets(lens):
    prompt = _prompt("a", "magic 42")
    with pytest.raises(InputError, match="scores 2 targets but the logits hold 3 rows"):
        interventions.answer_logprob([prompt, prompt])(torch.zeros(3, len(prompt), 257))
    with pytest.raises(InputError, match="a metric target is a Prompt or"):
        interventions.answer_logprob("the answer")
    with pytest.raises(InputError, match="must lie in 1..3 tokens with start >= 1"):
        interventions.span_loss((np.array([1, 2, 3]), (0, 2)))
