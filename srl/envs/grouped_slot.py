"""A slot of envs whose agents act with several policies: each policy's rows are its own.

Agents that act with different policies may differ in observation and action spaces, so
the slot keeps one set of rows per policy (env-major, then that policy's agents in the
env's order; `srl.api.agents.AgentRouter`), each with its own observation fields, action
space and trajectory buffer. A step takes every policy's actions and writes every policy's
rows; an env resets when all of its agents, of every policy, are done.

    slot = GroupedSlot(envs, seeds, router)
    slot.reset_all({p: obs[p] for p in slot.groups}, {p: alive[p] for p in slot.groups})
    finished, by_policy = slot.step({p: actions[p] ...}, {p: SlotStep(...) ...})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from srl.api.agents import AgentRouter
from srl.api.env import EPISODE_STATS, AgentStep, Env
from srl.data.named_array import NamedArray
from srl.envs import checks
from srl.envs.slots import EpisodeStats, SlotStep

Episode = tuple[float, int]


@dataclass
class PolicyRows:
    """One policy's share of a slot: its agents, rows, observation fields and spaces."""

    agents: tuple[str, ...]
    rows: int
    obs_fields: dict[str, tuple[tuple[int, ...], np.dtype]]
    spaces: tuple[gym.spaces.Dict, gym.Space]


class GroupedSlot:
    """`srl.api.Env` objects stepped one after another, their agents' rows split by policy.

    Episode returns: the env's (its own `info["episode_return"]` when it `reports_episodes`,
    else the sum of rewards averaged over all agents, as `EnvSlot` reports them), and per
    policy the sum of rewards averaged over that policy's agents.
    """

    def __init__(self, envs: Sequence[Env], seeds: Sequence[int], router: AgentRouter, name: str = "env",
                 on_bad_output: checks.OnBadOutput = "raise") -> None:
        self.envs, self.seeds, self.router, self.name = list(envs), list(seeds), router, name
        self.on_bad_output = on_bad_output
        self.skipped_episodes = 0
        self.agents = router.agent_ids
        self.n_envs = len(self.envs)
        self.groups: dict[str, PolicyRows] = {}
        for policy in router.policies:
            agents = router.agents_of(policy)
            spaces = (envs[0].observation_space(agents[0]), envs[0].action_space(agents[0]))
            fields = {k: (s.shape, s.dtype) for k, s in spaces[0].spaces.items()}
            self.groups[policy] = PolicyRows(agents, self.n_envs * len(agents), fields, spaces)
        #: agent -> (its policy, its index among that policy's agents)
        self.place = {a: (p, self.groups[p].agents.index(a)) for a, p in router.policy_of.items()}
        self.reports_episodes = bool(getattr(envs[0], "reports_episodes", False))
        self.returns = np.zeros(self.n_envs)
        self.policy_returns = {p: np.zeros(self.n_envs) for p in self.groups}
        self.lengths = np.zeros(self.n_envs, np.int64)
        self.alive = {p: np.ones(g.rows, bool) for p, g in self.groups.items()}
        self.episode_stats = EpisodeStats()

    def _row(self, agent: str, j: int) -> tuple[str, int]:
        policy, k = self.place[agent]
        return policy, j * len(self.groups[policy].agents) + k

    def _write_obs(self, dest: dict[str, NamedArray], j: int, steps: dict[str, AgentStep],
                   check_dtypes: bool = False) -> None:
        for agent in self.agents:
            policy, row = self._row(agent, j)
            fields = self.groups[policy].obs_fields
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
        self.returns[:] = 0.0
        for returns in self.policy_returns.values():
            returns[:] = 0.0
        self.lengths[:] = 0
        self.episode_stats.pop()
        for policy in self.groups:
            self.alive[policy][:] = True
            alive[policy][:] = True

    def step(self, actions: dict[str, np.ndarray], out: dict[str, SlotStep]) -> tuple[list[Episode],
                                                                                       dict[str, list[Episode]]]:
        """Step every env with every policy's actions; returns the finished episodes (return,
        length): the env's, and each policy's."""
        for policy, group in self.groups.items():
            checks.check_actions(self.name, group.spaces[1], actions[policy])
        finished: list[Episode] = []
        by_policy: dict[str, list[Episode]] = {p: [] for p in self.groups}
        first = self.agents[0]
        for j, env in enumerate(self.envs):
            steps = env.step({a: actions[p][row] for a in self.agents for p, row in [self._row(a, j)]})
            total, totals, all_done, stats = 0.0, dict.fromkeys(self.groups, 0.0), True, None
            for agent in self.agents:
                policy, row = self._row(agent, j)
                st, o, alive = steps[agent], out[policy], self.alive[policy]
                if alive[row]:
                    o.reward[row], o.terminated[row], o.truncated[row] = st.reward, st.terminated, st.truncated
                    total += st.reward
                    totals[policy] += st.reward
                    if st.done:
                        alive[row] = False
                else:  # finished earlier in this episode: a masked placeholder row
                    o.reward[row], o.terminated[row], o.truncated[row] = 0.0, True, False
                all_done &= not alive[row]
                if self.reports_episodes and agent == first and "episode_return" in st.info:
                    finished.append((float(st.info["episode_return"]), int(st.info.get("episode_length", 0))))
                if stats is None:
                    stats = st.info.get(EPISODE_STATS)
            self.episode_stats.add(stats)
            self.returns[j] += total / len(self.agents)
            for policy, group in self.groups.items():
                self.policy_returns[policy][j] += totals[policy] / len(group.agents)
            self.lengths[j] += 1
            if all_done:
                if not self.reports_episodes:
                    finished.append((float(self.returns[j]), int(self.lengths[j])))
                for policy in self.groups:
                    by_policy[policy].append((float(self.policy_returns[policy][j]), int(self.lengths[j])))
                steps = self._restart(j, out)
            self._write_obs({p: o.next_obs for p, o in out.items()}, j, steps)
        self._check_finite(out)
        for policy, o in out.items():
            o.alive[:] = self.alive[policy]
        return finished, by_policy

    def _restart(self, j: int, out: dict[str, SlotStep]) -> dict[str, AgentStep]:
        """Reset env j (its episode is over): its rows live again, their RNN states restart."""
        self.returns[j], self.lengths[j] = 0.0, 0
        for policy, rows in self._env_rows(j).items():
            self.policy_returns[policy][j] = 0.0
            self.alive[policy][rows.start:rows.stop] = True
            out[policy].reset_rows.extend(rows)
        return self.envs[j].reset()

    def _check_finite(self, out: dict[str, SlotStep]) -> None:
        bad_envs: dict[int, str] = {}
        for policy, o in out.items():
            fields = {k: o.next_obs[k] for k in self.groups[policy].obs_fields}
            n = len(self.groups[policy].agents)
            for row, name in checks.non_finite_rows(fields, o.reward).items():
                agent = self.groups[policy].agents[row % n]
                if self.on_bad_output == "raise":
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

    def close(self) -> None:
        for env in self.envs:
            env.close()
