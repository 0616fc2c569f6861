"""TransformerLens' ``forward``: text or token input, ``return_type`` "logits" / "loss" / "both" / None."""

from __future__ import annotations

from typing import Any

import torch

from repo_lens.errors import InputError
from repo_lens.model.cache import KVCache

RETURN_TYPES = ("logits", "loss", "both", None)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, per_token: bool = False,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of each next token (TransformerLens' ``lm_cross_entropy_loss``): [batch, pos − 1] per
    token, else its mean (over the real tokens where ``mask`` [batch, pos] marks them).

    >>> logits = torch.zeros(1, 3, 4)
    >>> round(float(next_token_loss(logits, torch.tensor([[0, 1, 2]]))), 4)
    1.3863
    """
    log_probs = logits.float().log_softmax(dim=-1)
    loss = -log_probs[:, :-1].gather(-1, tokens[:, 1:, None].to(logits.device))[..., 0]
    if per_token:
        return loss
    if mask is None:
        return loss.mean()
    real = mask[:, 1:].to(loss.device, loss.dtype)
    return (loss * real).sum() / real.sum()


class ForwardInterface:
    """``forward(input, return_type=..., loss_per_token=..., prepend_bos=..., padding_side=...)`` on top of
    the model's own ``forward_logits(input_ids, cache=..., rows_from=...)``."""

    def forward(self, input: Any, return_type: str | None = "logits", loss_per_token: bool = False,
                prepend_bos: bool | None = None, padding_side: str | None = None, **kwargs: Any) -> Any:
        """Logits [batch, pos, vocab] (or the loss, both, or None) of text, a list of texts, or token ids
        [batch, pos]; ``cache`` (a KVCache) and ``rows_from`` pass to the model's own forward.

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> model = tiny_model("rope")
            >>> model(torch.tensor([[1, 2, 3]]), return_type="loss", loss_per_token=True).shape
            torch.Size([1, 2])
        """
        if isinstance(return_type, KVCache):  # the model's own positional form: model(ids, cache)
            kwargs["cache"], return_type = return_type, "logits"
        if return_type not in RETURN_TYPES:
            raise InputError(f"return_type={return_type!r}; choose one of {RETURN_TYPES}")
        unknown = sorted(set(kwargs) - {"cache", "rows_from", "tokens"})
        if unknown:
            raise InputError(f"forward does not take {unknown}; it takes text or token ids, return_type, "
                             "loss_per_token, prepend_bos, padding_side, cache (a KVCache) and rows_from")
        tokens = self.tokens_of(input, prepend_bos, padding_side)  # type: ignore[attr-defined]
        kwargs.pop("tokens", None)
        logits = self.forward_logits(tokens, **kwargs)  # type: ignore[attr-defined]
        if return_type == "logits":
            return logits
        if return_type is None:
            return None
        mask = self._padding_mask(input, tokens, prepend_bos, padding_side)
        loss = next_token_loss(logits, tokens, loss_per_token, mask)
        return loss if return_type == "loss" else (logits, loss)

    def _padding_mask(self, input: Any, tokens: torch.Tensor, prepend_bos: bool | None,
                      padding_side: str | None) -> torch.Tensor | None:
        """[batch, pos] True at the real tokens of a padded list of texts; None for other input."""
        if not (isinstance(input, list) and input and isinstance(input[0], str)):
            return None
        lengths = torch.tensor([self.to_tokens(text, prepend_bos, move_to_device=False).shape[1]  # type: ignore[attr-defined]
                                for text in input])
        index = torch.arange(tokens.shape[1])[None, :]
        left = (padding_side or getattr(self.tokenizer, "padding_side", "right")) == "left"  # type: ignore[attr-defined]
        return index >= tokens.shape[1] - lengths[:, None] if left else index < lengths[:, None]
