"""Gymnasium adapter: any Gymnasium env becomes a one-agent SRL env, unchanged.

`id` is a registered Gymnasium id (`CartPole-v1`) or `package.module:Class` naming a
`gymnasium.Env` subclass (or any callable returning one). A non-dict observation
becomes `{"obs": x}`; a Dict observation passes through as it is. `render=True` builds
the env with `render_mode="rgb_array"` (for videos; MuJoCo envs then need an OpenGL backend,
see `srl.envs.render.headless_gl`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.api.registry import import_object
from srl.data import keys
from srl.envs.render import prepare_mujoco_render

AGENT = "agent"


def make_gym(id: str, **kwargs: Any) -> gym.Env:
    if ":" in id and not id.split(":", 1)[0].startswith("ALE"):
        return import_object(id)(**kwargs)
    return gym.make(id, **kwargs)


class GymEnv(Env):
    agent_ids = (AGENT,)

    def __init__(self, id: str, render: bool = False, **kwargs: Any) -> None:
        if render:
            kwargs.setdefault("render_mode", "rgb_array")
        self.env = make_gym(id, **kwargs)
        if render:
            prepare_mujoco_render(self.env)
        self.render_fps = float(self.env.metadata.get("render_fps") or Env.render_fps)
        space = self.env.observation_space
        #: The Gymnasium env's observations are dicts already (else they become {"obs": x}).
        self.dict_obs = isinstance(space, gym.spaces.Dict)
        self._obs_space = space if self.dict_obs else gym.spaces.Dict({keys.OBS: space})

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def srl_obs(self, obs: Any) -> dict[str, np.ndarray]:
        """A Gymnasium observation as an SRL observation dict."""
        return dict(obs) if self.dict_obs else {keys.OBS: obs}

    def gym_actions(self, actions: np.ndarray) -> list[Any]:
        """Policy actions [rows, ...] as the Gymnasium env takes them, one per row."""
        space = self.env.action_space
        if isinstance(space, gym.spaces.Discrete):
            # NumPy integers, not Python ints: Gymnasium's `Discrete.contains` (which CartPole
            # asserts on every step) checks a Python int against np.iinfo, which costs more than
            # the check itself on a fast env (docs/benchmarks.md, "Measurements behind the code").
            return list(actions.reshape(len(actions)))
        if isinstance(space, gym.spaces.Box):
            # A Gaussian policy samples past the bounds; clip here, at the env boundary, so the
            # trainer still sees (and computes log-probs of) the action it actually sampled.
            return list(np.clip(actions, space.low, space.high))
        return list(actions)

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        obs, info = self.env.reset(seed=seed)
        return {AGENT: AgentStep(self.srl_obs(obs), info=info)}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        [action] = self.gym_actions(np.asarray(actions[AGENT])[None])
        obs, reward, terminated, truncated, info = self.env.step(action)
        return {AGENT: AgentStep(self.srl_obs(obs), float(reward), bool(terminated), bool(truncated), info)}

    def render(self) -> np.ndarray | None:
        return self.env.render() if self.env.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.env.close()
