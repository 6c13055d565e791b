"""Encoders turn a dict of observation fields ([N, ...] tensors) into features [N, out_dim]."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from srl.data.named_array import NamedArray


class FlattenEncoder(nn.Module):
    """Concatenate every field, flattened, as float."""

    def __init__(self, spaces: Mapping[str, gym.Space]) -> None:
        super().__init__()
        self.fields = list(spaces)
        self.out_dim = sum(int(np.prod(spaces[k].shape)) for k in self.fields)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts = [obs[k].reshape(obs[k].shape[0], -1).float() for k in self.fields]
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)


def _nature_cnn(spaces: Mapping[str, gym.Space]) -> nn.Module:
    from srl.models.cnn import NatureCNN  # torchvision-free, but only needed for image policies

    return NatureCNN(spaces)


def _entity_attention(spaces: Mapping[str, gym.Space]) -> nn.Module:
    from srl.models.entity_attention import EntityAttentionEncoder

    return EntityAttentionEncoder(spaces)


ENCODERS = {"flatten": FlattenEncoder, "nature_cnn": _nature_cnn, "entity_attention": _entity_attention}


class ObsNormalizer(nn.Module):
    """Running mean and variance of every float field, kept as buffers (they ship with the weights).

    Integer fields (images, ids) pass through untouched. Statistics change only through
    `update`, which the trainer calls with each batch before learning from it.
    """

    def __init__(self, space: gym.spaces.Dict, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.fields = [k for k, s in space.spaces.items() if np.issubdtype(s.dtype, np.floating)]
        self.clip, self.eps = clip, eps
        for k in self.fields:
            shape = space[k].shape
            self.register_buffer(f"{k}_mean", torch.zeros(shape, dtype=torch.float64))
            self.register_buffer(f"{k}_var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for k in self.fields:
            mean, var = getattr(self, f"{k}_mean"), getattr(self, f"{k}_var")
            x = (obs[k].double() - mean) / torch.sqrt(var + self.eps)
            out[k] = x.clamp(-self.clip, self.clip).float()
        return out

    @torch.no_grad()
    def update(self, obs: NamedArray) -> None:
        """Merge a batch (any leading dims) into the running statistics (Chan et al.'s parallel update)."""
        n = None
        for k in self.fields:
            x = torch.as_tensor(np.asarray(obs[k]), dtype=torch.float64)
            shape = getattr(self, f"{k}_mean").shape
            x = x.reshape(-1, *shape)
            n = x.shape[0]
            if n == 0:
                return
            batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
            mean, var = getattr(self, f"{k}_mean"), getattr(self, f"{k}_var")
            delta = batch_mean - mean
            total = self.count + n
            mean += delta * n / total
            var.copy_((var * self.count + batch_var * n + delta.pow(2) * self.count * n / total) / total)
        if n:
            self.count += n
