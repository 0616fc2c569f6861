"""A tiny Llama written as a GGUF the way llama.cpp's converter does it (q/k rows permuted for
ggml's rotary layout, names blk.N.*, byte-level BPE tokenizer in the metadata), from a stock
transformers model — so repo_lens' GGUF path is tested without downloading anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

N_HEADS, N_KV_HEADS = 4, 2


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


TOKENS = ["<unk>", "<s>", "</s>"] + [bytes_to_unicode()[b] for b in range(256)] + ["Ġt", "he", "Ġthe"]
MERGES = ["Ġ t", "h e", "Ġt he"]


def tiny_llama(seed: int = 0):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=len(TOKENS), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=N_HEADS, num_key_value_heads=N_KV_HEADS, max_position_embeddings=256,
                         rms_norm_eps=1e-5, rope_theta=50000.0, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    return model


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.LlamaModel.permute."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def write_gguf(model, path: Path, extra_tensors: dict[str, np.ndarray] | None = None,
               drop: tuple[str, ...] = ()) -> Path:
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_file_type(0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    for name, tensor in model.state_dict().items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        array = tensor.detach().float().numpy()
        if name.startswith("model.layers."):
            _, _, layer, rest = name.split(".", 3)
            target = f"blk.{layer}.{_NAMES[rest]}"
            if rest == "self_attn.q_proj.weight":
                array = _permute(array, config.num_attention_heads)
            elif rest == "self_attn.k_proj.weight":
                array = _permute(array, config.num_key_value_heads)
        else:
            target = _NAMES[name]
        if target in drop:
            continue
        writer.add_tensor(target, np.ascontiguousarray(array))
    for name, array in (extra_tensors or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
