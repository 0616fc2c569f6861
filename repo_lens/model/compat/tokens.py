"""TransformerLens' tokenizer helpers on a model that knows its tokenizer (``to_tokens``, ``to_str_tokens``,
``to_string``, ``to_single_token``), with TransformerLens' BOS default: prepend the tokenizer's BOS token."""

from __future__ import annotations

from typing import Any, cast

import torch

from repo_lens.errors import InputError


class TokenNotFoundError(InputError, AssertionError):
    """``get_token_position``'s token is not in the input (an ``AssertionError`` too, as TransformerLens raises)."""


class TokenMethods:
    """Tokenizer helpers; ``self.tokenizer`` is an HF tokenizer or repo_lens' ByteTokenizer (no BOS)."""

    tokenizer: Any
    cfg: Any

    def _require_tokenizer(self) -> Any:
        if getattr(self, "tokenizer", None) is None:
            raise InputError("this model has no tokenizer; load it with repo_lens.load(...) (lens.model has one) or "
                             "set model.tokenizer, or pass token ids instead of text")
        return self.tokenizer

    def _bos_id(self, prepend_bos: bool | None) -> int | None:
        prepend = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
        return getattr(self.tokenizer, "bos_token_id", None) if prepend else None

    def _encode(self, text: str) -> list[int]:
        tokenizer = self._require_tokenizer()
        if not hasattr(tokenizer, "bos_token_id"):  # ByteTokenizer
            return list(tokenizer.encode(text))
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None, padding_side: str | None = None,
                  move_to_device: bool = True, truncate: bool = True) -> torch.Tensor:
        """LongTensor [batch, pos] of a text or a list of texts (right-padded with the pad token, else 0;
        left-padded with ``padding_side="left"``, for reading, as the models take no attention mask).

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
            >>> model = tiny_model("rope"); model.tokenizer = ByteTokenizer()
            >>> model.to_tokens("hi").tolist()
            [[104, 105]]
        """
        texts = [input] if isinstance(input, str) else list(input)
        bos = self._bos_id(prepend_bos)
        rows = [([bos] if bos is not None else []) + self._encode(text) for text in texts]
        if truncate:
            rows = [row[: self.cfg.n_ctx] for row in rows]
        if not all(rows):
            raise InputError("the text is empty and the tokenizer adds no BOS token: give at least one character")
        eos = getattr(getattr(self, "tokenizer", None), "eos_token_id", None)
        if self.cfg.tokenizer_appends_eos and eos is not None:
            while all(len(row) > 1 and row[-1] == eos for row in rows):
                rows = [row[:-1] for row in rows]
        width = max(len(row) for row in rows)
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        left = padding_side == "left"  # right by default: the models take no attention mask
        tokens = torch.full((len(rows), width), pad, dtype=torch.long)
        for index, row in enumerate(rows):
            if row:
                start = width - len(row) if left else 0
                tokens[index, start:start + len(row)] = torch.tensor(row)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def to_string(self, tokens: Any) -> str | list[str]:
        """The text of token ids: a string for one sequence, a list for a batch [batch, pos]."""
        tokenizer = self._require_tokenizer()
        tokens = torch.as_tensor(tokens)
        if tokens.ndim == 2:
            return [tokenizer.decode(row.tolist()) for row in tokens]
        return tokenizer.decode(tokens.reshape(-1).tolist())

    def to_str_tokens(self, input: Any, prepend_bos: bool | None = None,
                      padding_side: str | None = None) -> list[str] | list[list[str]]:
        """Each token of a text (or of token ids) as a string; a list of those for a list of texts."""
        if isinstance(input, list) and input and isinstance(input[0], str):
            return [cast("list[str]", self.to_str_tokens(text, prepend_bos, padding_side)) for text in input]
        tokens = self.to_tokens(input, prepend_bos, padding_side, move_to_device=False)[0] if isinstance(input, str) \
            else torch.as_tensor(input).reshape(-1)
        tokenizer = self._require_tokenizer()
        return [tokenizer.decode([int(token)]) for token in tokens]

    def to_single_token(self, string: str) -> int:
        """The one token id of ``string`` (InputError if it is not one token)."""
        tokens = self.to_tokens(string, prepend_bos=False, move_to_device=False)[0]
        if tokens.numel() != 1:
            raise InputError(f"{string!r} is {tokens.numel()} tokens, not one; pick a string the tokenizer keeps whole")
        return int(tokens[0])

    def to_single_str_token(self, int_token: int) -> str:
        """The string of one token id.

        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> model = tiny_model("rope"); model.tokenizer = ByteTokenizer()
        >>> model.to_single_str_token(104)
        'h'
        """
        if isinstance(int_token, bool) or not isinstance(int_token, int):
            raise InputError(f"to_single_str_token takes one token id (an int), not {type(int_token).__name__}")
        return cast("list[str]", self.to_str_tokens(torch.tensor([int_token])))[0]

    def get_token_position(self, single_token: str | int | torch.Tensor, input: str | torch.Tensor, mode: str = "first",
                           prepend_bos: bool | None = None, padding_side: str | None = None) -> int:
        """The index of ``single_token`` (a string of one token, or its id) in ``input`` (a text, or token
        ids [pos] or [1, pos]): its first occurrence, or its last with ``mode="last"``, as TransformerLens.

        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> model = tiny_model("rope"); model.tokenizer = ByteTokenizer()
        >>> model.get_token_position("a", "banana"), model.get_token_position("a", "banana", mode="last")
        (1, 5)
        """
        tokens = self.to_tokens(input, prepend_bos, padding_side) if isinstance(input, str) else torch.as_tensor(input)
        if tokens.ndim == 2:
            if tokens.shape[0] != 1:
                raise InputError(f"token ids of shape {tuple(tokens.shape)}: give one sequence, [pos] or [1, pos]")
            tokens = tokens[0]
        if isinstance(single_token, str):
            single_token = self.to_single_token(single_token)
        elif isinstance(single_token, torch.Tensor):
            single_token = int(single_token.item())
        if mode not in ("first", "last"):
            raise InputError(f"mode must be 'first' or 'last', not {mode!r}")
        found = torch.nonzero(tokens == single_token).flatten()
        if not len(found):
            raise TokenNotFoundError(f"token {single_token} does not occur in the input")
        return int(found[0] if mode == "first" else found[-1])

    def tokens_of(self, input: Any, prepend_bos: bool | None = None, padding_side: str | None = None) -> torch.Tensor:
        """Token ids [batch, pos] on the model's device from text, a list of texts or ids."""
        if isinstance(input, str) or (isinstance(input, list) and input and isinstance(input[0], str)):
            return self.to_tokens(input, prepend_bos, padding_side)
        if not isinstance(input, torch.Tensor):
            raise InputError(f"the model takes text, a list of texts or a LongTensor [batch, pos] of token ids, "
                             f"not {type(input).__name__}")
        return input if input.ndim == 2 else input.reshape(1, -1)
