"""A policy that acts uniformly at random: a fake for tests and a baseline for benchmarks."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.policy import Policy, mask_of, random_legal
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.masks import check_mask_space


class RandomPolicy(Policy):
    """Uniform actions (among the legal ones where the observation has an `action_mask`),
    logprob and value 0. It learns nothing: no `parameters()` or `buffers()` (the interface's
    empty defaults), no params to ship beyond the version."""

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, seed: int | None = None,
                 **_: Any) -> None:
        self.action_space = action_space
        check_mask_space(observation_space, int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None)
        # No seed: one drawn from numpy's global generator, which each worker's shell seeds
        # from the run seed and the worker's identity (a fixed default made every actor the same).
        self.rng = np.random.default_rng(seed if seed is not None else np.random.randint(1 << 31))
        self.version = 0

    def initial_state(self, batch: int) -> NamedArray:
        return NamedArray()

    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        n = len(obs)
        space = self.action_space
        mask = mask_of(obs)
        if mask is not None:  # uniform over each row's legal actions (Discrete spaces only)
            action = random_legal(np.asarray(mask).reshape(n, -1) != 0, self.rng)
        elif isinstance(space, gym.spaces.Discrete):
            action = self.rng.integers(0, space.n, n)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            action = self.rng.integers(0, space.nvec, (n, *space.shape))
        else:
            action = self.rng.uniform(space.low, space.high, (n, *space.shape)).astype(np.float32)
        zeros = np.zeros(n, np.float32)
        return NamedArray({keys.ACTION: action, keys.LOGPROB: zeros, keys.VALUE: zeros})

    def analyze(self, batch: Any, entropy: bool = True) -> Any:
        raise NotImplementedError("a random policy does not train")

    def get_params(self) -> NamedArray:
        return NamedArray()

    def set_params(self, params: NamedArray, version: int) -> None:
        self.version = version
