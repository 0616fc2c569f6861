"""Decays: a recency bias computed once from the token embeddings and added to the scores of every layer, on top
of the rotation ("Learned position increments", Brendan Long: its ``decay`` option, which composes with every
position encoding of its code).

Per head h, log α_t ≤ 0 for each token t, and the levels A_t = Σ_{s≤t} log α_s; query i adds A_i − A_j to its
score q_i·k_j/√d on key j (≤ 0: the further back, the lower). Two decays (``ModelConfig.decay``):

- ``alibi``: log α = −m_h at every token, fixed slopes m_h = (2^(−8/H))^(h+1) for h = 0..H−1 (the post's own
  formula for every H), so A_i − A_j = −m_h·(i − j);
- ``forget``: a learned forget gate (the post's ``decay="learned"``, its ForgetMLP):
  log α = logsigmoid(fc2(gelu(fc1(e)))) from the token embedding e, one output per head; fc2's bias starts at 6.9
  (α ≈ 0.999, almost no decay) as in its code.

The model (``LensModel.decay``) computes log α once and passes it through ``hook_log_forget`` [batch, head, pos]
(write zeros there: no decay). Each layer sums it into its levels, which pass through its own
``attn.hook_decay`` [batch, head, pos], and adds A_i − A_j to its scores, so ``hook_attn_scores`` and
``hook_pattern`` include it. With a KV cache each layer keeps the levels of its keys (``position_states``), so
decoding token by token gives the full forward's scores. A decay runs on rotary layers of the zoo's block
families (OLMo-2, Llama): a layer whose mechanism biases the scores itself (FoX, ALiBi, CoPE, …) is refused.

Example:
    >>> cfg = ModelConfig(family="llama", vocab_size=8, d_model=16, n_layers=1, n_heads=4, d_mlp=8,
    ...                   layer_mechanisms=["rope"], decay="alibi")
    >>> AlibiDecay(cfg).log_forget(torch.zeros(1, 2, 16))[0, :, 0].tolist()
    [-0.25, -0.0625, -0.015625, -0.00390625]
    >>> levels = decay_levels(torch.full((1, 1, 3), -0.5), None)
    >>> levels.tolist(), decay_bias(levels, levels)[0, 0].tolist()
    ([[[-0.5, -1.0, -1.5]]], [[0.0, 0.5, 1.0], [-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.config import ModelConfig
from repo_lens.model.registry import mechanism_traits

FORGET_BIAS_INIT = 6.9  # the post's ForgetMLP: sigmoid(6.9) ≈ 0.999, log α ≈ −1e-3 at initialisation
DECAY_FAMILIES = ("olmo2", "llama")  # the block families whose attention adds a decay
LEVELS_STATE = "decay_keys"  # a layer's KV-cache state: the levels A of its cached keys [batch, head, keys]


def post_alibi_slopes(n_heads: int) -> list[float]:
    """The post's ALiBi slopes m_h = (2^(−8/H))^(h+1), h = 0..H−1 (for every H: no rule for H that is not a power
    of two, unlike the ALiBi paper's).

    >>> post_alibi_slopes(2), [round(m, 4) for m in post_alibi_slopes(3)]
    ([0.0625, 0.00390625], [0.1575, 0.0248, 0.0039])
    """
    ratio = 2.0 ** (-8.0 / n_heads)
    return [ratio ** (h + 1) for h in range(n_heads)]


class Decay(nn.Module):
    """Base of the decay modules: checks that every layer of ``cfg`` can add the bias."""

    name = ""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.family not in DECAY_FAMILIES:
            raise CheckpointError(f"decay={cfg.decay!r} runs in the {' and '.join(DECAY_FAMILIES)} block families; "
                                  f"family={cfg.family!r} has its own attention: use decay='none'")
        biased = sorted({kind for kind in cfg.layer_mechanisms if mechanism_traits(kind).role != "rotary"})
        if biased:
            raise CheckpointError(f"decay={cfg.decay!r} adds its bias on top of rotary layers; layers of kind "
                                  f"{biased} bias their scores themselves: give every layer a rotary kind (e.g. rope, "
                                  "repo, lpi) or use decay='none'")
        self.n_heads = cfg.n_heads

    def log_forget(self, embedded: torch.Tensor) -> torch.Tensor:
        """log α [batch, head, pos] (fp32) of the token embeddings ``embedded`` [batch, pos, d_model]."""
        raise NotImplementedError


class AlibiDecay(Decay):
    """The post's ``decay="alibi"``: log α = −m_h at every token (nothing learned, nothing saved)."""

    name = "alibi"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.slopes = tuple(post_alibi_slopes(cfg.n_heads))  # fixed: neither a parameter nor a saved buffer

    def log_forget(self, embedded: torch.Tensor) -> torch.Tensor:
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=embedded.device)
        return (-slopes)[None, :, None].expand(embedded.shape[0], len(self.slopes), embedded.shape[1])


class ForgetDecay(Decay):
    """The post's ``decay="learned"`` (its ForgetMLP): log α = logsigmoid(fc2(gelu(fc1(e)))), one per head, from
    the token embeddings; ``fc1`` d_model → ``decay_hidden_dim``, ``fc2`` → n_heads, both with biases."""

    name = "forget"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.fc1 = nn.Linear(cfg.d_model, cfg.decay_hidden_dim)
        self.fc2 = nn.Linear(cfg.decay_hidden_dim, cfg.n_heads)
        nn.init.zeros_(self.fc1.bias)
        nn.init.constant_(self.fc2.bias, FORGET_BIAS_INIT)

    def log_forget(self, embedded: torch.Tensor) -> torch.Tensor:
        with torch.autocast(embedded.device.type, enabled=False):  # fp32 under autocast too: log α is summed
            hidden = F.gelu(F.linear(embedded.float(), self.fc1.weight.float(), self.fc1.bias.float()))
            logit = F.linear(hidden, self.fc2.weight.float(), self.fc2.bias.float())
        return F.logsigmoid(logit).transpose(1, 2)


def decay_levels(log_forget: torch.Tensor, past: torch.Tensor | None) -> torch.Tensor:
    """The levels A = Σ_{s≤t} log α_s [batch, head, pos] of the new tokens, continued from the last of the ``past``
    keys' levels (a KV cache's; None: the first tokens)."""
    levels = torch.cumsum(log_forget.float(), dim=-1)
    return levels if past is None else levels + past[..., -1:]


def decay_bias(query_levels: torch.Tensor, key_levels: torch.Tensor) -> torch.Tensor:
    """The bias A_i − A_j [..., query, key] of query levels [..., query] over key levels [..., key]."""
    return query_levels[..., :, None] - key_levels[..., None, :]


def missing_decay(layer: int, decay: str) -> InputError:
    """The error of a layer of a model with a decay that is run without it (a block run on its own)."""
    return InputError(f"layer {layer} adds the model's decay (decay={decay!r}), which the model computes from the token "
                      "embeddings; this block was run on its own, without it: run the model from its tokens "
                      "(repo_lens.interventions' patch and ablation_grid rerun blocks from a cached residual stream "
                      "and cannot run a model with a decay; ablate can)")


class DecayRows:
    """What a decay layer's scores of a few query rows need beyond q·k/√d (for analyses that recompute them):
    the bias A_i − A_j from the layer's ``attn.hook_decay``."""

    row_bias_hooks: tuple[str, ...] = ("hook_decay",)  # attention hooks query_rows_bias reads

    @staticmethod
    def query_rows_bias(hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        """The bias [head, rows, keys] of query rows ``row_index`` over keys ``key_index``, from the layer's levels
        ``hooked["hook_decay"]`` [head, pos] of one sequence.

        >>> levels = torch.tensor([[0.0, -1.0, -3.0]])
        >>> DecayRows.query_rows_bias({"hook_decay": levels}, None, None, torch.tensor([2]), torch.arange(3)).tolist()
        [[[-3.0, -2.0, 0.0]]]
        """
        levels = hooked["hook_decay"]
        return decay_bias(levels[:, row_index], levels[:, key_index])


def layer_decay_rows(attention: nn.Module) -> DecayRows | None:
    """The decay's row bias of an attention layer (None where its model has no decay).

    >>> from repo_lens.model.tiny import tiny_model
    >>> layer_decay_rows(tiny_model("repo").blocks[0].attn) is None
    True
    """
    rows = getattr(attention, "decay_rows", None)
    return rows if isinstance(rows, DecayRows) else None
