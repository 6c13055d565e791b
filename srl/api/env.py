"""The environment interface: multi-agent by default.

An `Env` has a fixed tuple of agent ids. `reset()` and `step(actions)` return one
`AgentStep` per agent: an observation dict, the reward, whether the episode terminated
or was truncated for that agent, and an info dict. A single-agent environment is the
special case of one agent (see `srl.envs.gym.GymEnv`).

The loop it lives in (an actor's environment ring)::

    steps = env.reset(seed)
    while True:
        actions = {agent: policy(steps[agent].obs) for agent in env.agent_ids}
        steps = env.step(actions)
        if all(s.terminated or s.truncated for s in steps.values()):
            steps = env.reset()

A competitive env names the winner of each episode under `info[WINNER]` on its last step.

An env may report numbers about a finished episode (how far objects moved, how often an
agent did something): a dict of floats under `info[EPISODE_STATS]` on the episode's last
step, in any agent's info. The run reports the mean of each over recent episodes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

Observation = dict[str, np.ndarray]

#: The info key of an episode's own statistics, `dict[str, float]`, given on its last step.
EPISODE_STATS = "episode_stats"
#: The info key of a competitive game's result on its last step: the winning agent's id (or a
#: list of them, a team), None for a draw. Self-play's league and `srl evaluate` count it.
WINNER = "winner"


@dataclass(slots=True)
class AgentStep:
    obs: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class Env(ABC):
    """A multi-agent environment. Subclasses set `agent_ids` and the per-agent spaces."""

    agent_ids: tuple[str, ...]

    @abstractmethod
    def observation_space(self, agent: str) -> gym.spaces.Dict:
        """A Dict space: every observation is a dict of arrays."""

    @abstractmethod
    def action_space(self, agent: str) -> gym.Space:
        """Discrete, MultiDiscrete or Box."""

    @abstractmethod
    def reset(self, seed: int | None = None) -> dict[str, AgentStep]: ...

    @abstractmethod
    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]: ...

    #: Frames per second of real time at one frame per `step`: the speed a video plays at.
    render_fps: float = 30.0

    def render(self) -> np.ndarray | None:
        """The current scene as an RGB image, [height, width, 3] uint8, for videos.

        None (the default) means the env cannot render. An env that can usually renders
        only when built for it (a `render=True` constructor argument, which
        `srl evaluate --video` passes to the first env when the constructor takes one),
        so that training envs never pay for it. It may also return None for a step that
        has no picture (e.g. after the episode's last step); the video skips that step.
        """
        return None

    def close(self) -> None:
        """Release simulator resources."""


def spaces_of(env: Env, agent: str | None = None) -> tuple[gym.spaces.Dict, gym.Space]:
    """(observation space, action space) of `agent` (None: the env's first agent)."""
    agent = env.agent_ids[0] if agent is None else agent
    return env.observation_space(agent), env.action_space(agent)
