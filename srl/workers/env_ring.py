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

from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.data.named_array import NamedArray

#: Reply fields that are not stored per row: the RNN state is fed forward, not recorded twice.
_CARRIED = (keys.RNN_STATE,)


class EnvSlot:
    """The envs stepped together in one ring slot, flattened to rows (env-major, then agent)."""

    def __init__(self, envs: Sequence[Env], seeds: Sequence[int]) -> None:
        self.envs = list(envs)
        self.agents = envs[0].agent_ids
        self.seeds = list(seeds)
        self.n_agents = len(self.agents)
        self.rows = len(self.envs) * self.n_agents
        space = envs[0].observation_space(self.agents[0])
        self.obs_fields = {k: (s.shape, s.dtype) for k, s in space.spaces.items()}
        self.returns = np.zeros(len(self.envs))
        self.lengths = np.zeros(len(self.envs), np.int64)

    def write_obs(self, dest: NamedArray, j: int, steps: dict[str, AgentStep]) -> None:
        for a, agent in enumerate(self.agents):
            row = j * self.n_agents + a
            for field, value in steps[agent].obs.items():
                dest[field][row] = value

    def reset_all(self, obs: NamedArray) -> None:
        for j, env in enumerate(self.envs):
            self.write_obs(obs, j, env.reset(seed=self.seeds[j]))


class EnvRing:
    def __init__(self, slots: Sequence[EnvSlot], trajectory_length: int,
                 initial_state: Callable[[int], NamedArray] | None = None) -> None:
        self.slots = list(slots)
        self.T = trajectory_length
        self.initial_state = initial_state or (lambda n: NamedArray())
        self.buffers: list[NamedArray] = []
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
        s.reset_all(obs[0])
        while len(self.buffers) <= slot:
            self.buffers.append(NamedArray())
            self.states.append(NamedArray())
        self.buffers[slot] = buffer
        self.states[slot] = self.initial_state(s.rows)
        self.t[slot] = 0
        return self._request(slot)

    def _request(self, slot: int) -> NamedArray:
        request = NamedArray({keys.OBS: self.buffers[slot][keys.OBS][self.t[slot]]})
        state = self.states[slot]
        if state.paths():
            request[keys.RNN_STATE] = state
            self.buffers[slot].setdefault(keys.RNN_STATE, NamedArray())
            for path, leaf in state.items_flat():
                if path not in self.buffers[slot][keys.RNN_STATE].paths():
                    self.buffers[slot][keys.RNN_STATE][path] = np.zeros((self.T + 1, *leaf.shape), leaf.dtype)
                self.buffers[slot][keys.RNN_STATE][path][self.t[slot]] = leaf
        return request

    def step(self, slot: int, reply: NamedArray) -> tuple[NamedArray, NamedArray | None]:
        """Record the reply, step the slot's envs; returns (next request, finished trajectory or None)."""
        s, buf, t = self.slots[slot], self.buffers[slot], self.t[slot]
        for path, leaf in reply.items_flat():
            field = path.split("/", 1)[0]
            if field in _CARRIED:
                continue
            if path not in buf.paths():
                buf[path] = np.zeros((self.T + 1, *leaf.shape), leaf.dtype)
            buf[path][t] = leaf
        trajectory = None
        if t == self.T:
            trajectory = buf.copy()
            buf[0] = buf[self.T]
            t = 0
        next_state = reply[keys.RNN_STATE].copy() if keys.RNN_STATE in reply else NamedArray()
        actions = buf[keys.ACTION][t]
        reward, terminated, truncated = buf[keys.REWARD], buf[keys.TERMINATED], buf[keys.TRUNCATED]
        next_obs = buf[keys.OBS][t + 1]
        for j, env in enumerate(s.envs):
            base = j * s.n_agents
            steps = env.step({agent: actions[base + a] for a, agent in enumerate(s.agents)})
            total = 0.0
            all_done = True
            for a, agent in enumerate(s.agents):
                st = steps[agent]
                reward[t, base + a] = st.reward
                terminated[t, base + a] = st.terminated
                truncated[t, base + a] = st.truncated
                total += st.reward
                all_done &= st.done
            s.returns[j] += total / s.n_agents
            s.lengths[j] += 1
            if all_done:
                self.episode_returns.append(float(s.returns[j]))
                self.episode_lengths.append(int(s.lengths[j]))
                s.returns[j] = 0.0
                s.lengths[j] = 0
                steps = env.reset()
                if next_state.paths():
                    fresh = self.initial_state(s.n_agents)
                    next_state[base:base + s.n_agents] = fresh
            s.write_obs(next_obs, j, steps)
        self.env_steps += len(s.envs)
        self.t[slot] = t + 1
        self.states[slot] = next_state
        return self._request(slot), trajectory

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.episode_returns, self.episode_lengths
        self.episode_returns, self.episode_lengths = [], []
        return returns, lengths


def make_slots(make_env: Callable[[], Env], ring_size: int, envs_per_slot: int, seed: int) -> list[EnvSlot]:
    """Build `ring_size` slots of `envs_per_slot` envs with distinct seeds starting at `seed`."""
    slots = []
    for k in range(ring_size):
        envs = [make_env() for _ in range(envs_per_slot)]
        slots.append(EnvSlot(envs, [seed + k * envs_per_slot + j for j in range(envs_per_slot)]))
    return slots


def spaces_of(env: Env) -> tuple[gym.spaces.Dict, gym.Space]:
    agent = env.agent_ids[0]
    return env.observation_space(agent), env.action_space(agent)
