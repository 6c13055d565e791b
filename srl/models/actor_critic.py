"""A feed-forward actor-critic: encoder (flatten or CNN), MLP torsos, action head and value head.

The actor and the critic may read different observation fields: a MAPPO-style centralised
critic reads the global `state` while each agent's actor reads only its own `obs`. Optional
observation normalisation keeps running statistics inside the network's buffers, so they
travel with the parameters and every actor normalises exactly as the trainer does.
"""

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
from srl.models.encoders import ENCODERS, ObsNormalizer


class ActorCriticConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    hidden: list[pydantic.PositiveInt] = [64, 64]
    activation: Literal["tanh", "relu"] = "tanh"
    #: How observation fields become features: `flatten` (vectors), `nature_cnn` (uint8 images)
    #: or `entity_attention` (entity lists with masks, e.g. hide-and-seek).
    encoder: Literal["flatten", "nature_cnn", "entity_attention"] = "flatten"
    #: Observation fields the actor reads (default: every field except `state`).
    actor_inputs: list[str] | None = None
    #: Observation fields the critic reads (default: the actor's; `[state]` for a centralised critic).
    critic_inputs: list[str] | None = None
    #: Actor and critic share one encoder (the usual choice for a CNN).
    share_encoder: bool = False
    #: Normalise float observation fields with running statistics updated by the trainer.
    obs_norm: bool = False
    #: Initial log standard deviation of a Gaussian action head (continuous actions).
    log_std_init: float = 0.0


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
    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, config: ActorCriticConfig) -> None:
        super().__init__()
        fields = list(observation_space.spaces)
        self.actor_inputs = config.actor_inputs or [f for f in fields if f != "state"] or fields
        self.critic_inputs = config.critic_inputs or self.actor_inputs
        for name in (*self.actor_inputs, *self.critic_inputs):
            if name not in observation_space.spaces:
                raise ValueError(f"policy input {name!r} is not an observation field (fields: {fields})")
        self.normalizer = ObsNormalizer(observation_space) if config.obs_norm else None
        encoder = ENCODERS[config.encoder]
        self.actor_encoder = encoder({k: observation_space[k] for k in self.actor_inputs})
        share = config.share_encoder and self.critic_inputs == self.actor_inputs
        self.critic_encoder = None if share else encoder({k: observation_space[k] for k in self.critic_inputs})
        act = nn.Tanh if config.activation == "tanh" else nn.ReLU
        self.actor, width = mlp(self.actor_encoder.out_dim, config.hidden, act)
        critic_in = self.actor_encoder.out_dim if share else self.critic_encoder.out_dim
        self.critic, critic_width = mlp(critic_in, config.hidden, act)
        self.value_head = nn.Linear(critic_width, 1)
        nn.init.orthogonal_(self.value_head.weight, 1.0)
        nn.init.zeros_(self.value_head.bias)
        self.head = ActionHead(width, action_space, config.log_std_init)

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[list[torch.distributions.Distribution], torch.Tensor]:
        """`obs` fields shaped [N, ...]; returns the action distributions and values [N]."""
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        features = self.actor_encoder({k: obs[k] for k in self.actor_inputs})
        critic_features = features if self.critic_encoder is None else self.critic_encoder(
            {k: obs[k] for k in self.critic_inputs})
        return self.head(self.actor(features)), self.value_head(self.critic(critic_features)).squeeze(-1)


class ActorCriticPolicy(Policy):
    Config = ActorCriticConfig

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, device: str = "cpu",
                 **args: Any) -> None:
        self.config = ActorCriticConfig(**args)
        self.device = torch.device(device)
        self.net = ActorCriticNet(observation_space, action_space, self.config).to(self.device)
        self.version = 0

    def _obs(self, obs: Mapping[str, Any], lead: int) -> tuple[dict[str, torch.Tensor], tuple[int, ...]]:
        """Tensors with the leading dims flattened to one; returns them and the leading shape."""
        out, shape = {}, ()
        for path, x in (obs.items_flat() if isinstance(obs, NamedArray) else obs.items()):
            x = torch.as_tensor(x, device=self.device)
            shape = tuple(x.shape[:lead])
            out[path] = x.reshape(-1, *x.shape[lead:])
        return out, shape

    def initial_state(self, batch: int) -> NamedArray:
        return NamedArray()

    @torch.no_grad()
    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        dists, value = self.net(self._obs(obs, 1)[0])
        action = self.net.head.sample(dists, deterministic)
        return NamedArray({
            keys.ACTION: action.cpu().numpy(),
            keys.LOGPROB: self.net.head.log_prob(dists, action).cpu().numpy(),
            keys.VALUE: value.cpu().numpy(),
        })

    def analyze(self, batch: Mapping[str, Any]) -> Analysis:
        """Log-prob of the taken action, entropy and value for rows of any leading shape."""
        action = batch[keys.ACTION]
        lead = action.dim() - len(self.net.head.action_shape)
        obs, shape = self._obs(batch[keys.OBS], lead)
        dists, value = self.net(obs)
        flat_action = action.reshape(-1, *self.net.head.action_shape)
        logprob, entropy = self.net.head.log_prob(dists, flat_action), self.net.head.entropy(dists)
        return Analysis(logprob.reshape(shape), entropy.reshape(shape), value.reshape(shape))

    def update_statistics(self, obs: NamedArray) -> None:
        if self.net.normalizer is not None:
            self.net.normalizer.update(obs)

    def parameters(self):
        return self.net.parameters()

    def get_params(self) -> NamedArray:
        return NamedArray.from_flat([(k.replace(".", "/"), v.detach().cpu().numpy()) for k, v in self.net.state_dict().items()])

    def set_params(self, params: NamedArray, version: int) -> None:
        state = {path.replace("/", "."): torch.from_numpy(np.array(leaf)) for path, leaf in params.items_flat()}
        self.net.load_state_dict(state)
        self.version = version
