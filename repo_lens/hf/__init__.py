"""The generic path: any Hugging Face causal LM (Qwen, Mistral, Gemma, …) beside RePo, via nnsight.

For architectures repo_lens has no adapter for. Positions are the model's own ``position_ids``
(0..T−1), every layer "rope"; attention mass comes from the model's eager attention weights,
reduced to per-span sums inside the nnsight trace.

**Memory**: eager attention materialises a [heads, T, T] matrix in every layer (one layer at a
time): ≈ heads × T² × 8 bytes in fp32 — 4 GiB for 32 heads at 4K tokens, 16 GiB at 8K. repo_lens'
own adapters (Llama, OLMo-2, RePo; ``repo_lens.analysis.attention_mass``) compute only the query
rows and never build T × T. Needs ``pip install nnsight`` (extra ``repo_lens[hf]``).

Example:
    >>> from repo_lens.hf import load_hf, trace_hf, attention_mass_hf    # doctest: +SKIP
    >>> qwen = load_hf("/models/Qwen2.5-0.5B")                            # doctest: +SKIP
    >>> trace_hf(qwen, "The needle is in the haystack").layer_kinds[:2]   # doctest: +SKIP
    ['rope', 'rope']
    >>> attention_mass_hf(qwen, ids, {"needle": (10, 15)}, (40, 44)).per_token   # doctest: +SKIP
"""

from repo_lens.hf.analysis import HFLoadOptions, attention_mass_hf, trace_hf
from repo_lens.hf.model import HFLens, eager_attention_bytes, find_attention_paths, load_hf, memory_message

__all__ = ["HFLens", "HFLoadOptions", "attention_mass_hf", "eager_attention_bytes", "find_attention_paths", "load_hf",
           "memory_message", "trace_hf"]
