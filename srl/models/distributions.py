"""Action heads: a network output becomes a distribution over the env's action space."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from srl.models.masks import mask_scores, mask_scores_numpy

#: The smallest exponential draw Gumbel-max sampling uses where actions are masked.
_TINY = 1e-30


class Categorical:
    """A categorical over the last dim, given logits.

    Not `torch.distributions.Categorical`: its construction and argument checks cost as much
    per call as a small MLP's forward pass (docs/benchmarks.md, "Measurements behind the code").
    Sampling is Gumbel-max: argmax(log p - log E), E ~ Exp(1).
    """

    def __init__(self, logits: torch.Tensor, masked: bool = False) -> None:
        self.logp = torch.log_softmax(logits, -1)
        self.masked = masked

    def sample(self) -> torch.Tensor:
        noise = torch.empty_like(self.logp).exponential_()
        if self.masked:  # a draw of exactly 0 would lift an illegal action's score to +inf
            noise.clamp_(min=_TINY)
        return torch.argmax(self.logp - noise.log(), -1)

    def mode(self) -> torch.Tensor:
        return self.logp.argmax(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        p_log_p = self.logp.exp() * self.logp
        return -torch.where(torch.isfinite(self.logp), p_log_p, 0.0).sum(-1)  # 0 log 0 = 0


class DiagonalNormal:
    """A Gaussian over the last dim with a diagonal covariance, given its mean and log std.

    Not `torch.distributions.Normal` (per dim, summed by the caller): its broadcasting and
    checks cost more than the sample and log-prob themselves at acting batch sizes, and each
    extra op is also an extra node in the training step's backward pass.
    """

    _HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean, self.log_std = mean, log_std

    def sample(self) -> torch.Tensor:
        return torch.addcmul(self.mean, self.log_std.exp(), torch.randn_like(self.mean))

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        z = (action - self.mean) * torch.exp(-self.log_std)
        return -0.5 * z.pow(2).sum(-1) - (self.log_std.sum(-1) + self.mean.shape[-1] * self._HALF_LOG_2PI)

    def entropy(self) -> torch.Tensor:
        per_row = self.log_std.sum(-1) + self.mean.shape[-1] * (0.5 + self._HALF_LOG_2PI)
        return per_row.expand(self.mean.shape[:-1])


#: What a head returns: one categorical per discrete action dim, or one Gaussian over a Box.
Distribution = Categorical | DiagonalNormal


class ActionHead(nn.Module):
    """Maps features to a distribution; `log_prob` and `entropy` sum over action dims."""

    def __init__(self, in_dim: int, space: gym.Space, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.space = space
        if isinstance(space, gym.spaces.Discrete):
            self.nvec = [int(space.n)]
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.nvec = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
        elif isinstance(space, gym.spaces.Box):
            self.nvec = []
            dim = int(np.prod(space.shape))
            self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))  # state-independent, as in PPO's paper
        else:
            raise TypeError(f"unsupported action space {space}")
        self.linear = nn.Linear(in_dim, sum(self.nvec) if self.nvec else int(np.prod(space.shape)))
        nn.init.orthogonal_(self.linear.weight, 0.01)
        nn.init.zeros_(self.linear.bias)

    @property
    def action_shape(self) -> tuple[int, ...]:
        if isinstance(self.space, gym.spaces.Discrete):
            return ()
        return tuple(self.space.shape)

    @property
    def action_dtype(self) -> np.dtype:
        return np.dtype(np.float32) if not self.nvec else np.dtype(np.int64)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> list[Distribution]:
        """`mask` [N, sum of the discrete dims' sizes]: 0 where an action is illegal (`srl.models.masks`)."""
        out = mask_scores(self.linear(features), mask)
        if not self.nvec:
            return [DiagonalNormal(out, self.log_std)]
        masked = mask is not None
        if len(self.nvec) == 1:
            return [Categorical(out, masked)]
        return [Categorical(logits, masked) for logits in out.split(self.nvec, dim=-1)]

    def sample(self, dists: list[Distribution], deterministic: bool) -> torch.Tensor:
        if not self.nvec:
            action = dists[0].mode() if deterministic else dists[0].sample()
            return action.reshape(*action.shape[:-1], *self.action_shape)
        parts = [d.mode() if deterministic else d.sample() for d in dists]
        if isinstance(self.space, gym.spaces.Discrete):
            return parts[0]
        return torch.stack(parts, -1).reshape(*parts[0].shape, *self.action_shape)

    def log_prob(self, dists: list[Distribution], action: torch.Tensor) -> torch.Tensor:
        if not self.nvec:
            flat = action.reshape(*action.shape[: action.dim() - len(self.action_shape)], -1)
            return dists[0].log_prob(flat)
        if isinstance(self.space, gym.spaces.Discrete):
            return dists[0].log_prob(action)
        flat = action.reshape(*action.shape[: action.dim() - len(self.action_shape)], -1)
        return sum(d.log_prob(flat[..., i]) for i, d in enumerate(dists))

    def entropy(self, dists: list[Distribution]) -> torch.Tensor:
        if not self.nvec:
            return dists[0].entropy()
        return sum(d.entropy() for d in dists)

    def sample_numpy(self, out: np.ndarray, log_std: np.ndarray | None, rng: np.random.Generator,
                     deterministic: bool, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`sample` and `log_prob` for acting in NumPy (srl/models/numpy_forward.py): the head's
        linear output `out` [N, ...] (and a copy of `log_std`) to actions and float32 log-probs,
        never an action `mask` marks illegal."""
        rows = len(out)
        mask_scores_numpy(out, mask)
        if not self.nvec:  # the Gaussian: action = mean + std * noise, so its z is the noise
            noise = np.zeros_like(out) if deterministic else rng.standard_normal(out.shape, np.float32)
            action = out + np.exp(log_std) * noise
            logprob = -0.5 * np.square(noise).sum(-1) - (log_std.sum() + out.shape[-1] * DiagonalNormal._HALF_LOG_2PI)
            return action.reshape(rows, *self.action_shape), logprob.astype(np.float32)
        parts, logprob = [], 0.0
        for logits in np.split(out, np.cumsum(self.nvec)[:-1], axis=-1):
            logp = logits - logits.max(-1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
            # Gumbel-max, as `Categorical.sample`.
            if deterministic:
                action = logp.argmax(-1)
            else:
                noise = rng.exponential(size=logp.shape)
                if mask is not None:  # as `Categorical.sample`
                    np.maximum(noise, _TINY, out=noise)
                action = (logp - np.log(noise)).argmax(-1)
            logprob = logprob + np.take_along_axis(logp, action[:, None], -1)[:, 0]
            parts.append(action)
        if isinstance(self.space, gym.spaces.Discrete):
            return parts[0], np.asarray(logprob, np.float32)
        return np.stack(parts, -1).reshape(rows, *self.action_shape), np.asarray(logprob, np.float32)
