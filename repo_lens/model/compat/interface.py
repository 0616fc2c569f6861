"""The root of every repo_lens model as TransformerLens' users know it (see the package docstring)."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import ActivationCache, HookedRootModule

from repo_lens.model.compat.blocks import transformer_lens_hook_names
from repo_lens.model.compat.forward import ForwardInterface
from repo_lens.model.compat.generate import GenerateInterface
from repo_lens.model.compat.tokens import TokenMethods
from repo_lens.model.compat.weights import WeightInterface


PATTERN_HOOKS = ("attn.hook_attn_scores", "attn.hook_pattern")  # computed in fp32; cached in the model's dtype


class TransformerLensInterface(TokenMethods, ForwardInterface, GenerateInterface, WeightInterface, HookedRootModule):
    """A ``HookedRootModule`` whose ``run_with_cache`` returns TransformerLens' ``ActivationCache``, whose norm
    hooks carry TransformerLens' names (``blocks.{l}.ln1.hook_scale``, ``ln_final.hook_normalized``), and
    that has TransformerLens' tokenizer helpers, forward, ``generate`` and weight names. A subclass defines
    ``forward_logits(input_ids, cache=None, ...)``; ``tokenizer`` is set by ``repo_lens.load``.

    Example:
        >>> import torch
        >>> from repo_lens.model.tiny import tiny_model
        >>> logits, cache = tiny_model("repo").run_with_cache(torch.tensor([[1, 2, 3]]))
        >>> type(cache).__name__, tuple(cache["pos", 2, "attn"].shape)
        ('ActivationCache', (1, 4, 3))
    """

    tokenizer: Any = None

    def setup(self) -> None:
        """TransformerLens' setup, then its names for the norms' hooks (the modules keep their checkpoint names)."""
        super().setup()
        renames = transformer_lens_hook_names(self)
        self.hook_dict = {renames.get(name, name): point for name, point in self.hook_dict.items()}
        for path, name in renames.items():
            self.hook_dict[name].name = name
            self.mod_dict[name] = self.hook_dict[name]

    def run_with_cache(self, *model_args: Any, return_cache_object: bool = True, remove_batch_dim: bool = False,
                       cache_dtype: torch.dtype | None = None, **kwargs: Any) -> tuple[Any, ActivationCache | dict]:
        """The output and an ``ActivationCache`` of every hook (or of ``names_filter``'s), as TransformerLens.

        The attention scores and pattern, computed in fp32 for exact edits, are cached in the model's dtype
        (as TransformerLens caches them; half the memory of a bf16 model's fp32 patterns) unless
        ``cache_dtype`` asks for another; positions are cached in fp32 whatever the model's dtype.
        """
        self._pattern_cache_dtype = cache_dtype
        try:
            output, cache = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        finally:
            self._pattern_cache_dtype = None
        if not return_cache_object:
            return output, cache
        return output, ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)

    def get_caching_hooks(self, *args: Any, **kwargs: Any) -> tuple[dict, list, list]:
        """TransformerLens' caching hooks; those of the attention scores and pattern store them in
        ``run_with_cache``'s ``cache_dtype`` (default: the model's dtype)."""
        cache, forward_hooks, backward_hooks = super().get_caching_hooks(*args, **kwargs)
        dtype = getattr(self, "_pattern_cache_dtype", None) or next(self.parameters()).dtype

        def in_dtype(save: Any) -> Any:
            return lambda tensor, hook, *rest, **options: save(tensor.to(dtype), hook, *rest, **options)

        forward_hooks = [(name, in_dtype(save) if name.endswith(PATTERN_HOOKS) else save)
                         for name, save in forward_hooks]
        return cache, forward_hooks, backward_hooks

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        result = super()._apply(fn, recurse)
        parameter = next(self.parameters(), None)
        if parameter is not None:
            self.cfg.device, self.cfg.dtype = parameter.device, parameter.dtype
        return result
