"""What makes a repo_lens model a TransformerLens model to its users, in one place.

:class:`~repo_lens.model.compat.interface.TransformerLensInterface` (a base of every ``LensModel``) gives
``run_with_cache`` returning TransformerLens' ``ActivationCache``, ``to_tokens`` / ``to_str_tokens`` /
``to_string``, string input and ``return_type``, ``generate``, ``W_Q`` … ``W_U`` and the factored ``OV`` /
``QK``, and TransformerLens' hook names for the norms; :class:`~repo_lens.model.compat.config.
TransformerLensConfigFields` the config fields its utilities read; :class:`~repo_lens.model.compat.
attention.AttentionWeights` and :class:`~repo_lens.model.compat.blocks.BlockNames` the per-layer weights and
norm names. Nothing here imports torch until a model is built.
"""
