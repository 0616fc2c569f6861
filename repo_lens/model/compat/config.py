"""The configuration fields TransformerLens' utilities read from ``model.cfg``, derived from a ModelConfig."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class TransformerLensConfigFields:
    """Read-only TransformerLens names for a :class:`repo_lens.model.ModelConfig`'s shapes (``d_vocab``,
    ``n_ctx``, ``normalization_type``, …) and the mutable ``device`` / ``default_prepend_bos`` its
    utilities set. None of them is a config field: saved configs do not change.

    Example:
        >>> from repo_lens.model import ModelConfig
        >>> cfg = ModelConfig(family="llama", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
        ...                   d_mlp=64, layer_mechanisms=["rope", "rope"])
        >>> cfg.d_vocab, cfg.n_ctx, cfg.n_key_value_heads, cfg.normalization_type, str(cfg.device)
        (64, 2048, 2, 'RMS', 'cpu')
    """

    vocab_size: int
    max_position_embeddings: int
    n_heads: int
    n_kv_heads: int | None
    family: str
    extra: dict[str, Any]

    attn_only = False
    use_attn_result = False
    tokenizer_appends_eos = False  # True: to_tokens strips the EOS a tokenizer appends, as TransformerLens
    use_split_qkv_input = False
    use_hook_mlp_in = False
    use_attn_in = False
    ungroup_grouped_query_attention = False
    final_rms = True
    n_devices = 1
    positional_embedding_type = "rotary"
    tokenizer_prepends_bos = False

    @property
    def gated_mlp(self) -> bool:
        """False for the plain GELU MLP (``extra["mlp"] == "gelu"``), else True (SwiGLU)."""
        return self.extra.get("mlp", "swiglu") != "gelu"

    @property
    def act_fn(self) -> str:
        return "silu" if self.gated_mlp else "gelu"

    @property
    def d_vocab(self) -> int:
        return int(self.vocab_size)

    @property
    def d_vocab_out(self) -> int:
        return int(self.vocab_size)

    @property
    def n_ctx(self) -> int:
        return int(self.max_position_embeddings)

    @property
    def n_key_value_heads(self) -> int | None:
        """Key/value heads under grouped-query attention; None without it (TransformerLens' convention)."""
        kv = int(self.n_kv_heads or self.n_heads)
        return kv if kv != self.n_heads else None

    @property
    def normalization_type(self) -> str:
        return "LN" if self.family == "cope" else "RMS"

    @property
    def original_architecture(self) -> str:
        return {"olmo2": "Olmo2ForCausalLM", "llama": "LlamaForCausalLM"}.get(self.family, self.family)

    @property
    def model_name(self) -> str:
        return str(self.__dict__.get("_model_name", self.family))

    @property
    def device(self) -> "torch.device":
        import torch  # a config alone does not import torch

        return self.__dict__.get("_device", torch.device("cpu"))

    @device.setter
    def device(self, value: Any) -> None:
        import torch

        self.__dict__["_device"] = torch.device(value)

    @property
    def dtype(self) -> "torch.dtype":
        import torch

        return self.__dict__.get("_dtype", torch.float32)

    @dtype.setter
    def dtype(self, value: torch.dtype) -> None:
        self.__dict__["_dtype"] = value

    @property
    def default_prepend_bos(self) -> bool:
        return bool(self.__dict__.get("_default_prepend_bos", True))

    @default_prepend_bos.setter
    def default_prepend_bos(self, value: bool) -> None:
        self.__dict__["_default_prepend_bos"] = bool(value)
