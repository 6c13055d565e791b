"""Tiny envs for tests and examples: `FakeEnv` (which action reached which env),
`RecallEnv` (a task only a policy with memory solves) and `TeamsEnv` (agents whose spaces
differ, for several policies).

`FakeEnv` is deterministic: each agent sees `[env_tag, t, last_action]` and earns 1 when its action equals
`t % n_actions`, so a learner can solve it and a test can check which action reached
which env at which step. Episodes last `episode_length` steps (or `agent_lengths[i]` for agent i) and end by
truncation; the env resets when every agent is done.
"""

from __future__ import annotations

import time
from typing import ClassVar

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys


class FakeEnv(Env):
    def __init__(self, n_agents: int = 1, n_actions: int = 3, episode_length: int = 10, tag: float = 0.0,
                 step_sleep_s: float = 0.0, agent_lengths: list[int] | None = None,
                 crash_after_steps: int | None = None, hang_after_steps: int | None = None) -> None:
        self.agent_ids = tuple(f"agent_{i}" for i in range(n_agents))
        #: Per-agent episode lengths, so agents can finish before their env does.
        self.agent_lengths = list(agent_lengths or [episode_length] * n_agents)
        #: Raise after this many steps: a crashing simulator, for supervision tests.
        self.crash_after_steps = crash_after_steps
        #: Never return from a step after this many: a simulator stuck for good, for supervision tests.
        self.hang_after_steps = hang_after_steps
        self.total_steps = 0
        self.n_actions = n_actions
        self.episode_length = episode_length
        self.tag = tag
        self.step_sleep_s = step_sleep_s
        self.t = 0
        self.history: list[dict[str, int]] = []
        self._obs_space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)})

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(self.n_actions)

    def _steps(self, actions: dict[str, np.ndarray] | None) -> dict[str, AgentStep]:
        out = {}
        for i, agent in enumerate(self.agent_ids):
            last = -1 if actions is None else int(actions[agent])
            obs = {keys.OBS: np.array([self.tag + i, self.t, last], np.float32)}
            reward = 0.0 if actions is None else float(last == (self.t - 1) % self.n_actions)
            out[agent] = AgentStep(obs, reward, False, self.t >= self.agent_lengths[i] and actions is not None)
        return out

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        if seed is not None:
            self.tag = float(seed)
        self.t = 0
        return self._steps(None)

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        self.total_steps += 1
        while self.hang_after_steps is not None and self.total_steps > self.hang_after_steps:
            time.sleep(3600)
        if self.crash_after_steps is not None and self.total_steps > self.crash_after_steps:
            raise RuntimeError(f"simulated simulator crash after {self.crash_after_steps} steps")
        self.history.append({a: int(actions[a]) for a in self.agent_ids})
        self.t += 1
        return self._steps(actions)


class RecallEnv(Env):
    """A memory check: a cue (+1 or -1) is shown at the first step only, and the action taken
    at the last of `delay` steps earns 1 if it names the cue (0 for -1, 1 for +1).

    Every later observation is all zeros, so a feed-forward policy cannot do better than a
    mean return of 0.5; a recurrent one can reach 1.
    """

    agent_ids = ("agent",)

    def __init__(self, delay: int = 4) -> None:
        self.delay = delay
        self.rng = np.random.default_rng()
        self.cue = 0
        self.t = 0
        self._obs_space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.cue, self.t = int(self.rng.integers(2)), 0
        return {"agent": AgentStep({keys.OBS: np.array([2.0 * self.cue - 1.0, 1.0], np.float32)})}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        self.t += 1
        last = self.t >= self.delay
        reward = float(last and int(actions["agent"]) == self.cue)
        return {"agent": AgentStep({keys.OBS: np.zeros(2, np.float32)}, reward, last, False)}


class TeamsEnv(Env):
    """Two teams whose spaces differ: `scout_<i>` sees 3 numbers and has 2 actions, `guard_<i>`
    sees 5 and has 4. Each agent sees `[team marker, t, last action, 0...]` (marker 1 for
    scouts, 2 for guards: a test can tell whose rows reached which trainer) and earns 1 when
    its action equals `t % n_actions` (its own number of actions), so both teams can learn.
    Episodes last `episode_length` steps and end by truncation for every agent at once.
    """

    #: team -> (marker, observation size, actions)
    TEAMS: ClassVar[dict[str, tuple[float, int, int]]] = {"scout": (1.0, 3, 2), "guard": (2.0, 5, 4)}

    def __init__(self, scouts: int = 1, guards: int = 2, episode_length: int = 8) -> None:
        self.agent_ids = tuple([f"scout_{i}" for i in range(scouts)] + [f"guard_{i}" for i in range(guards)])
        self.episode_length = episode_length
        self.t = 0

    def _team(self, agent: str) -> tuple[float, int, int]:
        return self.TEAMS[agent.split("_")[0]]

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return gym.spaces.Dict({keys.OBS: gym.spaces.Box(-np.inf, np.inf, (self._team(agent)[1],), np.float32)})

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(self._team(agent)[2])

    def _steps(self, actions: dict[str, np.ndarray] | None) -> dict[str, AgentStep]:
        out = {}
        for agent in self.agent_ids:
            marker, size, n_actions = self._team(agent)
            last = -1 if actions is None else int(actions[agent])
            obs = np.zeros(size, np.float32)
            obs[:3] = marker, self.t, last
            reward = 0.0 if actions is None else float(last == (self.t - 1) % n_actions)
            out[agent] = AgentStep({keys.OBS: obs}, reward, False, actions is not None and self.t >= self.episode_length)
        return out

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        self.t = 0
        return self._steps(None)

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        self.t += 1
        return self._steps(actions)
