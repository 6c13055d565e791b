"""The environment ring: K slots of envs, each slot waiting on inference while the others step.

Pure compute, no process or socket: the actor worker feeds it replies and sends what it
returns. Each slot owns a time-major trajectory buffer [T + 1, rows, ...], where rows
are (env, agent) pairs, env-major. Row t holds the request (obs, rnn state), the reply
(action, logprob, value, policy version) and the env's answer to that action (reward,
terminated, truncated). When row T's reply arrives the buffer ships whole, and row T
becomes row 0 of the next trajectory (consecutive trajectories overlap by one step, which
carries the bootstrap value).

Requests, replies and trajectories are dicts by policy (`srl.envs.slots`: one policy is the
case of one key, `DEFAULT_POLICY`). A slot steps once every policy has answered for it, and
each policy's rows have a buffer of their own (a `Track`), so each policy's trajectories
hold only its agents' rows:

    ring = EnvRing(slots, trajectory_length=64, initial_state=policy.initial_state)
    for slot in range(ring.size):
        inference.request(slot, ring.start(slot))            # {policy: request}
    while True:
        slot, replies = inference.reply()                    # {policy: reply}
        requests, trajectories = ring.step(slot, replies)
        inference.request(slot, requests)
        if trajectories is not None:
            samples.put(trajectories)                        # {policy: trajectory}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slots import Slot, SlotStep

#: Reply fields that are not stored per row: the RNN state is fed forward, not recorded twice.
_CARRIED = (keys.RNN_STATE,)


class Track:
    """One trajectory buffer [T + 1, rows, ...] and the rows' recurrent state: the rows of one
    ring slot that one policy acts for (all of them, with one policy)."""

    def __init__(self, rows: int, obs_fields: dict[str, tuple[tuple[int, ...], np.dtype]], trajectory_length: int,
                 initial_state: Callable[[int], NamedArray]) -> None:
        self.T = trajectory_length
        self.initial_state = initial_state
        obs = NamedArray({k: np.zeros((self.T + 1, rows, *shape), dtype) for k, (shape, dtype) in obs_fields.items()})
        self.buffer = buf = NamedArray({keys.OBS: obs})
        buf[keys.REWARD] = np.zeros((self.T + 1, rows), np.float32)
        buf[keys.TERMINATED] = np.zeros((self.T + 1, rows), bool)
        buf[keys.TRUNCATED] = np.zeros((self.T + 1, rows), bool)
        buf[keys.ALIVE] = np.ones((self.T + 1, rows), bool)
        #: Per row t < T: where the slot's step t writes (reward, flags of row t; the next
        #: observations and alive flags in row t + 1), made once instead of every step.
        self.views = [SlotStep(buf[keys.REWARD][t], buf[keys.TERMINATED][t], buf[keys.TRUNCATED][t],
                               buf[keys.ALIVE][t + 1], obs[t + 1]) for t in range(self.T)]
        #: The reply fields' columns, by path.
        self.columns: dict[str, np.ndarray] = {}
        self.state = initial_state(rows)
        self.t = 0

    @property
    def first_obs(self) -> NamedArray:
        """Row 0's observations, which a slot's `reset_all` writes."""
        return self.buffer[keys.OBS][0]

    @property
    def first_alive(self) -> np.ndarray:
        return self.buffer[keys.ALIVE][0]

    def _record(self, path: str, t: int, row: np.ndarray) -> None:
        """Write row `t` of a field, allocating its [T + 1, ...] buffer the first time it appears."""
        try:
            column = self.columns[path]
        except KeyError:
            self.buffer[path] = np.zeros((self.T + 1, *np.shape(row)), np.asarray(row).dtype)
            column = self.columns[path] = self.buffer[path]
        column[t] = row

    def request(self) -> NamedArray:
        t = self.t
        # Row t's observations: the views of row t - 1's step (row 0's are written by reset_all).
        request = NamedArray({keys.OBS: self.views[t - 1].next_obs if t else self.first_obs})
        if self.state.keys():  # an RNN policy: send the state, and record the one each row started from
            request[keys.RNN_STATE] = self.state
            for path, leaf in self.state.items_flat():
                self._record(f"{keys.RNN_STATE}/{path}", t, leaf)
        return request

    def take(self, reply: NamedArray) -> tuple[NamedArray | None, np.ndarray, SlotStep]:
        """Record the reply in row t; returns (the finished trajectory or None, the actions to
        step with, where the step writes). Row T's reply ships the buffer and becomes row 0."""
        for path, leaf in reply.items_flat():
            if path.split("/", 1)[0] not in _CARRIED:
                self._record(path, self.t, leaf)
        trajectory = None
        if self.t == self.T:
            trajectory = self.buffer.copy()
            self.buffer[0] = self.buffer[self.T]
            self.t = 0
        out = self.views[self.t]
        out.reset_rows = []  # the views are reused every T steps; the resets are this step's own
        return trajectory, self.buffer[keys.ACTION][self.t], out

    def advance(self, reply: NamedArray, out: SlotStep) -> NamedArray:
        """After the slot stepped into `out`: carry the RNN state (fresh for reset rows); the next request."""
        state = reply[keys.RNN_STATE].copy() if keys.RNN_STATE in reply else NamedArray()
        if state.keys() and out.reset_rows:
            state[np.asarray(out.reset_rows)] = self.initial_state(len(out.reset_rows))
        self.state = state
        self.t += 1
        return self.request()


InitialState = Callable[[int], NamedArray]


def _no_state(rows: int) -> NamedArray:
    return NamedArray()


class EnvRing:
    """K slots, each stepping once all its policies' replies are in; one `Track` per slot and policy.

    `initial_state`: the policy's RNN state for fresh rows, or with several policies a dict
    of them by policy (none: a policy without state).
    """

    def __init__(self, slots: Sequence[Slot], trajectory_length: int,
                 initial_state: InitialState | dict[str, InitialState] | None = None) -> None:
        self.slots = list(slots)
        self.T = trajectory_length
        self.policies = tuple(self.slots[0].groups)
        if not isinstance(initial_state, dict):
            initial_state = dict.fromkeys(self.policies, initial_state or _no_state)
        self.initial_states = initial_state
        self.tracks: list[dict[str, Track]] = [{} for _ in self.slots]
        #: Returns and lengths of episodes finished since `pop_episodes()` was last called.
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        #: With several policies: each one's returns (averaged over its agents) since `pop_policy_episodes()`.
        self.policy_returns: dict[str, list[float]] = {p: [] for p in self.policies} if len(self.policies) > 1 else {}
        self.env_steps = 0

    @property
    def size(self) -> int:
        return len(self.slots)

    @property
    def buffers(self) -> list[NamedArray]:
        return [track.buffer for tracks in self.tracks for track in tracks.values()]

    def start(self, slot: int) -> dict[str, NamedArray]:
        """Reset the slot's envs; returns its first requests, by policy."""
        s = self.slots[slot]
        tracks = self.tracks[slot] = {p: Track(g.rows, g.obs_fields, self.T, self.initial_states[p])
                                      for p, g in s.groups.items()}
        s.reset_all({p: t.first_obs for p, t in tracks.items()}, {p: t.first_alive for p, t in tracks.items()})
        return {p: t.request() for p, t in tracks.items()}

    def step(self, slot: int, replies: dict[str, NamedArray]) -> tuple[dict[str, NamedArray],
                                                                       dict[str, NamedArray] | None]:
        """Record every policy's reply, step the slot; returns (the next requests by policy, the
        finished trajectories by policy, or None when none finished)."""
        tracks = self.tracks[slot]
        taken = {p: track.take(replies[p]) for p, track in tracks.items()}
        finished, by_policy = self.slots[slot].step({p: a for p, (_, a, _) in taken.items()},
                                                    {p: out for p, (_, _, out) in taken.items()})
        for episode_return, length in finished:
            self.episode_returns.append(episode_return)
            self.episode_lengths.append(length)
        for policy, episodes in by_policy.items():
            self.policy_returns[policy].extend(r for r, _ in episodes)
        self.env_steps += self.slots[slot].n_envs
        requests = {p: track.advance(replies[p], taken[p][2]) for p, track in tracks.items()}
        trajectories = {p: t for p, (t, _, _) in taken.items() if t is not None}
        return requests, trajectories or None

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.episode_returns, self.episode_lengths
        self.episode_returns, self.episode_lengths = [], []
        return returns, lengths

    def pop_policy_episodes(self) -> dict[str, list[float]]:
        """With several policies, each one's episode returns since the last call ({} with one)."""
        returns, self.policy_returns = self.policy_returns, {p: [] for p in self.policy_returns}
        return returns

    def pop_episode_stats(self) -> dict[str, list[float]]:
        """The envs' own statistics (`srl.api.env.EPISODE_STATS`) of episodes finished since the last call."""
        merged: dict[str, list[float]] = {}
        for s in self.slots:
            for name, values in s.pop_episode_stats().items():
                merged.setdefault(name, []).extend(values)
        return merged
