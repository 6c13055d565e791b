"""A Q-network for the DQN family (DQN, Ape-X, R2D2, VDN/QMIX): encoder, optional LSTM, MLP
torso and (dueling) action-value heads, acting epsilon-greedily.

Exploration lives in the policy, not the algorithm, because actors act with their own copies:
a copy an actor (or a policy worker) acts with (`acting_as`) anneals epsilon over the rows it
acted on, or (Ape-X) holds a fixed epsilon chosen by its index. Any other copy (`srl
evaluate`'s, a loaded checkpoint's) explores as a trained policy does: at `epsilon_end`, or
with Ape-X's epsilons as the greediest actor. Recurrent replay (R2D2) unrolls the LSTM from a
stored state with restarts at episode starts, exactly as the actor-critic does.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import pydantic
import torch
from torch import nn

from srl.api.config import Section
from srl.api.policy import Analysis, ValuePolicy, mask_of
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.actor_critic import MLP, HiddenWidth, Memory, NetPolicy, obs_tensors, remember
from srl.models.encoders import ENCODERS, FlattenEncoder
from srl.models.masks import check_mask_space, mask_scores, mask_scores_numpy
from srl.models.numpy_forward import (ACTIVATIONS, Layer, NumpyCopy, flatten_fields, linear_layer, run_layers,
                                      torch_layer)

Probability = Annotated[float, pydantic.Field(ge=0.0, le=1.0)]


class QNetworkConfig(Section):
    hidden: list[HiddenWidth] = [64, 64]
    activation: Literal["relu", "tanh"] = "relu"
    encoder: Literal["flatten", "nature_cnn", "board_cnn"] = "flatten"
    #: Observation fields the network reads (default: every field except `state`, which is a global state for mixers).
    inputs: list[str] | None = None
    #: Dueling heads: Q = V + A - mean(A).
    dueling: bool = True
    #: Width of an LSTM after the encoder (0: feed-forward), for recurrent replay (R2D2).
    lstm: pydantic.NonNegativeInt = 0
    #: Epsilon-greedy exploration, annealed linearly over the env steps (rows) this copy acts on.
    epsilon_start: Probability = 1.0
    epsilon_end: Probability = 0.05
    epsilon_decay_steps: pydantic.NonNegativeInt = 10_000
    #: Ape-X: actor i of n explores with epsilon_end ** (1 + apex_alpha * i / (n - 1)) from the start
    #: (no annealing); None: every actor anneals as above. (Ape-X paper: epsilon_end 0.4, alpha 7.)
    apex_alpha: float | None = None


class QNet(nn.Module):
    def __init__(self, observation_space: gym.spaces.Dict, actions: int, config: QNetworkConfig) -> None:
        super().__init__()
        fields = list(observation_space.spaces)
        self.inputs = config.inputs or [f for f in fields if f != "state"] or fields
        for name in self.inputs:
            if name not in observation_space.spaces:
                raise ValueError(f"policy input {name!r} is not an observation field (fields: {fields})")
        self.encoder = ENCODERS[config.encoder]({k: observation_space[k] for k in self.inputs})
        self.memory = nn.LSTM(self.encoder.out_dim, config.lstm) if config.lstm else None
        act = nn.Tanh if config.activation == "tanh" else nn.ReLU
        self.torso = MLP(config.lstm or self.encoder.out_dim, config.hidden, act)
        self.advantage = nn.Linear(self.torso.out_dim, actions)
        self.value = nn.Linear(self.torso.out_dim, 1) if config.dueling else None

    def forward(self, obs: dict[str, torch.Tensor], memory: Memory | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, Memory | None]:
        """`obs` fields [N, ...]; returns Q [N, actions] and the next memory (see `remember`)."""
        features = self.encoder({k: obs[k] for k in self.inputs})
        if self.memory is not None:
            features, memory = remember(self.memory, features, memory, starts)
        x = self.torso(features)
        q = self.advantage(x)
        if self.value is not None:
            # Centring the advantages makes V identifiable (the dueling paper's mean variant).
            q = self.value(x) + q - q.mean(-1, keepdim=True)
        return mask_scores(q, mask_of(obs)), memory


class QActingModule(nn.Module):
    """Greedy acting with a net of its own (what `srl export` traces): observation fields
    positionally (the order of `fields`), then an LSTM's (h, c); returns the argmax action,
    then the next (h, c)."""

    def __init__(self, net: QNet, fields: list[str]) -> None:
        super().__init__()
        self.net, self.fields = net, fields

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        memory = (inputs[-2], inputs[-1]) if self.net.memory is not None else None
        q, memory = self.net(dict(zip(self.fields, inputs)), memory)
        action = q.argmax(-1)
        return action if memory is None else (action, *memory)


def _log32(p: float) -> np.float32:
    """log(p) as float32 (-inf at 0, as torch.log gives)."""
    return np.float32(math.log(p) if p > 0 else -math.inf)


class QNetworkPolicy(ValuePolicy, NetPolicy):
    Config = QNetworkConfig

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, device: str = "cpu",
                 **args: Any) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"a Q-network needs a Discrete action space (one value per action); got {action_space}")
        self.config = QNetworkConfig(**args)
        self.observation_space = observation_space
        self.actions = int(action_space.n)
        self.device = torch.device(device)
        check_mask_space(observation_space, self.actions)
        self.net = QNet(observation_space, self.actions, self.config).to(self.device)
        self.version = 0
        #: A feed-forward net on the CPU acts in NumPy (see srl/models/numpy_forward.py).
        #: (Exactly these modules: a subclass may compute otherwise.)
        lean = (self.device.type == "cpu" and type(self.net) is QNet and type(self.net.encoder) is FlattenEncoder
                and self.net.memory is None)
        self._numpy = NumpyCopy(self.net, self._numpy_layers) if lean else None
        # Drawn from torch's generator, which workers seed per worker identity: the same seed
        # gives the same stream, and each copy (two in one process too) explores with its own.
        self.rng = np.random.default_rng(int(torch.randint(1 << 62, ())))
        self.acted_rows = 0
        #: Until an actor acts with this copy, it explores as a trained policy: at epsilon_end (Ape-X:
        #: as its greediest actor, epsilon_end ** (1 + apex_alpha)).
        c = self.config
        self._fixed_epsilon: float | None = c.epsilon_end ** (1 + (c.apex_alpha or 0.0))

    @property
    def epsilon(self) -> float:
        """This copy's exploration rate now: its Ape-X epsilon, or the linear anneal's."""
        if self._fixed_epsilon is not None:
            return self._fixed_epsilon
        c = self.config
        done = min(1.0, self.acted_rows / c.epsilon_decay_steps) if c.epsilon_decay_steps else 1.0
        return c.epsilon_start + (c.epsilon_end - c.epsilon_start) * done

    def acting_as(self, actor: int, actors: int) -> None:
        """Explore as actor `actor` of `actors`: anneal from epsilon_start, or Ape-X's fixed epsilon."""
        if self.config.apex_alpha is not None:
            self._fixed_epsilon = self.config.epsilon_end ** (1 + self.config.apex_alpha * actor / max(actors - 1, 1))
        else:
            self._fixed_epsilon = None

    def _logprob(self, action: torch.Tensor, greedy: torch.Tensor, epsilon: float,
                 legal: torch.Tensor | int) -> torch.Tensor:
        """Log-probability of `action` under epsilon-greedy around `greedy` among `legal` actions."""
        return torch.log(epsilon / legal + (1 - epsilon) * (action == greedy).float())

    def _numpy_layers(self) -> list[Layer]:
        """The torso's layers, then one layer for Q: the dueling combination V + A - mean(A) is
        linear in the torso's output, so its two heads fold into one matmul."""
        net = self.net
        activation = ACTIVATIONS[self.config.activation]
        layers = [torch_layer(linear, activation) for linear in net.torso.linears]
        weight, bias = net.advantage.weight.detach().numpy(), net.advantage.bias.detach().numpy()
        if net.value is not None:
            weight = weight - weight.mean(0, keepdims=True) + net.value.weight.detach().numpy()
            bias = bias - bias.mean() + net.value.bias.detach().numpy()
        return [*layers, linear_layer(weight, bias)]

    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        mask = mask_of(obs)
        if self._numpy is not None and self._numpy.follows(self.net):
            q, memory = run_layers(self._numpy.get(), flatten_fields(obs, self.net.encoder.fields)), None
            mask_scores_numpy(q, mask)
        else:
            q, memory = self._torch_q(obs, state)
        # The rest in NumPy too: on acting batches (a few to a few hundred rows) each torch call
        # costs more than its arithmetic, and acting interleaves with env steps that evict
        # torch's code from the caches, so every call saved counts twice (docs/benchmarks.md).
        greedy = q.argmax(-1)
        value = q.max(-1)
        if deterministic:
            action, logprob = greedy, np.zeros(len(greedy), np.float32)
        else:
            action, logprob = self._explore(greedy, mask)
        out = NamedArray({keys.ACTION: action.astype(np.int64, copy=False), keys.LOGPROB: logprob, keys.VALUE: value})
        if memory is not None:
            out[keys.RNN_STATE] = NamedArray({"h": memory[0].cpu().numpy(), "c": memory[1].cpu().numpy()})
        return out

    @torch.inference_mode()
    def _torch_q(self, obs: NamedArray, state: NamedArray) -> tuple[np.ndarray, Memory | None]:
        q, memory = self.net(obs_tensors(obs, 1, self.device)[0], self._memory(state))
        return q.cpu().numpy(), memory

    def _explore(self, greedy: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Epsilon-greedy actions around `greedy`, exploring among the legal actions where `mask`
        says which they are, and their log-probabilities (float32, as `_logprob`'s)."""
        epsilon, rows = self.epsilon, len(greedy)
        self.acted_rows += rows
        # One uniform draw per row decides both: below epsilon the row explores, and u / epsilon,
        # uniform on [0, 1) there, picks its action (one NumPy call fewer than a second draw).
        u = self.rng.random(rows)
        explore = u < epsilon
        if mask is None:
            # (min: u / epsilon may round up to 1.)
            pick = np.minimum(u * (self.actions / max(epsilon, 1e-12)), self.actions - 1).astype(np.int64)
            action = np.where(explore, pick, greedy)
            # Two probabilities only: the greedy action's and any other's.
            other = epsilon / self.actions
            return action, np.where(action == greedy, _log32(other + 1.0 - epsilon), _log32(other))
        legal = np.asarray(mask).reshape(rows, -1) != 0
        count = np.maximum(legal.sum(-1), 1)
        nth = np.minimum(u * (count / max(epsilon, 1e-12)), count - 1).astype(np.int64)
        pick = (np.cumsum(legal, -1) <= nth[:, None]).sum(-1)  # the index of the nth legal action
        action = np.where(explore, pick, greedy)
        other = epsilon / count
        with np.errstate(divide="ignore"):
            logprob = np.log(np.where(action == greedy, other + 1.0 - epsilon, other))
        return action, logprob.astype(np.float32)

    def q_values(self, batch: Mapping[str, Any]) -> torch.Tensor:
        return self.unroll(batch)[0]

    def unroll(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """`q_values` and, for an LSTM, the state after the last row ({"h", "c"} [B, width]), from
        which a later unroll continues (R2D2's burn-in warms the state, then learns from there)."""
        obs = batch[keys.OBS]
        # The leading shape is what the first observation field has beyond its space's shape.
        path, first = next(iter(obs.items_flat() if isinstance(obs, NamedArray) else obs.items()))
        lead = np.ndim(first) - len(self.observation_space[path].shape)
        tensors, shape = obs_tensors(obs, lead, self.device)
        if self.net.memory is None:
            q, memory = self.net(tensors)
        else:
            if lead != 2:
                raise ValueError(f"an LSTM policy evaluates [T, B] rows (time-major); got {lead} leading dims")
            starts = torch.as_tensor(batch[keys.EPISODE_START], device=self.device)
            q, memory = self.net(tensors, self._memory(batch[keys.RNN_STATE]), starts)
        return q.reshape(*shape, self.actions), (None if memory is None else {"h": memory[0], "c": memory[1]})

    def analyze(self, batch: Mapping[str, Any], entropy: bool = True) -> Analysis:
        """Log-prob of the batch's actions under epsilon-greedy with the current epsilon (no
        entropy: it is not a quantity value-based learning uses) and the greedy value max Q."""
        q = self.q_values(batch)
        value, greedy = q.max(-1)
        action = torch.as_tensor(batch[keys.ACTION], device=self.device)
        mask = mask_of(batch[keys.OBS])
        legal = self.actions if mask is None else torch.as_tensor(mask, device=self.device).ne(0).sum(-1).clamp(min=1)
        return Analysis(self._logprob(action, greedy, self.epsilon, legal), None, value)

    def acting_module(self) -> QActingModule:
        """A CPU copy of the net that acts greedily (later training does not change it)."""
        return QActingModule(copy.deepcopy(self.net).cpu().eval(), list(self.observation_space.spaces))
