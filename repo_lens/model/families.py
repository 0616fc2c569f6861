"""The block class of each block family (``ModelConfig.family``): the zoo's OLMo-2 and Llama blocks, and
the GRAPE / FoX authors' pre-norm block (imported on first use). The CoPE authors' decoder builds its
own blocks (:class:`repo_lens.model.authors.cope_model.CopeModel`)."""

from __future__ import annotations

from repo_lens.errors import CheckpointError
from repo_lens.model.blocks import BLOCKS, _Block


def block_class(family: str) -> type[_Block]:
    """The block of ``family``.

    >>> block_class("llama").__name__, block_class("authors").__name__
    ('LlamaBlock', 'AuthorsBlock')
    """
    if family == "authors":
        from repo_lens.model.authors.block import AuthorsBlock

        return AuthorsBlock
    if family not in BLOCKS:
        raise CheckpointError(f"block family {family!r} has no block a LensModel builds; the CoPE authors' "
                              "decoder is built by repo_lens.model.authors.cope_model.CopeModel")
    return BLOCKS[family]
