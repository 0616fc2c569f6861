"""The root of every repo_lens model as TransformerLens' users know it (see the package docstring)."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import HookedRootModule
from transformer_lens.utilities import Slice

from repo_lens.errors import InputError
from repo_lens.model.compat.blocks import transformer_lens_hook_names
from repo_lens.model.compat.cache import LensActivationCache
from repo_lens.model.compat.forward import ForwardInterface
from repo_lens.model.compat.generate import GenerateInterface
from repo_lens.model.compat.heads import HeadMethods
from repo_lens.model.compat.tokens import TokenMethods
from repo_lens.model.compat.weights import WeightInterface
from repo_lens.model.former_names import FormerHookNames, current_hook_filter


RESULT_HOOK = "attn.hook_result"  # cached only after set_use_attn_result(True)
PATTERN_HOOKS = ("attn.hook_attn_scores", "attn.hook_pattern")  # computed in fp32; cached in the model's dtype
# hooks whose last axis is the token ([batch, head, pos]): positions and the increments that sum to them, a
# decay's log α and levels
LAST_AXIS_HOOKS = ("hook_pos", "hook_delta", "hook_head_delta", "hook_query_delta", "hook_log_forget", "hook_decay")
# [batch, pos, head, d_head]: TransformerLens' own, and the rotated queries and keys
HEAD_VECTOR_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result", "hook_rot_q", "hook_rot_k")


def _without_batch_dim(hook: Any) -> Any:
    def wrapped(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(tensor, torch.Tensor) and tensor.dim() and tensor.shape[0] == 1):
            return hook(tensor, *args, **kwargs)
        out = hook(tensor[0], *args, **kwargs)  # a view: edits in place reach the run
        return out.unsqueeze(0) if isinstance(out, torch.Tensor) else out

    return wrapped


def _gradient_leaf(tensor: torch.Tensor, hook: Any) -> torch.Tensor | None:
    """The embedding as a tensor that requires grad (a copy: the model may edit it in place), when it does not."""
    if tensor.requires_grad or not tensor.is_floating_point() or not torch.is_grad_enabled():
        return None
    return tensor.detach().requires_grad_(True).clone()


def _check_batch_of_one(inputs: Any) -> None:
    """Refuse, before the run, a batch of several inputs for ``remove_batch_dim=True`` (as TransformerLens)."""
    if isinstance(inputs, torch.Tensor):
        batch = inputs.shape[0] if inputs.ndim > 1 else 1
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(item, str) for item in inputs):
        batch = len(inputs)
    else:
        return
    if batch != 1:
        raise InputError(f"remove_batch_dim=True drops the batch axis, which needs a batch of one input; got a batch "
                         f"of {batch}: run the inputs one at a time, or leave remove_batch_dim out")


def position_axis(name: str) -> int:
    """The token axis of hook ``name``'s tensor, counted from the end (TransformerLens' rule: −3 for
    per-head vectors, −2 for everything else, which includes the query axis of attention scores).

    >>> position_axis("blocks.3.attn.hook_pos"), position_axis("blocks.3.attn.hook_rot_q"), position_axis("hook_embed")
    (-1, -3, -2)
    """
    leaf = name.rsplit(".", 1)[-1]
    if leaf in LAST_AXIS_HOOKS:
        return -1
    return -3 if leaf in HEAD_VECTOR_HOOKS else -2


class TransformerLensInterface(TokenMethods, ForwardInterface, GenerateInterface, WeightInterface, HeadMethods,
                               HookedRootModule):
    """A ``HookedRootModule`` whose ``run_with_cache`` returns TransformerLens' ``ActivationCache`` (one that
    applies the norms' weights as loaded: :mod:`repo_lens.model.compat.cache`), whose norm
    hooks carry TransformerLens' names (``blocks.{l}.ln1.hook_scale``, ``ln_final.hook_normalized``), and
    that has TransformerLens' tokenizer helpers, forward, ``generate`` and weight names. A subclass defines
    ``forward_logits(input_ids, cache=None, ...)``; ``tokenizer`` is set by ``repo_lens.load``.

    Example:
        >>> import torch
        >>> from repo_lens.model.tiny import tiny_model
        >>> logits, cache = tiny_model("repo").run_with_cache(torch.tensor([[1, 2, 3]]))
        >>> from transformer_lens import ActivationCache
        >>> isinstance(cache, ActivationCache), tuple(cache["pos", 2, "attn"].shape)
        (True, (1, 4, 3))
    """

    tokenizer: Any = None

    @property
    def original_model(self) -> torch.nn.Module:
        """The module that holds the weights: TransformerLens' bridge wraps a Hugging Face model under this
        name; a repo_lens model runs its checkpoint itself, so it is the model (``original_model.parameters()``
        are its parameters)."""
        return self

    def setup(self) -> None:
        """TransformerLens' setup, then its names for the norms' hooks (the modules keep their checkpoint names);
        a hook's former name (:mod:`repo_lens.model.former_names`) finds it too, with a DeprecationWarning."""
        super().setup()
        renames = transformer_lens_hook_names(self)
        self.hook_dict = FormerHookNames({renames.get(name, name): point for name, point in self.hook_dict.items()})
        self.mod_dict = FormerHookNames(self.mod_dict)
        for path, name in renames.items():
            self.hook_dict[name].name = name
            self.mod_dict[name] = self.hook_dict[name]

    def add_hook(self, name: Any, hook: Any, *args: Any, **kwargs: Any) -> None:
        """TransformerLens' ``add_hook``; a former hook name (or a filter of former names) still works, and warns."""
        super().add_hook(current_hook_filter(name), hook, *args, **kwargs)

    def _enable_hook(self, name: Any, hook: Any, dir: Any) -> None:
        """The hook that ``hooks()`` and ``run_with_hooks`` add, found by its name (a former name warns)."""
        super()._enable_hook(current_hook_filter(name), hook, dir)

    def add_caching_hooks(self, names_filter: Any = None, *args: Any, **kwargs: Any) -> dict:
        """TransformerLens' ``add_caching_hooks``; ``names_filter`` may name hooks by a former name (it warns)."""
        return super().add_caching_hooks(current_hook_filter(names_filter), *args, **kwargs)

    def run_with_cache(self, *model_args: Any, return_cache_object: bool = True, remove_batch_dim: bool = False,
                       cache_dtype: torch.dtype | None = None, **kwargs: Any) -> tuple[Any, LensActivationCache | dict]:
        """The output and an ``ActivationCache`` of every hook (or of ``names_filter``'s), as TransformerLens.

        The attention scores and pattern, computed in fp32 for exact edits, are cached in the model's dtype
        (as TransformerLens caches them; half the memory of a bf16 model's fp32 patterns) unless
        ``cache_dtype`` asks for another; positions are cached in fp32 whatever the model's dtype.
        """
        if remove_batch_dim:
            _check_batch_of_one(model_args[0] if model_args else kwargs.get("input"))
            if model_args and isinstance(model_args[0], torch.Tensor) and model_args[0].ndim == 1:
                model_args = (model_args[0][None], *model_args[1:])  # one sequence of ids: a batch of one
        if kwargs.get("incl_bwd"):
            self._check_backward_run(kwargs)
        self._pattern_cache_dtype = cache_dtype
        try:
            output, cache = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        finally:
            self._pattern_cache_dtype = None
        if not return_cache_object:
            return output, cache
        return output, LensActivationCache(cache, self, has_batch_dim=not remove_batch_dim)

    def _check_backward_run(self, kwargs: dict) -> None:
        """Refuse, before the forward, an ``incl_bwd`` run whose backward pass cannot happen (as TransformerLens)."""
        if kwargs.get("return_type", "logits") != "loss":
            raise InputError("incl_bwd=True calls backward() on the output, which must be a scalar output: pass "
                             'return_type="loss" (or run the backward pass yourself with run_with_hooks)')
        if kwargs.get("loss_per_token"):
            raise InputError("incl_bwd=True calls backward() on the loss, which must be one number, but "
                             "loss_per_token=True gives one per token: leave loss_per_token out (the mean loss), or "
                             "take the per-token losses from run_with_hooks and call backward() on what you choose")
        if kwargs.get("stop_at_layer") is not None:
            raise InputError("incl_bwd=True cannot be combined with stop_at_layer: the run returns the residual stream "
                             "at that layer, not a scalar to call backward() on; leave stop_at_layer out")
        if not torch.is_grad_enabled():
            raise InputError("incl_bwd=True needs autograd, but gradient tracking is off (torch.no_grad(), "
                             "set_grad_enabled(False) or inference mode): run the call with gradients enabled")
        if not any(parameter.requires_grad for parameter in self.parameters()):
            raise InputError("incl_bwd=True would get an output with no grad_fn: every parameter has "
                             "requires_grad=False, so there is nothing to differentiate; call "
                             "model.requires_grad_(True) first")

    def run_with_hooks(self, *model_args: Any, fwd_hooks: Any = (), bwd_hooks: Any = (), reset_hooks_end: bool = True,
                       clear_contexts: bool = False, remove_batch_dim: bool = False, **model_kwargs: Any) -> Any:
        """TransformerLens' ``run_with_hooks``; with ``remove_batch_dim`` each hook sees a tensor whose
        leading dimension of size 1 is dropped (and a tensor it returns gets it back), as its bridge does."""
        if remove_batch_dim:
            fwd_hooks = [(name, _without_batch_dim(hook)) for name, hook in fwd_hooks]
            bwd_hooks = [(name, _without_batch_dim(hook)) for name, hook in bwd_hooks]
        return super().run_with_hooks(*model_args, fwd_hooks=list(fwd_hooks), bwd_hooks=list(bwd_hooks),
                                      reset_hooks_end=reset_hooks_end, clear_contexts=clear_contexts, **model_kwargs)

    def get_caching_hooks(self, names_filter: Any = None, incl_bwd: bool = False, device: Any = None,
                          remove_batch_dim: bool = False, cache: dict | None = None,
                          pos_slice: Any = None) -> tuple[dict, list, list]:
        """TransformerLens' caching hooks, with ``pos_slice`` applied on each hook's own position axis (the
        last of ``hook_pos`` [batch, head, pos] and the increments, the third from last of ``hook_rot_q`` /
        ``hook_rot_k`` [batch, pos, head, d_head]; TransformerLens' rule for its own hooks); the attention
        scores and pattern stored in ``run_with_cache``'s ``cache_dtype`` (default: the model's dtype); the
        heads' results (``attn.hook_result``) only after ``set_use_attn_result(True)``, as TransformerLens.
        ``names_filter`` may name hooks by a former name (it warns)."""
        cache, forward_hooks, backward_hooks = super().get_caching_hooks(
            current_hook_filter(names_filter), incl_bwd, device, remove_batch_dim=remove_batch_dim, cache=cache, pos_slice=None)
        if not getattr(self.cfg, "use_attn_result", False):  # [batch, pos, head, d_model] a layer: as TransformerLens,
            forward_hooks = [hook for hook in forward_hooks if not hook[0].endswith(RESULT_HOOK)]  # only when asked for
            backward_hooks = [hook for hook in backward_hooks if not hook[0].endswith(RESULT_HOOK)]
        slicer = None if pos_slice is None else Slice.unwrap(pos_slice)
        dtype = getattr(self, "_pattern_cache_dtype", None) or next(self.parameters()).dtype

        def wrapped(name: str, save: Any) -> Any:
            cast = name.endswith(PATTERN_HOOKS)
            axis = position_axis(name)

            def hook(tensor: torch.Tensor, hook: Any, *rest: Any, **options: Any) -> Any:
                if cast:
                    tensor = tensor.to(dtype)
                if slicer is not None and tensor.dim() >= -axis:
                    tensor = slicer.apply(tensor, dim=axis)
                return save(tensor, hook, *rest, **options)

            return hook

        # Gradients through a hook on the tensor each hook point hands on, not TransformerLens' module backward
        # hooks: autograd's own gradient of that tensor, bit for bit (the module hooks' extra node reorders sums).
        # With some weights frozen (requires_grad=False) the activations before the first trainable one would
        # carry no gradient; an activation's gradient needs no weight's, so the embedding is made a leaf that
        # requires one, and every activation that depends on the input gets its gradient, as with none frozen.
        leaf = [("hook_embed", _gradient_leaf)] if incl_bwd and backward_hooks and not all(
            parameter.requires_grad for parameter in self.parameters()) else []

        def gradient_of(name: str, save: Any) -> Any:
            keep = wrapped(name, save)

            def hook(tensor: torch.Tensor, hook: Any) -> None:
                if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                    tensor.register_hook(lambda gradient: keep(gradient, hook))

            return hook

        return (cache, leaf + [(name, wrapped(name, save)) for name, save in forward_hooks]
                + [(name, gradient_of(name, save)) for name, save in backward_hooks], [])

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        result = super()._apply(fn, recurse)
        parameter = next(self.parameters(), None)
        if parameter is not None:
            self.cfg.device, self.cfg.dtype = parameter.device, parameter.dtype
        return result
