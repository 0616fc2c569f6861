"""The idioms a TransformerLens user writes give on repo_lens' model what they give on TransformerLens' own
model of the same random weights (Llama with and without grouped-query attention, OLMo-2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("transformer_lens_idioms", ROOT / "bench" / "transformer_lens_idioms.py")
idioms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(idioms)
# TransformerLens' generate with its KV cache (on by default) continues differently from its own full forward
# passes on these checkpoints; repo_lens' is checked against the full-forward one and a plain argmax loop below
DIFFERS_IN_TRANSFORMER_LENS = {"generate (greedy)"}


@pytest.fixture(scope="module", params=["llama-gqa", "llama", "olmo2"])
def models(request, tmp_path_factory):
    directory = idioms.write_checkpoint(tmp_path_factory.mktemp(request.param), request.param)
    return (request.param, idioms.transformer_lens_model(directory), idioms.repo_lens_model(directory),
            idioms.transformer_lens_folded_model(directory))


def test_every_idiom_agrees_with_transformer_lens(models):
    arch, unprocessed, ours, folded = models
    failures = []
    for name, idiom in idioms.IDIOMS.items():
        if name in DIFFERS_IN_TRANSFORMER_LENS:
            continue
        if arch == "olmo2" and name in idioms.OLMO2_NAMES:
            idiom = (lambda hook: lambda model: idioms._cache(model)[hook])(idioms.OLMO2_NAMES[name])
        reference = folded if name in idioms.FOLDED_REFERENCE else unprocessed
        expected, reference_error = idioms.run(name, idiom, reference)
        value, error = idioms.run(name, idiom, ours)
        assert reference_error is None, f"{arch}: TransformerLens itself fails {name}: {reference_error}"
        if arch in idioms.REFUSED.get(name, ((), ""))[0]:
            if not idioms.refused_as_expected(name, arch, error):
                failures.append(f"{name}: expected repo_lens to refuse it, got {error or value!r}")
            continue
        if arch in idioms.UNFOLDABLE_IN_TRANSFORMER_LENS.get(name, ()):
            verdict = error or ("match" if idioms.adds_up_to_the_logit(ours) else "does not add up")
        else:
            verdict = error or idioms.compare(expected, value)
        if verdict != "match":
            failures.append(f"{name}: {verdict}")
    assert not failures, f"{arch}: " + "; ".join(failures)


def test_generate_is_the_greedy_continuation(models):
    _, reference, ours, _ = models
    with torch.no_grad():
        tokens = ours.to_tokens(idioms.PROMPT)
        for _ in range(4):
            tokens = torch.cat((tokens, ours(tokens)[:, -1].argmax(-1, keepdim=True)), dim=1)
    greedy = ours.generate(ours.to_tokens(idioms.PROMPT), max_new_tokens=4, do_sample=False, stop_at_eos=False,
                           verbose=False)
    assert torch.equal(greedy, tokens)
    assert ours.generate(idioms.PROMPT, max_new_tokens=4, do_sample=False, verbose=False) == reference.generate(
        idioms.PROMPT, max_new_tokens=4, do_sample=False, verbose=False, use_past_kv_cache=False)
    torch.manual_seed(0)
    sampled = ours.generate(idioms.PROMPT, max_new_tokens=6, temperature=1.0, verbose=False)
    assert isinstance(sampled, str) and sampled.startswith(idioms.PROMPT)


def test_nnsight_reads_and_writes_every_hook_of_a_layer(models):
    nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'repo_lens[hf]')")

    _, _, ours, _ = models
    ids = idioms._ids()
    names = [name for name in ours.hook_dict if name.startswith("blocks.1.")]
    ours.set_use_attn_result(True)  # hook_result too
    _, cache = ours.run_with_cache(ids)
    ours.set_use_attn_result(False)
    wrapped = nnsight.NNsight(ours)
    for name in names:
        envoy = wrapped
        for part in _module_path(ours, name).split("."):  # the norms' hooks: TransformerLens name, module path
            envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
        with torch.no_grad(), wrapped.trace(ids):
            seen = envoy.output.save()
        torch.testing.assert_close(seen, cache[name], msg=f"nnsight read {name}")
        with torch.no_grad(), wrapped.trace(ids):
            envoy.output = envoy.output * 0.5
            logits = wrapped.output.save()
        with torch.no_grad():
            expected = ours.run_with_hooks(ids, fwd_hooks=[(name, lambda tensor, hook: tensor * 0.5)])
        torch.testing.assert_close(logits, expected, msg=f"nnsight write {name}")


def _module_path(model, name: str) -> str:
    point = model.hook_dict[name]
    return next(path for path, module in model.named_modules() if module is point)


def test_circuitsvis_draws_the_cached_pattern(models):
    circuitsvis = pytest.importorskip("circuitsvis", reason="circuitsvis is not installed (pip install circuitsvis)")
    _, _, ours, _ = models
    _, cache = ours.run_with_cache(idioms.PROMPT)
    html = circuitsvis.attention.attention_patterns(tokens=ours.to_str_tokens(idioms.PROMPT),
                                                    attention=cache["pattern", 1][0])
    assert "AttentionPatterns" in str(html)


def test_the_generic_hugging_face_path_refuses_learned_positions(repo_dir):
    from repo_lens.errors import CheckpointError
    from repo_lens.hf.model import load_hf

    with pytest.raises(CheckpointError, match=r"pe_config.*gate_map.*repo_lens\.load"):
        load_hf(repo_dir, device="cpu")


def test_a_list_of_texts_is_padded_and_its_loss_skips_the_pads(models):
    _, _, ours, _ = models
    texts = ["the cat", "the cat sat on the mat"]
    with torch.no_grad():
        per_text = [ours(text, return_type="loss", loss_per_token=True)[0] for text in texts]
        expected = torch.cat(per_text).mean()  # the mean over every real next-token prediction
        torch.testing.assert_close(ours(texts, return_type="loss"), expected)
    assert ours.generate(texts, max_new_tokens=3, do_sample=False, verbose=False) == [
        ours.generate(text, max_new_tokens=3, do_sample=False, verbose=False) for text in texts]


@pytest.mark.parametrize("source", ["tiny", "zoo:bytes-cope", "zoo:bytes-fox"])
def test_the_idioms_run_on_every_mechanism(source):
    """Every registered mechanism (tiny random models) and the authors' CoPE and FoX decoders from the zoo."""
    import repo_lens
    from repo_lens.errors import InputError
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.model.registry import mechanism_kinds
    from repo_lens.model.tiny import tiny_model

    if source == "tiny":
        models = []
        for kind in mechanism_kinds():
            model = tiny_model(kind, n_layers=2)
            model.tokenizer = ByteTokenizer()
            models.append(model)
    else:
        models = [repo_lens.load(source, device="cpu").model]
    for model in models:
        with torch.no_grad():
            tokens = model.to_tokens("hello there")
            logits, cache = model.run_with_cache(tokens)
            n_layers = len(model.W_Q)
            assert cache.accumulated_resid(apply_ln=True).shape[0] == n_layers + 1
            torch.testing.assert_close(cache.decompose_resid().sum(0), cache["resid_post", -1], atol=1e-4, rtol=0)
            if any("after_attention" in getattr(block, "_norm_at", {}) for block in model.blocks):
                with pytest.raises(InputError, match="not residual stream components"):  # OLMo-2: attn_out is normed
                    cache.stack_head_results(layer=-1)
            else:
                heads = cache.stack_head_results(layer=-1)
                assert heads.shape[0] == n_layers * model.W_Q.shape[1]
                torch.testing.assert_close(heads.sum(0) + model.b_O.sum(0), cache.decompose_resid()[1:].sum(0)
                                           - sum(cache["mlp_out", layer] for layer in range(n_layers)), atol=1e-4, rtol=0)
            assert cache["pos", 1, "attn"].shape[-1] == tokens.shape[1]
            assert torch.equal(model.generate(tokens, max_new_tokens=2, do_sample=False, verbose=False)[:, -2],
                               logits[:, -1].argmax(-1))


def test_bad_input_names_the_problem():
    from repo_lens.errors import InputError
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo", n_layers=2)
    with pytest.raises(InputError, match="no tokenizer"):
        model.to_tokens("hello")
    model.tokenizer = ByteTokenizer()
    with pytest.raises(InputError, match="empty"):
        model("")
    with pytest.raises(InputError, match="left padding"):
        model(["a", "bcd"], padding_side="left")
    with pytest.raises(InputError, match="return_type"):
        model(torch.tensor([[1, 2]]), return_type="probs")
    with pytest.raises(InputError, match="does not take"):
        model(torch.tensor([[1, 2]]), attention_bias=1)
    with pytest.raises(InputError, match="stop_at_layer=5: give a layer index from -2 to 2"):
        model(torch.tensor([[1, 2]]), stop_at_layer=5)
    with pytest.raises(InputError, match="the residual stream"):
        model(torch.tensor([[1, 2]]), start_at_layer=1)
    with pytest.raises(InputError, match="left padding"):
        model(torch.tensor([[0, 1, 2]]), return_type="loss", attention_mask=torch.tensor([[0, 1, 1]]))
    with pytest.raises(InputError, match="does not occur"):
        model.get_token_position("z", "hello")


def test_patterns_are_cached_in_the_models_dtype_unless_asked():
    """The scores and pattern are computed in fp32 but cached as TransformerLens caches them, in the
    model's dtype (a bf16 model's full cache then weighs what TransformerLens' does); positions stay fp32."""
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo").to(torch.bfloat16)
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    _, cache = model.run_with_cache(tokens)
    assert cache["blocks.2.attn.hook_pattern"].dtype == torch.bfloat16
    assert cache["blocks.2.attn.hook_attn_scores"].dtype == torch.bfloat16
    assert cache["blocks.2.attn.hook_pos"].dtype == torch.float32
    _, exact = model.run_with_cache(tokens, cache_dtype=torch.float32)
    pattern = exact["blocks.2.attn.hook_pattern"]
    assert pattern.dtype == torch.float32
    torch.testing.assert_close(pattern.sum(-1), torch.ones_like(pattern.sum(-1)))
    assert torch.equal(pattern.to(torch.bfloat16), cache["blocks.2.attn.hook_pattern"])


@pytest.mark.parametrize("pos_slice", [-1, 5, [0, 2], (1, 4)])
def test_pos_slice_slices_the_token_axis_of_every_hook(pos_slice):
    """As TransformerLens slices its own hooks: the token axis of hook_pos [batch, head, pos] is its last,
    of hook_rot_q / hook_rot_k [batch, pos, head, d_head] the third from last; an index past the number of
    heads is no error (it is a token)."""
    from transformer_lens.utilities import Slice

    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo", n_layers=3)  # 4 heads; 7 tokens
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    _, full = model.run_with_cache(tokens)
    _, sliced = model.run_with_cache(tokens, pos_slice=pos_slice)
    slicer = Slice.unwrap(pos_slice)  # as run_with_cache does: an int keeps the token axis
    for name, axis in [("blocks.2.attn.hook_pos", -1), ("blocks.2.attn.hook_rot_q", -3), ("blocks.2.attn.hook_rot_k", -3),
                       ("blocks.2.hook_resid_post", -2), ("blocks.2.attn.hook_q", -3), ("blocks.2.attn.hook_pattern", -2)]:
        expected = slicer.apply(full[name], dim=axis)
        assert sliced[name].shape == expected.shape and torch.equal(sliced[name], expected), name


def test_generate_returns_one_text_for_one_sequence_of_token_ids():
    """TransformerLens' return types: a string for a text or for token ids of batch 1, a list for a batch."""
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo")
    model.tokenizer = ByteTokenizer()
    one = model.generate(torch.tensor([list(b"abc")]), max_new_tokens=2, return_type="str", verbose=False, do_sample=False)
    two = model.generate(torch.tensor([list(b"abc"), list(b"xyz")]), max_new_tokens=2, return_type="str",
                         verbose=False, do_sample=False)
    tokens = model.generate(torch.tensor([list(b"abc")]), max_new_tokens=2, return_type="tokens", verbose=False, do_sample=False)
    assert isinstance(one, str) and one == model.tokenizer.decode(tokens[0].tolist()) and one.startswith("abc")
    assert isinstance(two, list) and len(two) == 2 and two[0] == one
    assert isinstance(model.generate("abc", max_new_tokens=2, return_type="str", verbose=False, do_sample=False), str)


@pytest.mark.parametrize("family", ["llama", "olmo2", "authors"])
def test_a_head_s_result_is_its_share_of_the_attention_output(family):
    """On every mechanism the family's attention runs: the heads' results add up to what o_proj gives (plus its
    bias), zeroing one head's result is zeroing its z, and the results are cached only after
    set_use_attn_result(True)."""
    from repo_lens.model.registry import family_attention, kinds_in_attention
    from repo_lens.model.tiny import tiny_model

    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    for kind in kinds_in_attention(family_attention(family)):
        model = tiny_model(kind, n_layers=2, family=family)
        with torch.no_grad():
            _, cache = model.run_with_cache(ids)
            assert "blocks.1.attn.hook_result" not in cache.cache_dict, kind
            model.set_use_attn_result(True)
            _, cache = model.run_with_cache(ids)
            model.set_use_attn_result(False)
            attn = model.blocks[1].attn
            expected = attn.o_proj(cache["blocks.1.attn.hook_z"].flatten(-2))
            torch.testing.assert_close(cache["blocks.1.attn.hook_result"].sum(-2) + model.b_O[1], expected,
                                       atol=1e-5, rtol=0, msg=kind)

            def zero_result(result, hook):
                result[:, :, 2] = 0.0

            def zero_z(z, hook):
                z[:, :, 2] = 0.0

            by_result = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_result", zero_result)])
            by_z = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_z)])
        torch.testing.assert_close(by_result, by_z, atol=1e-5, rtol=0, msg=kind)


def test_generate_from_embeddings_is_the_greedy_continuation_on_every_mechanism():
    """From the token embeddings, with and without the KV cache: the argmax of full forward passes over the
    embeddings followed by the new tokens'; refused where the model adds to the embeddings before block 0."""
    from repo_lens.errors import InputError
    from repo_lens.model.registry import mechanism_kinds
    from repo_lens.model.tiny import tiny_model

    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    for kind in mechanism_kinds():
        model = tiny_model(kind, n_layers=2)
        with torch.no_grad():
            embeddings = model.embed(ids)
            if hasattr(model, "shared_delta"):
                with pytest.raises(InputError, match="pass tokens"):
                    model.generate(embeddings, max_new_tokens=2, verbose=False)
                continue
            tokens = ids
            for _ in range(3):
                tokens = torch.cat((tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)), dim=1)
            for cached in (True, False):
                new = model.generate(embeddings, max_new_tokens=3, do_sample=False, stop_at_eos=False,
                                     use_past_kv_cache=cached, verbose=False)
                assert torch.equal(new, tokens[:, 5:]), (kind, cached)


def test_use_attn_result_is_refused_where_a_block_has_no_per_head_result():
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("rope")
    model.blocks[0].attn = torch.nn.Identity()
    with pytest.raises(NotImplementedError, match=r"use_attn_result.*block\(s\) \[0\]"):
        model.set_use_attn_result(True)
    model.set_use_attn_result(False)


def test_resid_mid_edits_reach_the_skip_connection_and_prepend_runs_first(models):
    """As HookedTransformer (TransformerLens 4's bridge differs on both): resid_post = the edited resid_mid +
    the MLP's output, and a hook added with prepend=True runs before those added earlier."""
    _, _, ours, _ = models
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        return lambda value, hook: seen.__setitem__(name, value.detach().clone())

    with torch.no_grad():
        ours.run_with_hooks(idioms._ids(), fwd_hooks=[("blocks.0.hook_resid_mid", lambda value, hook: value * 0.5),
                                                       ("blocks.0.hook_mlp_out", keep("mlp")),
                                                       ("blocks.0.hook_resid_post", keep("post"))])
        _, clean = ours.run_with_cache(idioms._ids())
    torch.testing.assert_close(seen["post"], 0.5 * clean["blocks.0.hook_resid_mid"] + seen["mlp"])
    calls: list[str] = []
    ours.add_hook("blocks.0.hook_resid_pre", lambda value, hook: calls.append("added first"))
    ours.add_hook("blocks.0.hook_resid_pre", lambda value, hook: calls.append("prepended"), prepend=True)
    try:
        with torch.no_grad():
            ours(idioms._ids())
    finally:
        ours.reset_hooks()
    assert calls == ["prepended", "added first"]


def test_a_wrapped_hook_point_is_computed_unless_nnsight_says_no_trace_waits():
    """A hook point whose forward another library wrapped is assumed to be read (so its value is computed);
    one nnsight wrapped is computed only while a trace waits on it (none outside a trace)."""
    from transformer_lens.hook_points import HookPoint

    from repo_lens.model.hooking import wants

    wrapped_by_another = HookPoint()
    wrapped_by_another.forward = lambda tensor: tensor
    assert wants(wrapped_by_another)
    nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'repo_lens[hf]')")
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo")
    nnsight.NNsight(model)
    point = model.blocks[1].attn.hook_pattern
    assert "forward" in point.__dict__ and not wants(point)
