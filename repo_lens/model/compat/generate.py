"""TransformerLens' ``generate``: greedy or sampled continuation through the KV cache, stopping at EOS; on
request also the logits of each step and the activation cache of the whole output."""

from __future__ import annotations

from typing import Any, cast

import torch
from transformer_lens.utilities.logits_utils import sample_logits

from repo_lens.errors import InputError


class GenerateInterface:
    """``generate(input, max_new_tokens, stop_at_eos, eos_token_id, do_sample, top_k, top_p, temperature,
    freq_penalty, use_past_kv_cache, prepend_bos, padding_side, return_type, verbose, output_logits,
    return_cache, return_input_tokens, names_filter, device)`` as TransformerLens has it; sampling is
    TransformerLens' own ``sample_logits``."""

    def _check_embeddings(self, embeddings: torch.Tensor) -> None:
        """Embeddings [batch, pos, d_model] stand for what the token embedding gives; refused where the model
        adds to them before block 0 (absolute position embeddings, learned increments read from them)."""
        if embeddings.ndim != 3 or embeddings.shape[-1] != self.cfg.d_model:  # type: ignore[attr-defined]
            raise InputError(f"embeddings of shape {tuple(embeddings.shape)}: give [batch, pos, d_model] with "
                             f"d_model = {self.cfg.d_model}")  # type: ignore[attr-defined]
        if hasattr(self, "abs_pos_emb") or hasattr(self, "shared_delta"):
            raise InputError("this model adds absolute position embeddings or learned increments to the token "
                             "embeddings before block 0, so generating from embeddings would skip them: pass tokens")

    @torch.no_grad()
    def generate(self, input: Any = "", max_new_tokens: int = 10, stop_at_eos: bool = True,
                 eos_token_id: int | None = None, do_sample: bool = True, top_k: int | None = None,
                 top_p: float | None = None, temperature: float = 1.0, freq_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, use_past_kv_cache: bool = True, prepend_bos: bool | None = None,
                 padding_side: str | None = None, return_type: str | None = "input",
                 verbose: bool = True, output_logits: bool = False, return_cache: bool = False,
                 return_input_tokens: bool = False, names_filter: Any = None,
                 device: str | torch.device | None = None) -> Any:
        """The input continued by ``max_new_tokens`` tokens: a string for a text (``return_type="input"``
        or "str"), token ids [batch, pos + new] for token input or ``return_type="tokens"``; from
        embeddings [batch, pos, d_model] (what ``model.embed`` gives), the new tokens [batch, new], as
        TransformerLens.

        ``output_logits=True`` returns transformers' ``GenerateDecoderOnlyOutput`` (``sequences``, and
        ``logits``: one [batch, d_vocab] tensor per new token). ``return_cache=True`` also returns the
        ``run_with_cache`` of the whole output (prompt and new tokens; ``names_filter`` and ``device`` go
        to it), for one sequence of tokens or text; ``return_input_tokens=True`` also returns the prompt's
        tokens: ``(output, cache, input_tokens)``, as TransformerLens orders them.

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> model = tiny_model("repo")
            >>> model.generate(torch.tensor([[104, 105]]), max_new_tokens=3, do_sample=False, verbose=False).shape
            torch.Size([1, 5])
        """
        if return_type not in ("input", "str", "tokens"):
            raise InputError(f"return_type={return_type!r}; choose 'input', 'str' or 'tokens'")
        if return_cache:
            self._check_return_cache(input)
        if isinstance(input, list) and return_type != "tokens":  # texts of different lengths: one at a time,
            settings: dict[str, Any] = dict(max_new_tokens=max_new_tokens, stop_at_eos=stop_at_eos, eos_token_id=eos_token_id,
                            do_sample=do_sample, top_k=top_k, top_p=top_p, temperature=temperature,
                            freq_penalty=freq_penalty, repetition_penalty=repetition_penalty,
                            use_past_kv_cache=use_past_kv_cache, prepend_bos=prepend_bos, verbose=verbose)
            return [cast(str, self.generate(text, **settings)) for text in input]  # so no text continues after pads
        embeddings = input if isinstance(input, torch.Tensor) and input.is_floating_point() else None
        if embeddings is not None:
            self._check_embeddings(embeddings)
            tokens = torch.zeros(embeddings.shape[0], 0, dtype=torch.long, device=embeddings.device)
        else:
            tokens = self.tokens_of(input, prepend_bos, padding_side)  # type: ignore[attr-defined]
        input_tokens = tokens
        if stop_at_eos and eos_token_id is None:
            eos_token_id = getattr(getattr(self, "tokenizer", None), "eos_token_id", None)
        sampling = dict(top_k=top_k, top_p=top_p, temperature=temperature, freq_penalty=freq_penalty,
                        repetition_penalty=repetition_penalty) if do_sample else dict(
                            temperature=0.0, repetition_penalty=repetition_penalty)
        tokens, step_logits = self._decode(tokens, embeddings, max_new_tokens, sampling,
                                           eos_token_id if stop_at_eos else None, use_past_kv_cache, output_logits)
        result = self._generated(input, tokens, return_type, step_logits if output_logits else None)
        if not (return_cache or return_input_tokens):
            return result
        extras: tuple[Any, ...] = ()
        if return_cache:
            extras += (self.run_with_cache(tokens, names_filter=names_filter, device=device)[1],)  # type: ignore[attr-defined]
        if return_input_tokens:
            extras += (input_tokens,)
        return (result, *extras)

    def _decode(self, tokens: torch.Tensor, embeddings: torch.Tensor | None, max_new_tokens: int,
                sampling: dict[str, Any], eos_token_id: int | None, use_past_kv_cache: bool,
                output_logits: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(``tokens`` [batch, pos] with up to ``max_new_tokens`` sampled after them (a finished row repeats
        ``eos_token_id``), each step's last logits when ``output_logits``); from ``embeddings`` when given."""
        step_logits: list[torch.Tensor] = []
        finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        cache = self.new_cache() if use_past_kv_cache else None  # type: ignore[attr-defined]
        step_input = tokens
        for step in range(max_new_tokens):
            if embeddings is not None and (step == 0 or cache is None):  # the residual stream entering block 0
                stream = embeddings if step == 0 else torch.cat((embeddings, self.embed(tokens)), dim=1)  # type: ignore[attr-defined]
                logits = self(stream, start_at_layer=0, cache=cache)[:, -1]  # type: ignore[operator]
            else:
                logits = self(step_input, cache=cache)[:, -1]  # type: ignore[operator]  # through forward: hooks, the lock
            if output_logits:
                step_logits.append(logits)
            chosen = sample_logits(logits, tokens=tokens, **sampling)
            if eos_token_id is not None:
                chosen = torch.where(finished, torch.full_like(chosen, eos_token_id), chosen)
                finished |= chosen == eos_token_id
            tokens = torch.cat((tokens, chosen[:, None].to(tokens.dtype)), dim=1)
            step_input = chosen[:, None].to(tokens.dtype) if cache is not None else tokens
            if eos_token_id is not None and bool(finished.all()):
                break
        return tokens, step_logits

    def _generated(self, input: Any, tokens: torch.Tensor, return_type: str | None,
                   step_logits: list[torch.Tensor] | None) -> Any:
        if step_logits is not None:
            from transformers.generation.utils import GenerateDecoderOnlyOutput

            # transformers' hints: a LongTensor, and tuple[Tensor] for what is one tensor a step
            return GenerateDecoderOnlyOutput(sequences=cast(torch.LongTensor, tokens),
                                             logits=cast(Any, tuple(step_logits)))
        if return_type == "tokens" or (return_type == "input" and not isinstance(input, (str, list))):
            return tokens  # from embeddings: the new tokens alone, as TransformerLens
        tokenizer = self._require_tokenizer()  # type: ignore[attr-defined]
        special = {"skip_special_tokens": True} if hasattr(tokenizer, "bos_token_id") else {}
        texts = [tokenizer.decode(row.tolist(), **special) for row in tokens]
        # as TransformerLens: one text for a text or for token ids of one sequence, a list otherwise
        return texts[0] if isinstance(input, str) or (not isinstance(input, list) and len(texts) == 1) else texts

    @staticmethod
    def _check_return_cache(input: Any) -> None:
        if isinstance(input, torch.Tensor) and input.is_floating_point():
            raise NotImplementedError("generate(return_cache=True) needs token or text input, not inputs_embeds: "
                                      "generate the tokens, then run_with_cache them")
        if isinstance(input, list) or (isinstance(input, torch.Tensor) and input.ndim == 2 and input.shape[0] > 1):
            raise NotImplementedError("generate(return_cache=True) is not supported for batched input: "
                                      "generate one sequence at a time, or run_with_cache each generated one")
