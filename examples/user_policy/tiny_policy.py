"""A policy written from `srl.api.policy` alone: an MLP actor-critic in plain torch.

Name it in a config by import path (with `examples/` on PYTHONPATH)::

    srl train cartpole-ppo policy.type=user_policy.tiny_policy:TinyPolicy

Observation fields are flattened and concatenated (in the space's field order), optionally
normalised with running statistics; two MLPs give the action distribution (categorical for
`Discrete`, diagonal Gaussian with a learned log std for `Box`) and the value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from srl.api.policy import Analysis, Policy
from srl.data import keys
from srl.data.named_array import NamedArray


def mlp(sizes: Sequence[int], activation: type[nn.Module], out_gain: float) -> nn.Sequential:
    """Linear layers of `sizes`, the activation between them; orthogonal init, a small last layer."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        linear = nn.Linear(a, b)
        nn.init.orthogonal_(linear.weight, out_gain if last else np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear] if last else [linear, activation()]
    return nn.Sequential(*layers)


class RunningNorm(nn.Module):
    """Running mean and variance of the flat observation, as buffers (they ship with the params)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.tensor(1e-4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10, 10)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        n, delta = x.shape[0], x.mean(0) - self.mean
        total = self.count + n
        merged = self.var * self.count + x.var(0, unbiased=False) * n + delta**2 * self.count * n / total
        self.var.copy_(merged / total)
        self.mean += delta * n / total
        self.count.copy_(total)


class TinyPolicy(Policy):
    """`hidden`: widths of both MLPs; `activation`: tanh or relu; `obs_norm`: normalise the
    observation with running statistics (buffers, updated by the trainer)."""

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space,
                 hidden: Sequence[int] = (64, 64), activation: str = "tanh", obs_norm: bool = False,
                 device: str = "cpu") -> None:
        #: Observation fields (a flat Dict of Box spaces) and each one's flat size.
        self.fields = {k: int(np.prod(s.shape)) for k, s in observation_space.spaces.items()}
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"TinyPolicy acts in Discrete or Box spaces, not {action_space}")
        self.action_shape = () if self.discrete else tuple(action_space.shape)
        outputs = int(action_space.n) if self.discrete else int(np.prod(self.action_shape))
        width, act = sum(self.fields.values()), {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
        self.device = torch.device(device)
        self.net = nn.Module()
        self.net.actor = mlp([width, *hidden, outputs], act, 0.01)
        self.net.critic = mlp([width, *hidden, 1], act, 1.0)
        self.net.log_std = None if self.discrete else nn.Parameter(torch.zeros(outputs))
        self.net.norm = RunningNorm(width) if obs_norm else None
        self.net.to(self.device)
        self.version = 0

    def _flat_obs(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """The observation fields as one float tensor [N, width], any leading dims flattened to N."""
        parts = [torch.as_tensor(obs[k], device=self.device).float().reshape(-1, size)
                 for k, size in self.fields.items()]
        return torch.cat(parts, -1)

    def _forward(self, obs: Mapping[str, Any]) -> tuple[Distribution, torch.Tensor]:
        x = self._flat_obs(obs)
        if self.net.norm is not None:
            x = self.net.norm(x)
        out = self.net.actor(x)
        dist = Categorical(logits=out) if self.discrete else Normal(out, self.net.log_std.exp().expand_as(out))
        return dist, self.net.critic(x).squeeze(-1)

    def _log_prob(self, dist: Distribution, action: torch.Tensor) -> torch.Tensor:
        return dist.log_prob(action) if self.discrete else dist.log_prob(action).sum(-1)

    def initial_state(self, batch: int) -> NamedArray:
        return NamedArray()  # feed-forward

    @torch.no_grad()
    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        dist, value = self._forward(obs)
        if deterministic:
            action = dist.probs.argmax(-1) if self.discrete else dist.mean
        else:
            action = dist.sample()
        return NamedArray({
            keys.ACTION: action.cpu().numpy(),
            keys.LOGPROB: self._log_prob(dist, action).cpu().numpy(),
            keys.VALUE: value.cpu().numpy(),
        })

    def analyze(self, batch: Mapping[str, Any], entropy: bool = True) -> Analysis:
        action = torch.as_tensor(batch[keys.ACTION], device=self.device)
        lead = action.shape[:action.dim() - len(self.action_shape)]  # the rows' leading shape
        dist, value = self._forward(batch[keys.OBS])
        logprob = self._log_prob(dist, action.reshape(-1, *self.action_shape)).reshape(lead)
        rows_entropy = None
        if entropy:
            rows_entropy = (dist.entropy() if self.discrete else dist.entropy().sum(-1)).reshape(lead)
        return Analysis(logprob, rows_entropy, value.reshape(lead))

    def update_statistics(self, obs: NamedArray) -> None:
        if self.net.norm is not None:
            self.net.norm.update(self._flat_obs(obs))

    def parameters(self) -> Iterator[torch.Tensor]:
        return self.net.parameters()

    def buffers(self) -> Iterator[torch.Tensor]:
        return self.net.buffers()

    def get_params(self) -> NamedArray:
        return NamedArray.from_flat([(k.replace(".", "/"), v.detach().cpu().numpy())
                                     for k, v in self.net.state_dict().items()])

    def set_params(self, params: NamedArray, version: int) -> None:
        self.net.load_state_dict({k.replace("/", "."): torch.from_numpy(np.array(v)) for k, v in params.items_flat()})
        self.version = version
