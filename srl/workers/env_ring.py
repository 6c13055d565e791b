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

import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slots import Slot, SlotStep

#: Reply fields that are not stored per row: the RNN state is fed forward, not recorded twice.
_CARRIED = (keys.RNN_STATE,)


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

    def pop_episode_stats(self) -> dict[str, list[float]]:
        """The envs' own statistics (`srl.api.env.EPISODE_STATS`) of episodes finished since the last call."""
        merged: dict[str, list[float]] = {}
        for s in self.slots:
            for name, values in s.pop_episode_stats().items():
                merged.setdefault(name, []).extend(values)
        return merged
