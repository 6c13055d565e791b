"""MuZero's networks (Schrittwieser et al. 2020) and a policy that acts by searching with them.

Three functions, as in the paper:
- representation `h(obs) -> s`: an encoder (`flatten` or `board_cnn`) and an MLP;
- dynamics `g(s, a) -> (s', r)`: the hidden state beside a learned embedding of the action, as
  wide as the state, through an MLP (beside 64 state inputs, a one-hot action's 2 went
  unheeded by CartPole's dynamics for 1,000-4,000 updates; the embedding is taken in sooner);
- prediction `f(s) -> (p, v)`: policy logits and a value.

Hidden states are scaled to [0, 1] per row (min-max, the paper's Appendix G), so that the
dynamics' inputs keep one range however deep the unroll. Values and rewards are categorical
over the integers -S..S of a transformed scale, h(x) = sign(x)(sqrt(|x| + 1) - 1) + 0.001 x
(Pohlen et al. 2018): the networks predict distributions, trained by cross-entropy against
two-hot targets, and `support_to_scalar` reads them back.

`MuZeroPolicy.rollout` runs the batched tree search (`srl.search.mcts`) from every row at once
and returns, besides the action, what the learner trains towards: the root's visit
distribution (`keys.SEARCH_POLICY`) and searched value (`keys.VALUE`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pydantic
import torch
from torch import nn

from srl.api.config import Section
from srl.api.policy import Analysis, ModelPolicy, mask_of, with_random_moves
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.actor_critic import MLP, HiddenWidth, NetPolicy, obs_tensors
from srl.models.encoders import ENCODERS
from srl.models.masks import check_mask_space
from srl.search.mcts import SearchConfig, SearchResult, search, select_action

_EPSILON = 0.001


class MuZeroNetConfig(Section):
    #: Width of the hidden state.
    state: HiddenWidth = 64
    #: Hidden layers of each of the three functions' MLPs.
    hidden: list[HiddenWidth] = [64]
    encoder: str = "flatten"
    #: Values and rewards are distributions over -support..support (of the transformed scale).
    support: pydantic.PositiveInt = 20
    #: Tree search while acting.
    simulations: pydantic.PositiveInt = 25
    discount: float = pydantic.Field(0.997, ge=0, le=1)
    dirichlet_alpha: pydantic.PositiveFloat = 0.25
    exploration_fraction: float = pydantic.Field(0.25, ge=0, le=1)
    #: Acting samples the root's visits ** (1 / temperature); deterministic acting takes the most visited.
    temperature: float = pydantic.Field(1.0, ge=0)
    #: The temperature goes linearly from `temperature` to this over the first
    #: `temperature_versions` policy versions (None: it stays): broad play while the model is
    #: poor, then play that trusts the search.
    final_temperature: float | None = pydantic.Field(None, ge=0)
    temperature_versions: pydantic.PositiveInt = 1000
    #: The share of moves that acting (not deterministic acting) plays at random among the legal
    #: ones. Playing itself, a policy reaches the same few positions; random moves take its games
    #: to others. The search's targets are kept for every move, so what is learnt there is the
    #: search's answer, not the random move.
    random_moves: float = pydantic.Field(0.0, ge=0, le=1)
    #: Players alternate (board games): values flip sign at every ply of the search.
    two_player: bool = False
    #: Gumbel MuZero (Danihelka et al. 2022): the root samples Gumbel noise and halves its
    #: candidate actions over the simulations; the action is the search's pick (no temperature,
    #: no Dirichlet noise) and the policy target its improved policy, not the visit counts. For
    #: small simulation budgets, where visit counts say little.
    gumbel: bool = False
    #: Gumbel: root actions considered at most.
    max_considered: pydantic.PositiveInt = 16


def transform(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + _EPSILON * x


def inverse_transform(y: torch.Tensor) -> torch.Tensor:
    # The closed form of h's inverse (Pohlen et al. 2018, Proposition A.2).
    root = (torch.sqrt(1 + 4 * _EPSILON * (y.abs() + 1 + _EPSILON)) - 1) / (2 * _EPSILON)
    return torch.sign(y) * (root.square() - 1)


def scalar_to_support(x: torch.Tensor, support: int) -> torch.Tensor:
    """Two-hot targets [..., 2 support + 1] of scalars `x` [...] on the transformed scale."""
    y = transform(x).clamp(-support, support)
    low = y.floor()
    upper_weight = y - low
    target = torch.zeros(*x.shape, 2 * support + 1, dtype=x.dtype, device=x.device)
    index = (low + support).long()
    target.scatter_(-1, index.unsqueeze(-1), (1 - upper_weight).unsqueeze(-1))
    target.scatter_add_(-1, (index + 1).clamp(max=2 * support).unsqueeze(-1), upper_weight.unsqueeze(-1))
    return target


def support_to_scalar(logits: torch.Tensor, support: int) -> torch.Tensor:
    """The expected scalar of distributions given by `logits` [..., 2 support + 1]."""
    values = torch.arange(-support, support + 1, dtype=logits.dtype, device=logits.device)
    return inverse_transform((torch.softmax(logits, -1) * values).sum(-1))


def scale_state(s: torch.Tensor) -> torch.Tensor:
    low, high = s.min(-1, keepdim=True).values, s.max(-1, keepdim=True).values
    return (s - low) / (high - low).clamp(min=1e-5)


class MuZeroNet(nn.Module):
    def __init__(self, observation_space: gym.spaces.Dict, actions: int, config: MuZeroNetConfig) -> None:
        super().__init__()
        if config.encoder not in ENCODERS:
            raise ValueError(f"policy.args.encoder: one of {sorted(ENCODERS)}, not {config.encoder!r}")
        self.encoder = ENCODERS[config.encoder](dict(observation_space.spaces))
        bins = 2 * config.support + 1
        encoded = MLP(self.encoder.out_dim, config.hidden, nn.ReLU)
        self.represent = nn.Sequential(encoded, nn.Linear(encoded.out_dim, config.state))
        self.action_embedding = nn.Embedding(actions, config.state)
        self.dynamics = MLP(2 * config.state, config.hidden, nn.ReLU)
        self.next_state = nn.Linear(self.dynamics.out_dim, config.state)
        self.reward = nn.Linear(self.dynamics.out_dim, bins)
        self.predict = MLP(config.state, config.hidden, nn.ReLU)
        self.policy = nn.Linear(self.predict.out_dim, actions)
        self.value = nn.Linear(self.predict.out_dim, bins)
        # Start from zero policy logits and a value and reward of 0 (the support's centre).
        for head in (self.policy, self.value, self.reward):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def represent_state(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The hidden state of observations [N, ...]."""
        return scale_state(self.represent(self.encoder(obs)))

    def prediction(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.predict(state)
        return self.policy(x), self.value(x)

    def step(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(next hidden state, reward logits) after `action` [N]."""
        x = self.dynamics(torch.cat([state, self.action_embedding(action.long())], -1))
        return scale_state(self.next_state(x)), self.reward(x)


class _SearchModel:
    """A `ModelPolicy` as `srl.search.mcts.Model`: NumPy in and out, scalars from the distributions."""

    def __init__(self, model: ModelPolicy, device: torch.device) -> None:
        self.model, self.device = model, device

    @torch.inference_mode()
    def initial(self, obs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        state = self.model.represent(obs)
        logits, value = self.model.predict(state)
        return state.cpu().numpy(), logits.cpu().numpy(), self.model.from_support(value).cpu().numpy()

    @torch.inference_mode()
    def recurrent(self, state: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, ...]:
        tensor = lambda x: torch.as_tensor(x, device=self.device)  # noqa: E731
        s, reward = self.model.transition(tensor(state), tensor(action))
        logits, value = self.model.predict(s)
        return (s.cpu().numpy(), self.model.from_support(reward).cpu().numpy(), logits.cpu().numpy(),
                self.model.from_support(value).cpu().numpy())


def _policy_target(result: SearchResult) -> np.ndarray:
    """What the policy learns towards from a search: Gumbel's improved policy, else the root's visit distribution."""
    if result.improved is not None:
        return result.improved.astype(np.float32)
    visits = result.visits.astype(np.float32)
    return visits / np.maximum(visits.sum(-1, keepdims=True), 1.0)


class MuZeroPolicy(NetPolicy, ModelPolicy):
    """Acts by a tree search with its own networks from every row at once; see the module docstring."""

    Config = MuZeroNetConfig

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, device: str = "cpu",
                 **args: Any) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"MuZero searches over Discrete actions; got {action_space}")
        self.config = MuZeroNetConfig(**args)
        self.observation_space = observation_space
        self.actions = int(action_space.n)
        check_mask_space(observation_space, self.actions)
        self.device = torch.device(device)
        self.net = MuZeroNet(observation_space, self.actions, self.config).to(self.device)
        self.net.memory = None  # feed-forward (NetPolicy asks)
        c = self.config
        self.search_config = SearchConfig(simulations=c.simulations, discount=c.discount,
                                          dirichlet_alpha=c.dirichlet_alpha,
                                          exploration_fraction=c.exploration_fraction, two_player=c.two_player,
                                          gumbel=c.gumbel, max_considered=c.max_considered)
        self.rng = np.random.default_rng(int(torch.randint(1 << 62, ())))
        self.version = 0

    # ------------------------------------------------------------ the model, for learners
    @property
    def discount(self) -> float:
        return self.config.discount

    @property
    def two_player(self) -> bool:
        return self.config.two_player

    def represent(self, obs: Any) -> torch.Tensor:
        return self.net.represent_state(obs_tensors(obs, 1, self.device)[0])

    def predict(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.prediction(state)

    def transition(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.step(state, action)

    def to_support(self, x: torch.Tensor) -> torch.Tensor:
        return scalar_to_support(x, self.config.support)

    def from_support(self, logits: torch.Tensor) -> torch.Tensor:
        return support_to_scalar(logits, self.config.support)

    # ------------------------------------------------------------ acting
    def search(self, obs: NamedArray, noise: bool = True) -> SearchResult:
        """The tree search from every row of `obs` (`srl.search.mcts.SearchResult`)."""
        mask = mask_of(obs)
        return search(_SearchModel(self, self.device), obs, mask, self.search_config, self.rng, noise)

    @property
    def temperature(self) -> float:
        c = self.config
        if c.final_temperature is None:
            return c.temperature
        progress = min(1.0, self.version / c.temperature_versions)
        return c.temperature + progress * (c.final_temperature - c.temperature)

    def _searched(self, obs: NamedArray, noise: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(value [N], policy target [N, A], the search's action [N] with Gumbel, else None) from
        every row. A row with one legal action (a player waiting for its turn) is not searched:
        its target is that action and its value the model's prediction."""
        mask = mask_of(obs)
        forced = None if mask is None else np.asarray(mask).sum(-1) == 1
        if forced is None or not forced.any():
            result = self.search(obs, noise)
            return result.value, _policy_target(result), result.action
        rows = len(forced)
        value = np.zeros(rows, np.float32)
        target = np.zeros((rows, self.actions), np.float32)
        action = np.zeros(rows, np.int64)
        only = np.asarray(mask)[forced].argmax(-1)
        target[forced, only], action[forced] = 1.0, only
        value[forced] = _SearchModel(self, self.device).initial(obs.map(lambda x: x[forced]))[2]
        free = ~forced
        if free.any():
            result = self.search(obs.map(lambda x: x[free]), noise)
            value[free], target[free] = result.value, _policy_target(result)
            if result.action is not None:
                action[free] = result.action
        return value, target, (action if self.config.gumbel else None)

    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        value, target, action = self._searched(obs, noise=not deterministic)
        if action is None:  # pUCT: drawn from the visit distribution (Gumbel's search picked it)
            action = select_action(target, 0.0 if deterministic else self.temperature, self.rng)
        if not deterministic:
            action = with_random_moves(action, mask_of(obs), self.actions, self.config.random_moves, self.rng)
        rows = np.arange(len(action))
        logprob = np.log(np.maximum(target[rows, action], 1e-12)).astype(np.float32)
        return NamedArray({keys.ACTION: action.astype(np.int64), keys.LOGPROB: logprob,
                           keys.VALUE: value.astype(np.float32), keys.SEARCH_POLICY: target})

    def search_targets(self, obs: Any) -> NamedArray:
        # Searched as while acting (root noise included), so refreshed targets are like fresh ones.
        value, target, _ = self._searched(obs, noise=True)
        return NamedArray({keys.VALUE: value.astype(np.float32), keys.SEARCH_POLICY: target})

    def analyze(self, batch: Any, entropy: bool = True) -> Analysis:
        raise NotImplementedError("MuZero learns through its networks' unroll (srl.algorithms.muzero), not analyze")
