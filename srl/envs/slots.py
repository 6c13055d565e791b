"""Env slots: a group of envs an actor steps together, flattened to rows.

The environment ring (`srl.workers.env_ring`) holds one slot per ring position and asks
each to step with its rows' actions. `EnvSlot` steps any `srl.api.Env` in Python;
`GymSlot` (`srl.envs.gym_slot`) is its fast path for plain Gymnasium envs, and
`EnvPoolSlot` (`srl.envs.envpool_slot`) steps an EnvPool batch in one call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from srl.api.env import EPISODE_STATS, AgentStep, Env, spaces_of
from srl.data.named_array import NamedArray
from srl.envs import checks


@dataclass
class SlotStep:
    """Where a slot writes one step: per-row arrays of the trajectory buffer (views)."""

    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    alive: np.ndarray
    next_obs: NamedArray
    #: Row indices whose env was reset (their RNN state restarts); filled by the slot.
    reset_rows: list[int] = field(default_factory=list)


class EpisodeStats:
    """The envs' own statistics (`info[EPISODE_STATS]`) of finished episodes, until popped:
    name -> one value per episode."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, stats: dict[str, float] | None) -> None:
        for name, value in (stats or {}).items():
            self.values.setdefault(name, []).append(float(value))

    def pop(self) -> dict[str, list[float]]:
        values, self.values = self.values, {}
        return values


class Slot(ABC):
    """A group of envs stepped together, flattened to `rows` (env-major, then agent).

    `EnvSlot` loops over `srl.api.Env` objects in Python; a batched backend (EnvPool)
    steps all its envs in one call. The ring treats both alike.
    """

    rows: int
    n_envs: int
    obs_fields: dict[str, tuple[tuple[int, ...], np.dtype]]
    #: (observation space, action space) shared by every row.
    spaces: tuple[gym.spaces.Dict, gym.Space]

    @abstractmethod
    def reset_all(self, obs: NamedArray, alive: np.ndarray) -> None: ...

    @abstractmethod
    def step(self, actions: np.ndarray, out: SlotStep) -> list[tuple[float, int]]:
        """Step every env with its rows' actions; returns (return, length) of finished episodes."""

    def pop_episode_stats(self) -> dict[str, list[float]]:
        """The envs' own statistics of episodes finished since the last call, name -> one value per episode."""
        return {}

    def close(self) -> None:
        pass


class EnvSlot(Slot):
    """`srl.api.Env` objects stepped one after another.

    An agent that finishes before its env does is *dead* until the env resets: its rows
    carry `alive = 0` (the algorithm ignores them). The env resets when every agent is
    done. An env that sets `reports_episodes` gives its own episode returns through
    `info["episode_return"]` (e.g. the full game across Atari lives, before reward
    clipping); otherwise the return is the sum of rewards, averaged over agents. An env's
    `info[EPISODE_STATS]` is kept for `pop_episode_stats`.
    """

    def __init__(self, envs: Sequence[Env], seeds: Sequence[int], name: str = "env",
                 on_bad_output: checks.OnBadOutput = "raise") -> None:
        self.name = name
        self.on_bad_output = on_bad_output
        #: Episodes cut short because the env returned NaN (with on_bad_output=skip_episode).
        self.skipped_episodes = 0
        self.envs = list(envs)
        self.agents = envs[0].agent_ids
        self.seeds = list(seeds)
        self.n_agents = len(self.agents)
        self.n_envs = len(self.envs)
        self.rows = self.n_envs * self.n_agents
        self.spaces = spaces_of(envs[0])
        for agent in self.agents[1:]:
            if (envs[0].observation_space(agent), envs[0].action_space(agent)) != self.spaces:
                raise ValueError(f"env {name!r}: agents {self.agents[0]!r} and {agent!r} have different observation "
                                 "or action spaces, and one policy acts for every agent; give each group of agents "
                                 "a policy of its own (the config's `policies:` and `agents:`)")
        self.obs_fields = {k: (s.shape, s.dtype) for k, s in self.spaces[0].spaces.items()}
        self.reports_episodes = bool(getattr(envs[0], "reports_episodes", False))
        self.returns = np.zeros(self.n_envs)
        self.lengths = np.zeros(self.n_envs, np.int64)
        self.alive = np.ones(self.rows, bool)
        self.episode_stats = EpisodeStats()

    def _write_obs(self, dest: NamedArray, j: int, steps: dict[str, AgentStep], check_dtypes: bool = False) -> None:
        for a, agent in enumerate(self.agents):
            row = j * self.n_agents + a
            for name, value in steps[agent].obs.items():
                if check_dtypes:
                    checks.check_dtype(self.name, j, agent, name, value, self.obs_fields[name][1])
                try:
                    dest[name][row] = value
                except (ValueError, TypeError, KeyError):
                    if name not in self.obs_fields:
                        raise checks.BadEnvOutput(f"{checks.where(self.name, j, agent, name)}: not a declared "
                                                  f"observation field ({list(self.obs_fields)})") from None
                    raise checks.shape_error(self.name, j, agent, name, value, self.obs_fields[name][0]) from None

    def _check_finite(self, out: SlotStep) -> None:
        bad = checks.non_finite_rows({k: out.next_obs[k] for k in self.obs_fields}, out.reward)
        for row, name in bad.items():
            j, agent = row // self.n_agents, self.agents[row % self.n_agents]
            if self.on_bad_output == "raise":
                raise checks.BadEnvOutput(f"{checks.where(self.name, j, agent, name)}: NaN or infinity")
            # skip_episode: end the episode here (truncated), start a new one, learn nothing from the row
            base = j * self.n_agents
            out.next_obs[base:base + self.n_agents] = 0
            out.reward[base:base + self.n_agents] = 0.0
            out.truncated[base:base + self.n_agents] = True
            self._write_obs(out.next_obs, j, self.envs[j].reset())
            self.alive[base:base + self.n_agents] = True
            self.returns[j], self.lengths[j] = 0.0, 0
            out.reset_rows.extend(range(base, base + self.n_agents))
            self.skipped_episodes += 1

    def reset_all(self, obs: NamedArray, alive: np.ndarray) -> None:
        for j, env in enumerate(self.envs):
            self._write_obs(obs, j, env.reset(seed=self.seeds[j]), check_dtypes=True)
        self.returns[:] = 0.0  # a slot played again (evaluations) starts its episodes from zero
        self.lengths[:] = 0
        self.episode_stats.pop()
        self.alive[:] = True
        alive[:] = True

    def step(self, actions: np.ndarray, out: SlotStep) -> list[tuple[float, int]]:
        checks.check_actions(self.name, self.spaces[1], actions)
        finished = []
        n = self.n_agents
        for j, env in enumerate(self.envs):
            base = j * n
            steps = env.step({agent: actions[base + a] for a, agent in enumerate(self.agents)})
            total = 0.0
            all_done = True
            stats = None
            for a, agent in enumerate(self.agents):
                st = steps[agent]
                row = base + a
                if self.alive[row]:
                    out.reward[row] = st.reward
                    out.terminated[row] = st.terminated
                    out.truncated[row] = st.truncated
                    total += st.reward
                    if st.done:
                        self.alive[row] = False
                else:  # finished earlier in this episode: a masked placeholder row
                    out.reward[row] = 0.0
                    out.terminated[row] = True
                    out.truncated[row] = False
                all_done &= not self.alive[row]
                if self.reports_episodes and "episode_return" in st.info and a == 0:
                    finished.append((float(st.info["episode_return"]), int(st.info.get("episode_length", 0))))
                if stats is None:
                    stats = st.info.get(EPISODE_STATS)
            self.episode_stats.add(stats)
            self.returns[j] += total / n
            self.lengths[j] += 1
            if all_done:
                if not self.reports_episodes:
                    finished.append((float(self.returns[j]), int(self.lengths[j])))
                self.returns[j] = 0.0
                self.lengths[j] = 0
                steps = env.reset()
                self.alive[base:base + n] = True
                out.reset_rows.extend(range(base, base + n))
            self._write_obs(out.next_obs, j, steps)
        self._check_finite(out)
        out.alive[:] = self.alive
        return finished

    def pop_episode_stats(self) -> dict[str, list[float]]:
        return self.episode_stats.pop()

    def close(self) -> None:
        for env in self.envs:
            env.close()
