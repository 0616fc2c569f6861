"""Run the idioms a TransformerLens user writes on TransformerLens' own model and on repo_lens' model of
the same random weights, and print each idiom's result on both.

A random-weight Hugging Face checkpoint (Llama with grouped-query attention, Llama without it, or OLMo-2)
is written to a temporary directory, loaded by ``TransformerBridge.boot_transformers`` (compatibility
mode, no weight processing) and by ``repo_lens.load``. Each idiom returns a value; repo_lens' value
"matches" when it equals TransformerLens' within 1e-4. Direct logit attribution (``FOLDED_REFERENCE``) is
compared with TransformerLens' bridge with ``fold_ln``, the processing TransformerLens' attribution needs:
on its unprocessed model the final norm's weight is left out, while repo_lens includes it on the weights
as loaded. Where TransformerLens' value is silently wrong on this unprocessed model (``REFUSED``),
repo_lens' refusal is the expected result.

    python bench/transformer_lens_idioms.py --arch llama-gqa    # also: llama, olmo2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

PROMPT = "the cat sat on the mat"
WORDS = "the a needle is in haystack what where hidden cat dog sat on mat , . ?".split()


def write_checkpoint(directory: Path, arch: str, seed: int = 5) -> Path:
    """A random checkpoint of ``arch`` with a word-level tokenizer (BOS prepended), saved by transformers."""
    from transformers import LlamaConfig, Olmo2Config

    shared = dict(vocab_size=32, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  max_position_embeddings=128, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    if arch == "olmo2":
        config = Olmo2Config(num_key_value_heads=4, rms_norm_eps=1e-6, **shared)
    else:
        config = LlamaConfig(num_key_value_heads=2 if arch == "llama-gqa" else 4, rms_norm_eps=1e-5, **shared)
    save_random_model(config, directory, seed)
    write_tokenizer(directory)
    return directory


def save_random_model(config: Any, directory: Path, seed: int) -> None:
    """A model of ``config`` with seeded random weights (the norms' weights moved off 1, so that leaving one
    out shows), saved by transformers into ``directory``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(str(directory), safe_serialization=True)


def write_tokenizer(directory: Path) -> None:
    """A word-level tokenizer of ``WORDS`` (ids 0–2: unk, BOS, EOS) that prepends BOS, saved in ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2, **{word: index + 3 for index, word in enumerate(WORDS)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<bos>",
                                        eos_token="<eos>", pad_token="<unk>")
    tokenizer.save_pretrained(str(directory))


def transformer_lens_model(directory: Path) -> Any:
    from transformer_lens.model_bridge import TransformerBridge

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(str(directory), device="cpu")
        bridge.enable_compatibility_mode(no_processing=True)
    return bridge.eval()


def transformer_lens_folded_model(directory: Path) -> Any:
    """TransformerLens' bridge with the final norm's weight folded into W_U (``fold_ln``, nothing else), the
    processing its direct logit attribution asks for."""
    from transformer_lens.model_bridge import TransformerBridge

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(str(directory), device="cpu")
        bridge.enable_compatibility_mode(fold_ln=True, center_writing_weights=False, center_unembed=False,
                                         fold_value_biases=False)
    return bridge.eval()


def repo_lens_model(directory: Path) -> Any:
    import repo_lens

    return repo_lens.load(str(directory), device="cpu").model


def _tokens(model: Any) -> torch.Tensor:
    return model.to_tokens(PROMPT)


def _ids() -> torch.Tensor:
    return torch.tensor([[1, 3, 12, 14, 15, 3, 16]])


def _cache(model: Any, **kwargs: Any) -> Any:
    with torch.no_grad():
        return model.run_with_cache(_ids(), **kwargs)[1]


def _zero_key_head(model: Any) -> torch.Tensor:
    def zero(key: torch.Tensor, hook: Any) -> torch.Tensor:
        key = key.clone()
        key[:, :, 0] = 0.0
        return key

    with torch.no_grad():
        return model.run_with_hooks(_ids(), fwd_hooks=[("blocks.1.attn.hook_rot_k", zero)])


def _pattern_in_place(model: Any) -> torch.Tensor:
    def edit(pattern: torch.Tensor, hook: Any) -> None:
        pattern[:, 1] = 0.0

    with torch.no_grad():
        return model.run_with_hooks(_ids(), fwd_hooks=[("blocks.1.attn.hook_pattern", edit)])


def _backward_alone(model: Any) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    model.zero_grad()
    logits = model.run_with_hooks(_ids(), bwd_hooks=[("blocks.1.attn.hook_pattern",
                                                       lambda grad, hook: seen.append(grad.detach().clone()))])
    logits[0, -1, 5].backward()
    model.zero_grad()
    return seen[0] if seen else torch.tensor(float("nan"))


def _patch_resid_pre(model: Any) -> torch.Tensor:
    from transformer_lens import patching

    clean, corrupt = _ids(), _ids().clone()
    corrupt[0, 2] = 13
    _, clean_cache = model.run_with_cache(clean)
    return patching.get_act_patch_resid_pre(model, corrupt, clean_cache, lambda logits: logits[0, -1, 5])


def _incl_bwd(model: Any) -> torch.Tensor:
    _, cache = model.run_with_cache(_ids(), return_type="loss", incl_bwd=True, names_filter=lambda name: name.endswith("hook_resid_post"))
    return cache["blocks.0.hook_resid_post_grad"]


def _nnsight_pattern(model: Any) -> torch.Tensor:
    import nnsight

    wrapped = nnsight.NNsight(model)
    with wrapped.trace(_ids()):
        pattern = wrapped.blocks[1].attn.hook_pattern.output.save()
    return pattern


def _is_activation_cache(cache: Any) -> bool:
    from transformer_lens import ActivationCache

    return isinstance(cache, ActivationCache)


def _cache_results(model: Any) -> torch.Tensor:
    cache = _cache(model)
    return cache.stack_head_results(layer=-1, pos_slice=-1)


def _masked_loss(model: Any) -> torch.Tensor:
    ids = torch.cat((_ids(), _ids()))
    ids[1, 5:] = 0  # the second row padded on the right
    mask = (torch.arange(ids.shape[1]) < torch.tensor([[ids.shape[1]], [5]])).long()
    with torch.no_grad():
        return torch.stack((model(ids, return_type="loss", attention_mask=mask),
                            *model(ids, return_type="loss", loss_per_token=True, attention_mask=mask).flatten()))


def _attn_result(model: Any) -> torch.Tensor:
    model.set_use_attn_result(True)
    try:
        return _cache(model)["blocks.1.attn.hook_result"]
    finally:
        model.set_use_attn_result(False)


def _without_batch(model: Any) -> torch.Tensor:
    def halve(resid: torch.Tensor, hook: Any) -> torch.Tensor:
        assert resid.ndim == 2  # [pos, d_model]
        return resid * 0.5

    with torch.no_grad():
        return model.run_with_hooks(_ids(), fwd_hooks=[("blocks.0.hook_resid_post", halve)], remove_batch_dim=True)


def _pattern_grad(model: Any) -> torch.Tensor:
    kept: dict[str, torch.Tensor] = {}

    def keep(pattern: torch.Tensor, hook: Any) -> None:
        pattern.retain_grad()
        kept["pattern"] = pattern

    model.zero_grad()
    logits = model.run_with_hooks(_ids(), fwd_hooks=[("blocks.1.attn.hook_pattern", keep)])
    logits[0, -1, 5].backward()
    model.zero_grad()
    grad = kept["pattern"].grad
    return torch.tensor(float("nan")) if grad is None else grad


def _generate(model: Any, **kwargs: Any) -> Any:
    return model.generate(PROMPT, max_new_tokens=4, verbose=False, **kwargs)


def _generate_with_cache(model: Any) -> torch.Tensor:
    """generate's (step logits, cache of the whole output), flattened into one tensor."""
    out, cache = model.generate(_ids(), max_new_tokens=3, do_sample=False, use_past_kv_cache=False, verbose=False,
                                output_logits=True, return_cache=True, names_filter="blocks.1.hook_resid_post")
    return torch.cat([out.sequences.float().flatten(), torch.stack(out.logits).flatten(),
                      cache["blocks.1.hook_resid_post"].flatten()])


def _token_not_found(model: Any) -> str:
    try:
        model.get_token_position(30, _ids())
    except AssertionError as error:  # TransformerLens asserts
        return "AssertionError: does not occur" if "does not occur" in str(error) else str(error)
    return "no error"


def _appended_eos_stripped(model: Any) -> torch.Tensor:
    model.cfg.tokenizer_appends_eos = True
    try:
        return model.to_tokens("the cat <eos>", prepend_bos=False)
    finally:
        model.cfg.tokenizer_appends_eos = False


IDIOMS: dict[str, Callable[[Any], Any]] = {
    "run_with_cache returns ActivationCache": lambda m: _is_activation_cache(_cache(m)),
    'cache["z", 0]': lambda m: _cache(m)["z", 0],
    'cache["pattern", 1]': lambda m: _cache(m)["pattern", 1],
    "cache.accumulated_resid()": lambda m: _cache(m).accumulated_resid(),
    "cache.decompose_resid()": lambda m: _cache(m).decompose_resid(),
    "cache.stack_activation('resid_post')": lambda m: _cache(m).stack_activation("resid_post"),
    "cache.stack_head_results()": _cache_results,
    "cache.logit_attrs()": lambda m: _cache(m).logit_attrs(_cache(m).accumulated_resid(pos_slice=-1), tokens=5),
    "to_tokens(text)": _tokens,
    "to_str_tokens(text)": lambda m: m.to_str_tokens(PROMPT),
    "to_string(tokens)": lambda m: m.to_string(_ids()[0, 1:]),
    "model(text)": lambda m: m(PROMPT),
    'return_type="loss"': lambda m: m(_ids(), return_type="loss"),
    "loss_per_token=True": lambda m: m(_ids(), return_type="loss", loss_per_token=True),
    'return_type="both"': lambda m: torch.cat([m(_ids(), return_type="both")[1].reshape(1),
                                              m(_ids(), return_type="both")[0].flatten()]),
    "return_type=None": lambda m: m(_ids(), return_type=None),
    "generate (greedy)": lambda m: _generate(m, do_sample=False),
    "generate (KV cache off)": lambda m: _generate(m, do_sample=False, use_past_kv_cache=False),
    "W_Q": lambda m: m.W_Q, "W_K": lambda m: m.W_K, "W_V": lambda m: m.W_V, "W_O": lambda m: m.W_O,
    "W_E": lambda m: m.W_E, "W_U": lambda m: m.W_U,
    "OV (factored)": lambda m: m.OV.AB, "QK (factored)": lambda m: m.QK.AB,
    "ln_final(resid)": lambda m: m.ln_final(_cache(m)["resid_post", -1]),
    "ln1.hook_scale": lambda m: _cache(m)["blocks.0.ln1.hook_scale"],
    "ln1.hook_normalized": lambda m: _cache(m)["blocks.0.ln1.hook_normalized"],
    "ln2.hook_scale": lambda m: _cache(m)["blocks.0.ln2.hook_scale"],
    "ln_final.hook_normalized": lambda m: _cache(m)["ln_final.hook_normalized"],
    "mlp.hook_pre": lambda m: _cache(m)["blocks.0.mlp.hook_pre"],
    "mlp.hook_post": lambda m: _cache(m)["blocks.0.mlp.hook_post"],
    "attn.hook_attn_scores": lambda m: _cache(m)["blocks.1.attn.hook_attn_scores"],
    "hook_rot_k": lambda m: _cache(m)["blocks.1.attn.hook_rot_k"],
    "hook_rot_k: zero key head 0": _zero_key_head,
    "hook_pattern: in-place edit": _pattern_in_place,
    "hook_pattern: backward hook alone": _backward_alone,
    "run_with_cache(incl_bwd=True)": _incl_bwd,
    "patching.get_act_patch_resid_pre": _patch_resid_pre,
    "nnsight: read hook_pattern": _nnsight_pattern,
    "get_token_position": lambda m: (m.get_token_position("cat", PROMPT), m.get_token_position("the", PROMPT, mode="last")),
    "to_single_str_token": lambda m: m.to_single_str_token(5),
    "all_head_labels": lambda m: m.all_head_labels,
    "all_composition_scores('Q')": lambda m: m.all_composition_scores("Q").scores,
    "all_composition_scores('K')": lambda m: m.all_composition_scores("K").scores,
    "all_composition_scores('V')": lambda m: m.all_composition_scores("V").scores,
    "embed.W_E": lambda m: m.embed.W_E, "unembed.W_U": lambda m: m.unembed.W_U, "unembed.b_U": lambda m: m.unembed.b_U,
    "stop_at_layer=2": lambda m: m(_ids(), stop_at_layer=2),
    "start_at_layer=1 (from stop_at_layer=1)": lambda m: m(m(_ids(), stop_at_layer=1), start_at_layer=1),
    "loss with attention_mask (right padding)": _masked_loss,
    "set_use_attn_result: hook_result": _attn_result,
    "QK_for_attn_layers()": lambda m: m.QK_for_attn_layers()[1].AB,
    "OV_for_attn_layers()": lambda m: m.OV_for_attn_layers()[1].AB,
    "cache.logit_lens()": lambda m: _cache(m).logit_lens().readout.values,
    "run_with_hooks(remove_batch_dim=True)": _without_batch,
    "hook_pattern: retain_grad()": _pattern_grad,
    "generate from embeddings (KV cache off)": lambda m: m.generate(m.embed(_ids()), max_new_tokens=3, do_sample=False,
                                                                  use_past_kv_cache=False, verbose=False),
    "generate(output_logits, return_cache)": _generate_with_cache,
    "get_params()": lambda m: torch.cat([value.flatten() for _, value in sorted(m.get_params().items())]),
    "get_token_position: absent token": _token_not_found,
    "cfg.tokenizer_appends_eos": _appended_eos_stripped,
}

OLMO2_NAMES = {"ln1.hook_scale": "blocks.0.ln1_post.hook_scale", "ln1.hook_normalized": "blocks.0.ln1_post.hook_normalized",
               "ln2.hook_scale": "blocks.0.ln2_post.hook_scale"}


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().float()
    if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):
        return value[0].detach().float()
    return None


def compare(reference: Any, ours: Any) -> str:
    a, b = _as_tensor(reference), _as_tensor(ours)
    if a is None or b is None:
        return "match" if reference == ours else f"differs: {ours!r} vs {reference!r}"
    if a.shape != b.shape:
        return f"differs: shape {tuple(b.shape)} vs {tuple(a.shape)}"
    if not torch.equal(torch.isinf(a), torch.isinf(b)):
        return "differs: masked entries differ"
    gap = float((a - b).nan_to_num(0.0, 0.0, 0.0).abs().max()) if a.numel() else 0.0
    return "match" if gap <= 1e-4 else f"differs by {gap:.2g}"


# idioms that give a silently wrong number on TransformerLens' unprocessed model, which repo_lens refuses with
# an error saying what to do: idiom -> (the architectures where it is wrong, a phrase of repo_lens' error)
REFUSED = {
    # OLMo-2 normalises attention's output: heads' results are no residual stream components
    "cache.stack_head_results()": (("olmo2",), "not residual stream components"),
}


# idioms whose TransformerLens value is the one of its bridge with fold_ln: on the unprocessed bridge each
# component leaves out the final norm's weight, and the attributions do not add up to the logit
FOLDED_REFERENCE = frozenset({"cache.logit_attrs()"})
# ... where TransformerLens cannot fold (its OLMo-2 adapter leaves the norms unfolded): repo_lens' value is
# checked by its own invariant instead: the attributions of the blocks add up to the logit
UNFOLDABLE_IN_TRANSFORMER_LENS = {"cache.logit_attrs()": ("olmo2",)}


def adds_up_to_the_logit(model: Any) -> bool:
    """Whether the attributions of ``decompose_resid``'s components to token 5 add up to its logit."""
    with torch.no_grad():
        logit = model(_ids())[:, -1, 5]
        cache = _cache(model)
        attributions = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens=5, pos_slice=-1)
    return bool((attributions.sum(0) - logit).abs().max() <= 1e-4)


def refused_as_expected(name: str, arch: str, error: str | None) -> bool:
    """Whether ``error`` is repo_lens' refusal of an idiom that TransformerLens gets silently wrong on ``arch``."""
    archs, phrase = REFUSED.get(name, ((), ""))
    return arch in archs and error is not None and phrase in error


def run(name: str, idiom: Callable[[Any], Any], model: Any) -> tuple[Any, str | None]:
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return idiom(model), None
    except Exception as error:  # an idiom that fails is a result here, not a crash
        return None, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=("llama-gqa", "llama", "olmo2"), default="llama-gqa")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        directory = write_checkpoint(Path(folder), args.arch)
        reference, ours = transformer_lens_model(directory), repo_lens_model(directory)
        folded = transformer_lens_folded_model(directory)
        print(f"{args.arch}: TransformerLens {type(reference).__name__} vs repo_lens {type(ours).__name__}")
        print(f"{'idiom':40s} | {'TransformerLens':22s} | repo_lens")
        passed = 0
        for name, idiom in IDIOMS.items():
            if args.arch == "olmo2" and name in OLMO2_NAMES:
                idiom = (lambda hook: lambda m: _cache(m)[hook])(OLMO2_NAMES[name])
            expected, reference_error = run(name, idiom, folded if name in FOLDED_REFERENCE else reference)
            value, error = run(name, idiom, ours)
            theirs = "ok" if reference_error is None else reference_error[:22]
            if args.arch in UNFOLDABLE_IN_TRANSFORMER_LENS.get(name, ()) and error is None:
                verdict = "adds up" if adds_up_to_the_logit(ours) else "does not add up to the logit"
                passed += verdict == "adds up"
            elif refused_as_expected(name, args.arch, error):
                verdict = "refused (TransformerLens: silently wrong)"
                passed += 1
            elif error is not None:
                verdict = f"error {error}"
            elif reference_error is not None:
                verdict = "runs (TransformerLens fails)"
                passed += 1
            else:
                verdict = compare(expected, value)
                passed += verdict == "match"
            print(f"{name:40s} | {theirs:22s} | {verdict}")
        print(f"{passed}/{len(IDIOMS)} idioms run on repo_lens and agree with TransformerLens, or are refused where "
              "TransformerLens is silently wrong")


if __name__ == "__main__":
    main()
