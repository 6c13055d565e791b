"""Entity attention: a permutation-invariant encoder for observations made of entity lists.

Fields are sorted by shape: 1-D float fields (the agent itself, lidar) form the *self*
vector; a 2-D field `[n, features]` with a boolean `<name>_visible` (preferred) or
`<name>_mask` field is a list of `n` entities, whose masked-out rows are ignored. Each
entity type is embedded (with the self vector appended, so it is seen relative to the
agent), the self token and all entities go through one masked multi-head self-attention
block (residual, layer norm, dense), and the live tokens are mean-pooled. A policy that
reads `*_visible` masks acts only on what it sees; a critic that reads `*_mask` sees all.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def _is_mask(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.bool_


class EntityAttentionEncoder(nn.Module):
    def __init__(self, spaces: Mapping[str, gym.Space], width: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.self_fields = [k for k, s in spaces.items() if len(s.shape) == 1 and not _is_mask(s)]
        self.entities: list[tuple[str, str]] = []
        for name, space in spaces.items():
            if len(space.shape) != 2:
                continue
            mask = next((m for m in (f"{name}_visible", f"{name}_mask") if m in spaces), None)
            if mask is None:
                raise ValueError(f"entity field {name!r} needs a boolean {name}_visible or {name}_mask field")
            self.entities.append((name, mask))
        if not self.self_fields:
            raise ValueError("entity attention needs at least one 1-D field describing the agent itself")
        self_dim = sum(int(np.prod(spaces[k].shape)) for k in self.self_fields)
        self.self_embed = nn.Linear(self_dim, width)
        self.entity_embed = nn.ModuleDict({
            name: nn.Linear(int(spaces[name].shape[1]) + self_dim, width) for name, _ in self.entities})
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.dense = nn.Linear(width, width)
        self.out_dim = 2 * width

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        me = torch.cat([obs[k].float() for k in self.self_fields], -1)
        self_token = torch.relu(self.self_embed(me))
        tokens, masks = [self_token[:, None]], [torch.ones(me.shape[0], 1, dtype=torch.bool, device=me.device)]
        for name, mask in self.entities:
            entities = obs[name].float()
            context = me[:, None].expand(-1, entities.shape[1], -1)
            tokens.append(torch.relu(self.entity_embed[name](torch.cat([entities, context], -1))))
            masks.append(obs[mask].bool())
        x, live = torch.cat(tokens, 1), torch.cat(masks, 1)
        attended, _ = self.attention(x, x, x, key_padding_mask=~live, need_weights=False)
        y = torch.relu(self.dense(self.norm(x + attended)))
        weights = live.unsqueeze(-1).float()
        pooled = (y * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return torch.cat([pooled, self_token], -1)
