"""Key/value cache for incremental decoding."""

from __future__ import annotations

import torch


class KVCache:
    """Per-layer keys (already rotated) and values, [batch, head, pos, d_head].

    Example:
        >>> cache = KVCache(n_layers=2)
        >>> cache.seq_len
        0
    """

    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        # per-layer state of position mechanisms with running sums (carry, FoX key positions)
        self.position_states: list[dict] = [{} for _ in range(n_layers)]

    @property
    def seq_len(self) -> int:
        first = self.keys[0]
        return 0 if first is None else first.shape[2]

    def append(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        past_key, past_value = self.keys[layer], self.values[layer]
        if past_key is not None and past_value is not None:
            key = torch.cat((past_key, key), dim=2)
            value = torch.cat((past_value, value), dim=2)
        self.keys[layer], self.values[layer] = key, value
        return key, value
