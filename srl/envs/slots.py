"""Env slots: a group of envs an actor steps together, their agents' rows split by policy.

The environment ring (`srl.workers.env_ring`) holds one slot per ring position and asks
each to step with its rows' actions. A slot's rows are (env, agent) pairs; each policy that
acts in it has rows of its own (`groups`: env-major, then that policy's agents in the env's
order), with its own observation fields, action space and trajectory buffer. One policy is
the case of one group, keyed `DEFAULT_POLICY`:

    slot = EnvSlot(envs, seeds)                                # one policy acts for every agent
    slot = EnvSlot(envs, seeds, policy_of={"seeker_0": "seeker", "hider_0": "hider"})
    slot.reset_all({p: obs[p] for p in slot.groups}, {p: alive[p] for p in slot.groups})
    finished, by_policy = slot.step({p: actions[p] ...}, {p: SlotStep(...) ...})

`EnvSlot` steps any `srl.api.Env` in Python; `GymSlot` (`srl.envs.gym_slot`) is its fast
path for plain Gymnasium envs, and `EnvPoolSlot` (`srl.envs.envpool_slot`) steps an EnvPool
batch in one call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.agents import DEFAULT_POLICY
from srl.api.env import EPISODE_STATS, WINNER, AgentStep, Env
from srl.data.named_array import NamedArray
from srl.envs import checks

#: (return, length) of one episode.
Episode = tuple[float, int]


@dataclass
class SlotStep:
    """Where a slot writes one step of one policy's rows: per-row arrays of its trajectory buffer (views)."""

    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    alive: np.ndarray
    next_obs: NamedArray
    #: Row indices whose env was reset (their RNN state restarts); filled by the slot.
    reset_rows: list[int] = field(default_factory=list)


@dataclass
class PolicyRows:
    """One policy's share of a slot: its agents, rows, observation fields and spaces."""

    agents: tuple[str, ...]
    rows: int
    obs_fields: dict[str, tuple[tuple[int, ...], np.dtype]]
    spaces: tuple[gym.spaces.Dict, gym.Space]

    @classmethod
    def of(cls, agents: Sequence[str], n_envs: int, spaces: tuple[gym.spaces.Dict, gym.Space]) -> PolicyRows:
        fields = {k: (s.shape, s.dtype) for k, s in spaces[0].spaces.items()}
        return cls(tuple(agents), n_envs * len(agents), fields, spaces)


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
    """A group of envs stepped together, each policy's rows apart (`groups`, by policy).

    `EnvSlot` loops over `srl.api.Env` objects in Python; a batched backend (EnvPool)
    steps all its envs in one call. The ring treats both alike.
    """

    n_envs: int
    groups: dict[str, PolicyRows]

    @abstractmethod
    def reset_all(self, obs: dict[str, NamedArray], alive: dict[str, np.ndarray]) -> None:
        """Reset every env (with its seed) and write each policy's first observations and alive flags."""

    @abstractmethod
    def step(self, actions: dict[str, np.ndarray], out: dict[str, SlotStep]) -> tuple[list[Episode],
                                                                                       dict[str, list[Episode]]]:
        """Step every env with every policy's actions; returns the finished episodes (return,
        length): the env's, and with several policies each policy's ({} with one)."""

    @property
    def only(self) -> PolicyRows:
        """The rows of the slot's one policy (a slot of several policies has no such thing)."""
        if len(self.groups) != 1:
            raise ValueError(f"the slot's agents act with several policies ({', '.join(self.groups)}): "
                             "ask for one policy's rows in `groups`")
        return next(iter(self.groups.values()))

    @property
    def spaces(self) -> tuple[gym.spaces.Dict, gym.Space]:
        """(observation space, action space) of every row, with one policy."""
        return self.only.spaces

    @property
    def rows(self) -> int:
        return self.only.rows

    @property
    def obs_fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return self.only.obs_fields

    def pop_episode_stats(self) -> dict[str, list[float]]:
        """The envs' own statistics of episodes finished since the last call, name -> one value per episode."""
        return {}

    def pop_winners(self) -> list[Any]:
        """The winners (`srl.api.env.WINNER`) of the episodes the envs reported since the last call, in order."""
        return []

    def close(self) -> None:
        pass


class EnvSlot(Slot):
    """`srl.api.Env` objects stepped one after another, their agents' rows split by policy.

    `policy_of` maps each agent to the policy it acts with (`srl.api.agents.AgentRouter`);
    without it one policy, `DEFAULT_POLICY`, acts for every agent. Every agent of a policy
    has that policy's spaces.

    An agent that finishes before its env does is *dead* until the env resets: its rows
    carry `alive = 0` (the algorithm ignores them). The env resets when every agent, of
    every policy, is done. Episode returns: an env that sets `reports_episodes` gives its
    own through `info["episode_return"]` (e.g. the full game across Atari lives, before
    reward clipping); otherwise the return is the sum of rewards averaged over agents. With
    several policies, each policy's return too: its agents' rewards summed, averaged over
    them. An env's `info[EPISODE_STATS]` is kept for `pop_episode_stats`.
    """

    def __init__(self, envs: Sequence[Env], seeds: Sequence[int], name: str = "env",
                 on_bad_output: checks.OnBadOutput = "raise", policy_of: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.on_bad_output = on_bad_output
        #: Episodes cut short because the env returned NaN (with on_bad_output=skip_episode).
        self.skipped_episodes = 0
        self.envs = list(envs)
        self.seeds = list(seeds)
        self.agents = tuple(envs[0].agent_ids)
        self.n_agents = len(self.agents)
        self.n_envs = len(self.envs)
        policy_of = policy_of or dict.fromkeys(self.agents, DEFAULT_POLICY)
        self.groups = {}
        for policy in dict.fromkeys(policy_of[a] for a in self.agents):
            agents = [a for a in self.agents if policy_of[a] == policy]
            spaces = (envs[0].observation_space(agents[0]), envs[0].action_space(agents[0]))
            for agent in agents[1:]:
                if (envs[0].observation_space(agent), envs[0].action_space(agent)) != spaces:
                    raise ValueError(f"env {name!r}: agents {agents[0]!r} and {agent!r} have different observation "
                                     "or action spaces, and one policy acts for both; give each group of agents "
                                     "a policy of its own (the config's `policies:` and `agents:`)")
            self.groups[policy] = PolicyRows.of(agents, self.n_envs, spaces)
        #: Per agent, in the env's order: (its policy, its index among that policy's agents, their count).
        self.seats = [(policy_of[a], self.groups[policy_of[a]].agents.index(a), len(self.groups[policy_of[a]].agents))
                      for a in self.agents]
        self.several = len(self.groups) > 1
        self.reports_episodes = bool(getattr(envs[0], "reports_episodes", False))
        self.returns = np.zeros(self.n_envs)
        self.policy_returns = {p: np.zeros(self.n_envs) for p in self.groups} if self.several else {}
        self.lengths = np.zeros(self.n_envs, np.int64)
        self.alive = {p: np.ones(g.rows, bool) for p, g in self.groups.items()}
        self.episode_stats = EpisodeStats()
        #: The winners (`srl.api.env.WINNER`) of the episodes an env reported, in the order they ended, until popped.
        self.winners: list[Any] = []

    def _write_obs(self, dest: dict[str, NamedArray], j: int, steps: dict[str, AgentStep],
                   check_dtypes: bool = False) -> None:
        for agent, (policy, k, n) in zip(self.agents, self.seats):
            fields, row = self.groups[policy].obs_fields, j * n + k
            for name, value in steps[agent].obs.items():
                if check_dtypes:
                    checks.check_dtype(self.name, j, agent, name, value, fields[name][1])
                try:
                    dest[policy][name][row] = value
                except (ValueError, TypeError, KeyError):
                    if name not in fields:
                        raise checks.BadEnvOutput(f"{checks.where(self.name, j, agent, name)}: not a declared "
                                                  f"observation field ({list(fields)})") from None
                    raise checks.shape_error(self.name, j, agent, name, value, fields[name][0]) from None

    def _env_rows(self, j: int) -> dict[str, range]:
        """Each policy's rows of env j."""
        return {p: range(j * len(g.agents), (j + 1) * len(g.agents)) for p, g in self.groups.items()}

    def reset_all(self, obs: dict[str, NamedArray], alive: dict[str, np.ndarray]) -> None:
        for j, env in enumerate(self.envs):
            self._write_obs(obs, j, env.reset(seed=self.seeds[j]), check_dtypes=True)
        self.returns[:] = 0.0  # a slot played again (evaluations) starts its episodes from zero
        for returns in self.policy_returns.values():
            returns[:] = 0.0
        self.lengths[:] = 0
        self.episode_stats.pop()
        self.winners.clear()
        for policy in self.groups:
            self.alive[policy][:] = True
            alive[policy][:] = True

    def step(self, actions: dict[str, np.ndarray], out: dict[str, SlotStep]) -> tuple[list[Episode],
                                                                                       dict[str, list[Episode]]]:
        for policy, group in self.groups.items():
            checks.check_actions(self.name, group.spaces[1], actions[policy])
        finished: list[Episode] = []
        by_policy: dict[str, list[Episode]] = {p: [] for p in self.policy_returns}
        for j, env in enumerate(self.envs):
            steps = env.step({a: actions[p][j * n + k] for a, (p, k, n) in zip(self.agents, self.seats)})
            total, totals, all_done, stats = 0.0, dict.fromkeys(self.policy_returns, 0.0), True, None
            for a, (agent, (policy, k, n)) in enumerate(zip(self.agents, self.seats)):
                st, o, alive, row = steps[agent], out[policy], self.alive[policy], j * n + k
                if alive[row]:
                    o.reward[row], o.terminated[row], o.truncated[row] = st.reward, st.terminated, st.truncated
                    total += st.reward
                    if self.several:
                        totals[policy] += st.reward
                    if st.done:
                        alive[row] = False
                else:  # finished earlier in this episode: a masked placeholder row
                    o.reward[row], o.terminated[row], o.truncated[row] = 0.0, True, False
                all_done &= not alive[row]
                if self.reports_episodes and a == 0 and "episode_return" in st.info:
                    finished.append((float(st.info["episode_return"]), int(st.info.get("episode_length", 0))))
                    if WINNER in st.info:
                        self.winners.append(st.info[WINNER])
                if stats is None:
                    stats = st.info.get(EPISODE_STATS)
            self.episode_stats.add(stats)
            self.returns[j] += total / self.n_agents
            for policy, returns in self.policy_returns.items():
                returns[j] += totals[policy] / len(self.groups[policy].agents)
            self.lengths[j] += 1
            if all_done:
                if not self.reports_episodes:
                    finished.append((float(self.returns[j]), int(self.lengths[j])))
                for policy, returns in self.policy_returns.items():
                    by_policy[policy].append((float(returns[j]), int(self.lengths[j])))
                steps = self._restart(j, out)
            self._write_obs({p: o.next_obs for p, o in out.items()}, j, steps)
        self._check_finite(out)
        for policy, o in out.items():
            o.alive[:] = self.alive[policy]
        return finished, by_policy

    def _restart(self, j: int, out: dict[str, SlotStep]) -> dict[str, AgentStep]:
        """Reset env j (its episode is over): its rows live again, their RNN states restart."""
        self.returns[j], self.lengths[j] = 0.0, 0
        for returns in self.policy_returns.values():
            returns[j] = 0.0
        for policy, rows in self._env_rows(j).items():
            self.alive[policy][rows.start:rows.stop] = True
            out[policy].reset_rows.extend(rows)
        return self.envs[j].reset()

    def _check_finite(self, out: dict[str, SlotStep]) -> None:
        bad_envs: dict[int, str] = {}
        for policy, o in out.items():
            group = self.groups[policy]
            n = len(group.agents)
            for row, name in checks.non_finite_rows({k: o.next_obs[k] for k in group.obs_fields}, o.reward).items():
                if self.on_bad_output == "raise":
                    agent = group.agents[row % n]
                    raise checks.BadEnvOutput(f"{checks.where(self.name, row // n, agent, name)}: NaN or infinity")
                bad_envs.setdefault(row // n, name)
        for j in bad_envs:  # skip_episode: end it here (truncated), start a new one, learn nothing from it
            for policy, rows in self._env_rows(j).items():
                o = out[policy]
                o.next_obs[rows.start:rows.stop] = 0
                o.reward[rows.start:rows.stop] = 0.0
                o.truncated[rows.start:rows.stop] = True
            self._write_obs({p: o.next_obs for p, o in out.items()}, j, self._restart(j, out))
            self.skipped_episodes += 1

    def pop_episode_stats(self) -> dict[str, list[float]]:
        return self.episode_stats.pop()

    def pop_winners(self) -> list[Any]:
        winners, self.winners = self.winners, []
        return winners

    def close(self) -> None:
        for env in self.envs:
            env.close()
