"""The environment ring: K slots of envs, each slot waiting on inference while the others step.

Pure compute, no process or socket: the actor worker feeds it replies and sends what it
returns. Each slot owns a time-major trajectory buffer [T + 1, rows, ...], where rows
are (env, agent) pairs, env-major. Row t holds the request (obs, rnn state), the reply
(action, logprob, value, policy version) and the env's answer to that action (reward,
terminated, truncated). When row T's reply arrives the buffer ships whole, and row T
becomes row 0 of the next trajectory (consecutive trajectories overlap by one step, which
carries the bootstrap value).

    ring = EnvRing(slots, trajectory_length=64)
    for slot in range(ring.size):
        inference.request(slot, ring.start(slot))
    while True:
        slot, reply = inference.reply()
        request, trajectory = ring.step(slot, reply)
        inference.request(slot, request)
        if trajectory is not None:
            samples.put(trajectory)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.workers import checks

#: Reply fields that are not stored per row: the RNN state is fed forward, not recorded twice.
_CARRIED = (keys.RNN_STATE,)


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

    def close(self) -> None:
        pass


class EnvSlot(Slot):
    """`srl.api.Env` objects stepped one after another.

    An agent that finishes before its env does is *dead* until the env resets: its rows
    carry `alive = 0` (the algorithm ignores them). The env resets when every agent is
    done. An env that sets `reports_episodes` gives its own episode returns through
    `info["episode_return"]` (e.g. the full game across Atari lives, before reward
    clipping); otherwise the return is the sum of rewards, averaged over agents.
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
        self.obs_fields = {k: (s.shape, s.dtype) for k, s in self.spaces[0].spaces.items()}
        self.reports_episodes = bool(getattr(envs[0], "reports_episodes", False))
        self.returns = np.zeros(self.n_envs)
        self.lengths = np.zeros(self.n_envs, np.int64)
        self.alive = np.ones(self.rows, bool)

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

    def close(self) -> None:
        for env in self.envs:
            env.close()


class EnvRing:
    def __init__(self, slots: Sequence[Slot], trajectory_length: int,
                 initial_state: Callable[[int], NamedArray] | None = None) -> None:
        self.slots = list(slots)
        self.T = trajectory_length
        self.initial_state = initial_state or (lambda n: NamedArray())
        self.buffers: list[NamedArray] = []
        #: Per slot and row t: views of the buffer that step t writes (see `_views`).
        self.views: list[list[SlotStep]] = []
        #: Per slot: the reply fields' columns, by path.
        self.columns: list[dict[str, np.ndarray]] = []
        self.t = [0] * len(self.slots)
        self.states: list[NamedArray] = []
        #: Returns and lengths of episodes finished since `pop_episodes()` was last called.
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.env_steps = 0

    @property
    def size(self) -> int:
        return len(self.slots)

    def start(self, slot: int) -> NamedArray:
        """Reset the slot's envs; returns its first request."""
        s = self.slots[slot]
        obs = NamedArray({k: np.zeros((self.T + 1, s.rows, *shape), dtype) for k, (shape, dtype) in s.obs_fields.items()})
        buffer = NamedArray({keys.OBS: obs})
        buffer[keys.REWARD] = np.zeros((self.T + 1, s.rows), np.float32)
        buffer[keys.TERMINATED] = np.zeros((self.T + 1, s.rows), bool)
        buffer[keys.TRUNCATED] = np.zeros((self.T + 1, s.rows), bool)
        buffer[keys.ALIVE] = np.ones((self.T + 1, s.rows), bool)
        s.reset_all(obs[0], buffer[keys.ALIVE][0])
        while len(self.buffers) <= slot:
            self.buffers.append(NamedArray())
            self.states.append(NamedArray())
            self.views.append([])
            self.columns.append({})
        self.buffers[slot] = buffer
        self.views[slot] = self._views(buffer)
        self.columns[slot] = {}
        self.states[slot] = self.initial_state(s.rows)
        self.t[slot] = 0
        return self._request(slot)

    def _views(self, buf: NamedArray) -> list[SlotStep]:
        """For each row t < T: where the slot's step t writes (reward, flags of row t; the next
        observations and alive flags in row t + 1), made once per slot instead of every step."""
        obs = buf[keys.OBS]
        return [SlotStep(buf[keys.REWARD][t], buf[keys.TERMINATED][t], buf[keys.TRUNCATED][t],
                         buf[keys.ALIVE][t + 1], obs[t + 1]) for t in range(self.T)]

    def _record(self, slot: int, path: str, t: int, row: np.ndarray) -> None:
        """Write row `t` of a field, allocating its [T + 1, ...] buffer the first time it appears."""
        columns = self.columns[slot]
        try:
            column = columns[path]
        except KeyError:
            buf = self.buffers[slot]
            buf[path] = np.zeros((self.T + 1, *np.shape(row)), np.asarray(row).dtype)
            column = columns[path] = buf[path]
        column[t] = row

    def _request(self, slot: int) -> NamedArray:
        t = self.t[slot]
        # Row t's observations: the views of row t - 1's step (row 0's are written by start).
        obs = self.views[slot][t - 1].next_obs if t else self.buffers[slot][keys.OBS][0]
        request = NamedArray({keys.OBS: obs})
        state = self.states[slot]
        if state.keys():  # an RNN policy: send the state, and record the one each row started from
            request[keys.RNN_STATE] = state
            for path, leaf in state.items_flat():
                self._record(slot, f"{keys.RNN_STATE}/{path}", t, leaf)
        return request

    def step(self, slot: int, reply: NamedArray) -> tuple[NamedArray, NamedArray | None]:
        """Record the reply, step the slot's envs; returns (next request, finished trajectory or None)."""
        s, buf, t = self.slots[slot], self.buffers[slot], self.t[slot]
        for path, leaf in reply.items_flat():
            if path.split("/", 1)[0] not in _CARRIED:
                self._record(slot, path, t, leaf)
        trajectory = None
        if t == self.T:
            trajectory = buf.copy()
            buf[0] = buf[self.T]
            t = 0
        out = self.views[slot][t]
        out.reset_rows = []  # the views are reused every T steps; the resets are this step's own
        for episode_return, length in s.step(buf[keys.ACTION][t], out):
            self.episode_returns.append(episode_return)
            self.episode_lengths.append(length)
        next_state = reply[keys.RNN_STATE].copy() if keys.RNN_STATE in reply else NamedArray()
        if next_state.keys() and out.reset_rows:
            next_state[np.asarray(out.reset_rows)] = self.initial_state(len(out.reset_rows))
        self.env_steps += s.n_envs
        self.t[slot] = t + 1
        self.states[slot] = next_state
        return self._request(slot), trajectory

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.episode_returns, self.episode_lengths
        self.episode_returns, self.episode_lengths = [], []
        return returns, lengths


def make_slots(make_env: Callable[[], Env], ring_size: int, envs_per_slot: int, seed: int,
               backend: str = "python", env_config: dict | None = None) -> list[Slot]:
    """Build `ring_size` slots of `envs_per_slot` envs with distinct seeds starting at `seed`.

    `backend="envpool"` builds each slot as one EnvPool batch from the `env_config` section.
    """
    if backend == "envpool":
        from srl.envs.envpool_slot import EnvPoolSlot

        return [EnvPoolSlot(env_config or {}, envs_per_slot, seed + k * envs_per_slot) for k in range(ring_size)]
    from srl.envs.gym_slot import GymSlot

    slots: list[Slot] = []
    name = str((env_config or {}).get("id") or (env_config or {}).get("type") or "env")
    on_bad = (env_config or {}).get("on_bad_output", "raise")
    for k in range(ring_size):
        envs = [make_env() for _ in range(envs_per_slot)]
        # Plain Gymnasium envs skip the per-agent objects of the general path.
        kind = GymSlot if GymSlot.takes(envs) else EnvSlot
        slots.append(kind(envs, [seed + k * envs_per_slot + j for j in range(envs_per_slot)], name, on_bad))
    return slots


def spaces_of(env: Env) -> tuple[gym.spaces.Dict, gym.Space]:
    agent = env.agent_ids[0]
    return env.observation_space(agent), env.action_space(agent)
