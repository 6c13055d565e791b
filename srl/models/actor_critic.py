"""A feed-forward actor-critic over flattened observation fields (MLP torso, separate critic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import pydantic
import torch
from torch import nn

from srl.api.policy import Analysis, Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.distributions import ActionHead


class ActorCriticConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    hidden: list[pydantic.PositiveInt] = [64, 64]
    activation: Literal["tanh", "relu"] = "tanh"


def mlp(in_dim: int, hidden: list[int], activation: type[nn.Module]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for width in hidden:
        linear = nn.Linear(in_dim, width)
        nn.init.orthogonal_(linear.weight, np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, activation()]
        in_dim = width
    return nn.Sequential(*layers), in_dim


class ActorCriticNet(nn.Module):
    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: list[int], activation: str) -> None:
        super().__init__()
        act = nn.Tanh if activation == "tanh" else nn.ReLU
        self.actor, width = mlp(obs_dim, hidden, act)
        self.critic, _ = mlp(obs_dim, hidden, act)
        self.value_head = nn.Linear(width, 1)
        nn.init.orthogonal_(self.value_head.weight, 1.0)
        nn.init.zeros_(self.value_head.bias)
        self.head = ActionHead(width, action_space)

    def forward(self, x: torch.Tensor) -> tuple[list[torch.distributions.Distribution], torch.Tensor]:
        return self.head(self.actor(x)), self.value_head(self.critic(x)).squeeze(-1)


class ActorCriticPolicy(Policy):
    Config = ActorCriticConfig

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space,
                 hidden: list[int] = (64, 64), activation: str = "tanh", device: str = "cpu") -> None:
        self.obs_fields = list(observation_space.spaces)
        obs_dim = sum(int(np.prod(observation_space[k].shape)) for k in self.obs_fields)
        self.device = torch.device(device)
        self.net = ActorCriticNet(obs_dim, action_space, list(hidden), activation).to(self.device)
        self.version = 0

    def _features(self, obs: dict[str, torch.Tensor | np.ndarray], lead: int) -> torch.Tensor:
        parts = []
        for k in self.obs_fields:
            x = torch.as_tensor(obs[k], device=self.device)
            parts.append(x.reshape(*x.shape[:lead], -1).float())
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)

    def initial_state(self, batch: int) -> NamedArray:
        return NamedArray()

    @torch.no_grad()
    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        dists, value = self.net(self._features(obs, 1))
        action = self.net.head.sample(dists, deterministic)
        return NamedArray({
            keys.ACTION: action.cpu().numpy(),
            keys.LOGPROB: self.net.head.log_prob(dists, action).cpu().numpy(),
            keys.VALUE: value.cpu().numpy(),
        })

    def analyze(self, batch: Mapping[str, Any]) -> Analysis:
        """Log-prob of the taken action, entropy and value for rows of any leading shape."""
        obs, action = batch[keys.OBS], batch[keys.ACTION]
        lead = action.dim() - len(self.net.head.action_shape)
        dists, value = self.net(self._features(obs, lead))
        return Analysis(self.net.head.log_prob(dists, action), self.net.head.entropy(dists), value)

    def parameters(self):
        return self.net.parameters()

    def get_params(self) -> NamedArray:
        return NamedArray.from_flat([(k.replace(".", "/"), v.detach().cpu().numpy()) for k, v in self.net.state_dict().items()])

    def set_params(self, params: NamedArray, version: int) -> None:
        state = {path.replace("/", "."): torch.from_numpy(np.array(leaf)) for path, leaf in params.items_flat()}
        self.net.load_state_dict(state)
        self.version = version
