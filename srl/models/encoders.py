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


def _board_cnn(spaces: Mapping[str, gym.Space], **options: int) -> nn.Module:
    from srl.models.cnn import BoardCNN

    return BoardCNN(spaces, **options)


ENCODERS = {"flatten": FlattenEncoder, "nature_cnn": _nature_cnn, "entity_attention": _entity_attention,
            "board_cnn": _board_cnn}


def is_image(space: gym.Space) -> bool:
    """A [C, H, W] field of uint8 pixels."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


class ObsNormalizer(nn.Module):
    """Running mean and variance of every float field and of every pixel of uint8 images, kept
    as buffers (they ship with the weights).

    Per-pixel statistics turn the static parts of a screen (an Atari background) to about zero,
    so what moves stands out from the first update (Sample Factory's `normalize_input` does the
    same). Other integer fields (ids, masks) pass through untouched. Statistics change only
    through `update`, which the trainer calls with each batch before learning from it.
    """

    #: Rows of an image batch whose statistics are taken at once (a float copy of 256 stacked
    #: 84x84 frames is 29 MB; of a whole batch of 2048, 231 MB).
    IMAGE_CHUNK = 256

    def __init__(self, space: gym.spaces.Dict, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.fields = [k for k, s in space.spaces.items() if np.issubdtype(s.dtype, np.floating) or is_image(s)]
        #: Image fields are normalised in float32: in float64 a training batch would double its size again.
        self.images = {k for k in self.fields if is_image(space[k])}
        self.clip, self.eps = clip, eps
        for k in self.fields:
            shape = space[k].shape
            self.register_buffer(f"{k}_mean", torch.zeros(shape, dtype=torch.float64))
            self.register_buffer(f"{k}_var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    def output_space(self, space: gym.spaces.Dict) -> gym.spaces.Dict:
        """The fields as the encoders see them: normalised images are float, no longer pixels."""
        return gym.spaces.Dict({k: gym.spaces.Box(-self.clip, self.clip, s.shape, np.float32) if k in self.images else s
                                for k, s in space.spaces.items()})

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for k in self.fields:
            dtype = torch.float32 if k in self.images else torch.float64
            mean, var = getattr(self, f"{k}_mean").to(dtype), getattr(self, f"{k}_var").to(dtype)
            # In place on the one fresh copy: a training minibatch of images is millions of values.
            x = obs[k].to(dtype, copy=True).sub_(mean).mul_(torch.rsqrt(var + self.eps))
            out[k] = x.clamp_(-self.clip, self.clip).float()
        return out

    @torch.no_grad()
    def update(self, obs: NamedArray) -> None:
        """Merge a batch (any leading dims) into the running statistics (Chan et al.'s parallel update)."""
        n = None
        for k in self.fields:
            shape = getattr(self, f"{k}_mean").shape
            x = torch.as_tensor(np.asarray(obs[k])).reshape(-1, *shape)
            n = x.shape[0]
            if n == 0:
                return
            if k in self.images:
                batch_mean, batch_var = self._chunked_moments(x)
            else:
                x = x.double()
                batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
            mean, var = getattr(self, f"{k}_mean"), getattr(self, f"{k}_var")
            delta = batch_mean - mean
            total = self.count + n
            mean += delta * n / total
            var.copy_((var * self.count + batch_var * n + delta.pow(2) * self.count * n / total) / total)
        if n:
            self.count += n

    def _chunked_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (biased) variance over rows, float32 chunk by chunk, accumulated in float64."""
        total = torch.zeros(x.shape[1:], dtype=torch.float64)
        squares = torch.zeros_like(total)
        for start in range(0, x.shape[0], self.IMAGE_CHUNK):
            chunk = x[start:start + self.IMAGE_CHUNK].float()
            total += chunk.sum(0, dtype=torch.float64)
            squares += chunk.square().sum(0, dtype=torch.float64)
        mean = total / x.shape[0]
        return mean, (squares / x.shape[0] - mean.square()).clamp_min(0.0)
