"""Gymnasium adapter: any Gymnasium env becomes a one-agent SRL env, unchanged.

`id` is a registered Gymnasium id (`CartPole-v1`) or `package.module:Class` naming a
`gymnasium.Env` subclass (or any callable returning one). A non-dict observation
becomes `{"obs": x}`; a Dict observation passes through as it is.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.api.registry import import_object
from srl.data import keys

AGENT = "agent"


def make_gym(id: str, **kwargs: Any) -> gym.Env:
    if ":" in id and not id.split(":", 1)[0].startswith("ALE"):
        return import_object(id)(**kwargs)
    return gym.make(id, **kwargs)


class GymEnv(Env):
    agent_ids = (AGENT,)

    def __init__(self, id: str, **kwargs: Any) -> None:
        self.env = make_gym(id, **kwargs)
        space = self.env.observation_space
        self._dict_obs = isinstance(space, gym.spaces.Dict)
        self._obs_space = space if self._dict_obs else gym.spaces.Dict({keys.OBS: space})

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def _obs(self, obs: Any) -> dict[str, np.ndarray]:
        return dict(obs) if self._dict_obs else {keys.OBS: obs}

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        obs, info = self.env.reset(seed=seed)
        return {AGENT: AgentStep(self._obs(obs), info=info)}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        action = actions[AGENT]
        space = self.env.action_space
        if isinstance(space, gym.spaces.Discrete):
            action = int(action)
        elif isinstance(space, gym.spaces.Box):
            # A Gaussian policy samples past the bounds; clip here, at the env boundary, so the
            # trainer still sees (and computes log-probs of) the action it actually sampled.
            action = np.clip(action, space.low, space.high)
        obs, reward, terminated, truncated, info = self.env.step(action)
        return {AGENT: AgentStep(self._obs(obs), float(reward), bool(terminated), bool(truncated), info)}

    def close(self) -> None:
        self.env.close()
