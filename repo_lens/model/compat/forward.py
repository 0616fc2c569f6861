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
    token, else its mean; with ``mask`` [batch, pos] (1 at real tokens), only where a token and the next
    one are both real (0 elsewhere per token), as TransformerLens counts them.

    >>> logits = torch.zeros(1, 3, 4)
    >>> round(float(next_token_loss(logits, torch.tensor([[0, 1, 2]]))), 4)
    1.3863
    """
    log_probs = logits.float().log_softmax(dim=-1)
    loss = -log_probs[:, :-1].gather(-1, tokens[:, 1:, None].to(logits.device))[..., 0]
    if mask is None:
        return loss if per_token else loss.mean()
    mask = mask.to(loss.device).bool()
    pairs = mask[:, :-1] & mask[:, 1:]
    loss = loss.masked_fill(~pairs, 0.0)
    return loss if per_token else loss.sum() / pairs.sum()


def layer_range(n_layers: int, start_at_layer: int | None, stop_at_layer: int | None) -> tuple[int, int]:
    """The blocks ``start_at_layer``..``stop_at_layer`` − 1 run (negative counts from the end, as in
    TransformerLens).

    >>> layer_range(4, None, -1), layer_range(4, 2, None)
    ((0, 3), (2, 4))
    """
    def index(value: int | None, default: int, name: str) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not -n_layers <= value <= n_layers:
            raise InputError(f"{name}={value!r}: give a layer index from {-n_layers} to {n_layers}")
        return value + n_layers if value < 0 else value

    start, stop = index(start_at_layer, 0, "start_at_layer"), index(stop_at_layer, n_layers, "stop_at_layer")
    if start > stop:
        raise InputError(f"start_at_layer={start_at_layer} comes after stop_at_layer={stop_at_layer}: nothing would run")
    return start, stop


def _check_forward_arguments(input: Any, return_type: str | None, padding_side: str | None,
                             kwargs: dict[str, Any]) -> None:
    if return_type not in RETURN_TYPES:
        raise InputError(f"return_type={return_type!r}; choose one of {RETURN_TYPES}")
    unknown = sorted(set(kwargs) - {"cache", "rows_from"})
    if unknown:
        raise InputError(f"forward does not take {unknown}; it takes text or token ids, return_type, "
                         "loss_per_token, prepend_bos, padding_side, start_at_layer, stop_at_layer, tokens, "
                         "attention_mask, cache (a KVCache) and rows_from")
    if isinstance(input, list) and padding_side == "left":
        raise InputError("repo_lens models take no attention mask, so left padding would let each text attend to "
                         "its pads; pass padding_side='right' (causal attention never sees the pads after a text)")


class ForwardInterface:
    """``forward(input, return_type=..., loss_per_token=..., prepend_bos=..., padding_side=...)`` on top of
    the model's own ``forward_logits(input_ids, cache=..., rows_from=...)``."""

    def forward(self, input: Any, return_type: str | None = "logits", loss_per_token: bool = False,
                prepend_bos: bool | None = None, padding_side: str | None = None, start_at_layer: int | None = None,
                stop_at_layer: int | None = None, tokens: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """Logits [batch, pos, vocab] (or the loss, both, or None) of text, a list of texts, or token ids
        [batch, pos]; ``cache`` (a KVCache) and ``rows_from`` pass to the model's own forward.

        As in TransformerLens: ``stop_at_layer=k`` returns the residual stream entering block k (before
        the final norm when k is the number of layers) whatever ``return_type`` says; with
        ``start_at_layer=k`` the input is that residual stream [batch, pos, d_model] and the loss needs
        ``tokens``; ``attention_mask`` [batch, pos] (1 at real tokens) leaves padding out of the loss. The
        models take no attention mask in attention, so a mask must mark each row's tokens as a prefix
        (right padding, which causal attention never sees).

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> model = tiny_model("rope")
            >>> model(torch.tensor([[1, 2, 3]]), return_type="loss", loss_per_token=True).shape
            torch.Size([1, 2])
            >>> resid = model(torch.tensor([[1, 2, 3]]), stop_at_layer=1)
            >>> torch.allclose(model(resid, start_at_layer=1), model(torch.tensor([[1, 2, 3]])), atol=1e-6)
            True
        """
        if isinstance(return_type, KVCache):  # the model's own positional form: model(ids, cache)
            kwargs["cache"], return_type = return_type, "logits"
        _check_forward_arguments(input, return_type, padding_side, kwargs)
        if start_at_layer is not None or stop_at_layer is not None:
            kwargs.update(start_at_layer=start_at_layer, stop_at_layer=stop_at_layer)
        if start_at_layer is not None:
            if not (isinstance(input, torch.Tensor) and input.is_floating_point() and input.ndim == 3):
                raise InputError("with start_at_layer the input is the residual stream [batch, pos, d_model] entering "
                                 "that block (e.g. from stop_at_layer or a cache's resid_pre), not text or token ids")
            ids = input
        else:
            ids = self.tokens_of(input, prepend_bos, padding_side)  # type: ignore[attr-defined]
        output = self.forward_logits(ids, **kwargs)  # type: ignore[attr-defined]
        if stop_at_layer is not None or return_type == "logits":
            return output
        if return_type is None:
            return None
        if start_at_layer is not None:
            if tokens is None:
                raise InputError("a loss from start_at_layer needs the token ids it predicts: pass tokens=[batch, pos]")
            ids = tokens.to(output.device)
        if not loss_per_token and ids.shape[-1] < 2:
            raise InputError(f"a next-token loss needs at least two tokens (each token predicts the next); the input "
                             f"has {ids.shape[-1]}: pass a longer input, or loss_per_token=True for the (empty) "
                             "per-token losses")
        mask = self._loss_mask(attention_mask, ids) if attention_mask is not None else \
            self._padding_mask(input, ids, prepend_bos, padding_side)
        loss = next_token_loss(output, ids, loss_per_token, mask)
        return loss if return_type == "loss" else (output, loss)

    @staticmethod
    def _loss_mask(attention_mask: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        mask = torch.as_tensor(attention_mask).to(tokens.device).bool()
        if mask.shape != tokens.shape:
            raise InputError(f"attention_mask has shape {tuple(mask.shape)}; give one of the tokens' shape {tuple(tokens.shape)}")
        if (mask[:, 1:] & ~mask[:, :-1]).any():
            raise InputError("attention_mask marks a padding token before a real one (left padding); repo_lens models "
                             "take no attention mask in attention, so pad on the right (causal attention never sees "
                             "the pads after a text)")
        return mask

    def _padding_mask(self, input: Any, tokens: torch.Tensor, prepend_bos: bool | None,
                      padding_side: str | None) -> torch.Tensor | None:
        """[batch, pos] True at the real tokens of a padded list of texts; None for other input."""
        if not (isinstance(input, list) and input and isinstance(input[0], str)):
            return None
        lengths = torch.tensor([self.to_tokens(text, prepend_bos, move_to_device=False).shape[1]  # type: ignore[attr-defined]
                                for text in input])
        index = torch.arange(tokens.shape[1])[None, :]
        return index < lengths[:, None]  # right-padded (forward refuses left padding)
