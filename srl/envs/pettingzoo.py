"""PettingZoo adapter: any PettingZoo ParallelEnv becomes a multi-agent SRL env.

`id` names the env: `package.module` exposing `parallel_env(**kwargs)` (the PettingZoo
convention, e.g. `mpe2.simple_spread_v3`), `package.module:callable` returning a
ParallelEnv (an AEC env is converted), or an env object already built (programmatic use).

Every agent sees `{"obs": its observation}` (a Dict observation passes through as it is),
plus `{"state": global state}` when the env offers one (`state_space` or a working
`state()`), so a centralised critic can read it. Agents may differ in observation and
action spaces; agents that act with one policy must share them (one policy for every
agent needs them all alike; `policies:` and `agents:` in the config give each group of
agents a policy of its own).

PettingZoo drops finished agents from `env.agents` and from later steps' dicts; this
adapter still answers for every agent in `possible_agents`, giving a finished agent a
placeholder step (zero observation, reward 0, `terminated=True`) until the env resets.
The env ring masks those rows and resets the env once every agent is done.

`render=True` builds the env with `render_mode="rgb_array"` (the PettingZoo convention) so
that `render()` returns its frames, for videos.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env, Observation
from srl.api.registry import import_object
from srl.data import keys
from srl.envs.extras import require
from srl.envs.render import prepare_mujoco_render

STATE = "state"
#: Packages the `pettingzoo` extra installs: a missing one means "install the extra".
_EXTRA_PACKAGES = ("pettingzoo", "mpe2")


def make_parallel_env(id: str, **kwargs: Any) -> Any:
    """Build the ParallelEnv that `id` names (see the module docstring)."""
    package = id.partition(":")[0].split(".", 1)[0]
    if package in _EXTRA_PACKAGES:
        require(package, "pettingzoo", hint=f"(env id {id!r})")
    env = import_object(id if ":" in id else f"{id}:parallel_env")(**kwargs)
    pettingzoo = require("pettingzoo", "pettingzoo")
    if isinstance(env, pettingzoo.AECEnv):
        from pettingzoo.utils.conversions import aec_to_parallel
        env = aec_to_parallel(env)
    return env


def _state_space(env: Any) -> gym.spaces.Box | None:
    """The env's global-state space, or None when it offers no state."""
    space = getattr(env, "state_space", None)
    if isinstance(space, gym.spaces.Box):
        return space
    try:  # no declared space: a state() that works after a reset still counts
        env.reset()
        state = np.asarray(env.state())
    except (NotImplementedError, AttributeError):
        return None
    return gym.spaces.Box(-np.inf, np.inf, state.shape, state.dtype)


class PettingZooEnv(Env):
    """`score_agents`: report as the episode return the mean return of these agents only (e.g.
    one team of a competitive game, whose rewards would cancel out over all agents)."""

    def __init__(self, id: str | object | None = None, score_agents: list[str] | None = None, render: bool = False,
                 **kwargs: Any) -> None:
        require("pettingzoo", "pettingzoo")
        if id is None:
            raise ValueError("a PettingZoo env needs env.id: 'package.module' with parallel_env(), or 'package.module:fn'")
        if isinstance(id, str):
            if render:
                kwargs.setdefault("render_mode", "rgb_array")
            self.env, self.name = make_parallel_env(id, **kwargs), id
            if render:
                prepare_mujoco_render(self.env)
        else:
            if kwargs:
                raise ValueError("keyword arguments are for building an env by id, not for an env already built")
            self.env, self.name = id, type(id).__name__
        self.agent_ids = tuple(self.env.possible_agents)
        self.render_fps = float(getattr(self.env, "metadata", {}).get("render_fps") or Env.render_fps)
        state_space = _state_space(self.env)
        self.has_state = state_space is not None
        self._obs_spaces: dict[str, gym.spaces.Dict] = {}
        self._action_spaces: dict[str, gym.Space] = {}
        self._dict_obs: dict[str, bool] = {}
        self._zero_obs: dict[str, Observation] = {}
        for agent in self.agent_ids:
            space = self.env.observation_space(agent)
            self._dict_obs[agent] = isinstance(space, gym.spaces.Dict)
            fields = dict(space.spaces) if self._dict_obs[agent] else {keys.OBS: space}
            if state_space is not None:
                if STATE in fields:
                    raise ValueError(f"PettingZoo env {self.name!r}: its observations already have a {STATE!r} field")
                fields[STATE] = state_space
            self._obs_spaces[agent] = gym.spaces.Dict(fields)
            self._zero_obs[agent] = {k: np.zeros(s.shape, s.dtype) for k, s in fields.items()}
            self._action_spaces[agent] = self.env.action_space(agent)
        unknown = set(score_agents or []) - set(self.agent_ids)
        if unknown:
            raise ValueError(f"PettingZoo env {self.name!r}: score_agents {sorted(unknown)} are not agents of it")
        self.score_agents = list(score_agents or [])
        self.reports_episodes = bool(self.score_agents)
        self._score = 0.0
        self._length = 0

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self._action_spaces[agent]

    def _obs(self, agent: str, obs: Any, state: np.ndarray | None) -> Observation:
        out = dict(obs) if self._dict_obs[agent] else {keys.OBS: obs}
        if state is not None:
            out[STATE] = state
        return out

    def _placeholder(self, agent: str) -> AgentStep:
        """The step of an agent that finished earlier in this episode (a masked row)."""
        return AgentStep(dict(self._zero_obs[agent]), 0.0, True, False, {})

    def _state(self) -> np.ndarray | None:
        return np.asarray(self.env.state()) if self.has_state else None

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        self._score, self._length = 0.0, 0
        obs, infos = self.env.reset(seed=seed)
        state = self._state()
        return {a: AgentStep(self._obs(a, obs[a], state), info=infos.get(a, {})) if a in obs else self._placeholder(a)
                for a in self.agent_ids}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        live = self.env.agents
        to_env = {a: int(actions[a]) if isinstance(self._action_spaces[a], gym.spaces.Discrete)
                  else np.asarray(actions[a]) for a in live}
        obs, rewards, terminated, truncated, infos = self.env.step(to_env)
        state = self._state()
        out = {}
        for a in self.agent_ids:
            if a in obs:
                out[a] = AgentStep(self._obs(a, obs[a], state), float(rewards.get(a, 0.0)), bool(terminated.get(a, False)),
                                   bool(truncated.get(a, False)), infos.get(a, {}))
            else:
                out[a] = self._placeholder(a)
        if self.score_agents:
            self._score += sum(float(rewards.get(a, 0.0)) for a in self.score_agents) / len(self.score_agents)
            self._length += 1
            if not self.env.agents or all(out[a].done for a in self.agent_ids):
                first = out[self.agent_ids[0]]
                first.info = {**first.info, "episode_return": self._score, "episode_length": self._length}
        return out

    def render(self) -> np.ndarray | None:
        return self.env.render() if getattr(self.env, "render_mode", None) == "rgb_array" else None

    def close(self) -> None:
        self.env.close()
