"""The replay buffer: trajectories in, prioritized batches of transitions or sequences out.

Storage is a ring of *segments*. A segment is one env's share of a trajectory: its rows
0..T (T steps, plus row T, which starts the next trajectory and carries the observation
the last step bootstraps from) for each of the env's G agents. Trajectories arrive from
actors time-major, [T + 1, envs x agents, ...], env-major; every field is kept except the
acting statistics (log-prob, value) a value-based learner does not read, unless `also_store`
names them (MuZero learns from the searched value and visit distribution its actors recorded).

What is sampled (`unit`):

* ``transition``: one step of one segment, with its n-step return computed when the
  segment was stored (the n rewards after the action, discounted; fewer when the episode
  or the segment ends first) and the observation it bootstraps from. With G agents a
  transition is the joint step of all of them (VDN and QMIX learn from joint steps).
* ``sequence``: a whole segment, time-major, with the recurrent state its first row
  started from (R2D2's stored state; the learner burns in on the first rows).

Units are drawn in proportion to priority ** alpha (alpha 0: uniform) from a sum tree;
new units get the highest priority seen so far; importance weights
(N * P(i)) ** -beta, scaled so the largest in the batch is 1, correct the bias. A unit's
index names the segment it came from by serial number, so a priority update that arrives
after its segment was overwritten is ignored.

    buffer = ReplayBuffer(capacity=100_000, trajectory_length=16, n_step=3, gamma=0.99, alpha=0.6)
    buffer.insert(trajectory)
    batch = buffer.sample(batch_size=64, updates=4)          # leaves [4, 64, G, ...]
    buffer.update_priorities(batch[keys.REPLAY_INDEX], td_errors)
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.data.returns import nstep_targets
from srl.replay.sum_tree import SumTree

#: The trajectory fields stored (the acting statistics, log-prob and value, are not).
STORED = (keys.OBS, keys.ACTION, keys.REWARD, keys.TERMINATED, keys.TRUNCATED, keys.ALIVE, keys.VERSION,
          keys.RNN_STATE)
#: Added to |TD error| before the power alpha, so no stored unit becomes impossible to draw.
PRIORITY_EPS = 1e-6

Unit = Literal["transition", "sequence"]


class ReplayBuffer:
    def __init__(self, capacity: int, trajectory_length: int, agents: int = 1, *, unit: Unit = "transition",
                 n_step: int = 1, gamma: float = 0.99, alpha: float = 0.0, beta: float = 0.4, seed: int = 0,
                 also_store: tuple[str, ...] = ()) -> None:
        """`capacity` in env steps (one env's step counts once, whatever its number of agents);
        `also_store`: trajectory fields kept besides `STORED` (an error if a trajectory lacks one)."""
        self.T, self.G, self.unit = trajectory_length, agents, unit
        self.also_store = tuple(also_store)
        self.n_step, self.gamma, self.alpha, self.beta = n_step, gamma, alpha, beta
        self.segments = max(1, -(-capacity // trajectory_length))
        self.units_per_segment = trajectory_length if unit == "transition" else 1
        self.tree = SumTree(self.segments * self.units_per_segment)
        #: Leaves [segments, T + 1, G, ...], allocated at the first insert (shapes come from the data).
        self.store: NamedArray | None = None
        #: Transitions: n-step return, discount and bootstrap row, [segments, T, G].
        self.targets: NamedArray | None = None
        #: Serial number of the segment in each slot (-1: empty); segment k goes to slot k % segments.
        self.serial = np.full(self.segments, -1, np.int64)
        self.inserted = 0
        self.max_priority = 1.0
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ size
    @property
    def filled(self) -> int:
        """Segments held."""
        return min(self.inserted, self.segments)

    @property
    def env_steps(self) -> int:
        """Env steps held."""
        return self.filled * self.T

    @property
    def nbytes(self) -> int:
        held = sum(x.nbytes for x in (self.store, self.targets) if x is not None)
        return held + self.tree.tree.nbytes + self.serial.nbytes

    # ------------------------------------------------------------------ in
    def insert(self, trajectory: NamedArray) -> int:
        """Store a time-major trajectory [T + 1, envs x agents, ...]; returns the env steps it holds."""
        rows, columns = trajectory[keys.REWARD].shape[:2]
        if rows != self.T + 1:
            raise ValueError(f"replay: a trajectory of {rows - 1} steps reached a buffer of trajectory_length "
                             f"{self.T} (actors.trajectory_length must match)")
        if columns % self.G:
            raise ValueError(f"replay: {columns} rows are not whole envs of {self.G} agents")
        envs = columns // self.G
        missing = [k for k in self.also_store if k not in trajectory]
        if missing:
            raise ValueError(f"replay: the learner reads {missing} from stored trajectories, but the actors' "
                             f"trajectories hold only {sorted(trajectory)} (does the policy record them?)")
        kept = NamedArray({k: trajectory[k] for k in (*STORED, *self.also_store) if k in trajectory
                           and (k != keys.RNN_STATE or self.unit == "sequence")})
        # [T + 1, envs * G, ...] -> [envs, T + 1, G, ...]: one segment per env.
        segments = kept.map(lambda x: np.swapaxes(x.reshape(rows, envs, self.G, *x.shape[2:]), 0, 1))
        if self.store is None:
            self.store = segments.map(lambda x: np.zeros((self.segments, *x.shape[1:]), x.dtype))
        serial = self.inserted + np.arange(envs)
        slots = serial % self.segments
        self.store[slots] = segments
        self.serial[slots] = serial
        self.inserted += envs
        alive = segments[keys.ALIVE][:, :-1].any(axis=-1)  # [envs, T]: steps with an agent acting
        if self.unit == "transition":
            ret, discount, boot = nstep_targets(segments[keys.REWARD][:, :-1], segments[keys.TERMINATED][:, :-1],
                                                segments[keys.TRUNCATED][:, :-1], self.n_step, self.gamma)
            fresh = NamedArray({keys.NSTEP_RETURN: ret, keys.DISCOUNT: discount, "boot": boot})
            if self.targets is None:
                self.targets = fresh.map(lambda x: np.zeros((self.segments, *x.shape[1:]), x.dtype))
            self.targets[slots] = fresh
            leaves = (slots[:, None] * self.T + np.arange(self.T)).ravel()
            self.tree.set(leaves, np.where(alive.ravel(), self.max_priority, 0.0))
        else:
            self.tree.set(slots, np.where(alive.any(axis=1), self.max_priority, 0.0))
        return envs * self.T

    # ------------------------------------------------------------------ out
    def sample(self, batch_size: int, updates: int = 1) -> NamedArray:
        """`updates` batches of `batch_size` units, drawn by priority (stratified within each batch).

        Transitions: leaves [updates, batch, G, ...] with `keys.NEXT_OBS`, `keys.NSTEP_RETURN`
        and `keys.DISCOUNT`. Sequences: [updates, T + 1, batch, G, ...], time-major. Both carry
        `keys.REPLAY_INDEX` and `keys.REPLAY_WEIGHT`, [updates, batch].
        """
        total = self.tree.total
        if self.store is None or total <= 0:
            raise ValueError("replay: nothing to sample yet")
        strata = (np.arange(batch_size) + self.rng.random((updates, batch_size))) / batch_size
        leaf = self.tree.find((strata * total).ravel())
        probability = self.tree.get(leaf) / total
        weight = (self.filled * self.units_per_segment * probability) ** -self.beta
        weight = (weight / weight.max()).astype(np.float32)
        slot, t = np.divmod(leaf, self.units_per_segment)
        lead = (updates, batch_size)
        if self.unit == "transition":
            assert self.targets is not None
            step = self.store.map(lambda x: x[slot, t])
            batch = NamedArray({k: step[k] for k in step if k != keys.REWARD})
            boot = self.targets["boot"][slot, t]  # [n, G]
            batch[keys.NEXT_OBS] = self.store[keys.OBS].map(lambda x: x[slot[:, None], boot, np.arange(self.G)])
            batch[keys.NSTEP_RETURN] = self.targets[keys.NSTEP_RETURN][slot, t]
            batch[keys.DISCOUNT] = self.targets[keys.DISCOUNT][slot, t]
            batch = batch.map(lambda x: x.reshape(*lead, *x.shape[1:]))
        else:
            batch = self.store.map(lambda x: np.moveaxis(x[slot].reshape(*lead, *x.shape[1:]), 2, 1))
            # The recurrent state the sequence started from (its first row's).
            if keys.RNN_STATE in batch:
                batch[keys.RNN_STATE] = batch[keys.RNN_STATE].map(lambda x: x[:, 0])
        batch[keys.REPLAY_INDEX] = (self.serial[slot] * self.units_per_segment + t).reshape(lead)
        batch[keys.REPLAY_WEIGHT] = weight.reshape(lead)
        return batch

    def _held(self, serial: np.ndarray) -> np.ndarray:
        """Which segment serial numbers are still in the ring (not yet overwritten)."""
        return (serial >= 0) & (serial >= self.inserted - self.segments) & (serial < self.inserted)

    def update_priorities(self, index: np.ndarray, priority: np.ndarray) -> int:
        """New priorities (e.g. |TD error|) for sampled units; returns how many still held were set."""
        index, priority = np.asarray(index, np.int64).ravel(), np.asarray(priority, np.float64).ravel()
        serial, t = np.divmod(index, self.units_per_segment)
        held = self._held(serial)
        if not held.any():
            return 0
        value = (np.abs(priority[held]) + PRIORITY_EPS) ** self.alpha
        self.tree.set((serial[held] % self.segments) * self.units_per_segment + t[held], value)
        self.max_priority = max(self.max_priority, float(value.max()))
        return int(held.sum())

    def refresh(self, index: np.ndarray, fields: NamedArray) -> int:
        """Overwrite `also_store` fields of sampled sequences with fresh ones (reanalyse: targets
        searched again with newer parameters), time-major [T + 1, n, G, ...] as `sample` gave
        them; returns how many of the n sequences were still held (the others were overwritten
        since, and are skipped)."""
        if self.unit != "sequence":
            raise ValueError("replay: only stored sequences are refreshed (unit: sequence)")
        unknown = sorted(set(fields) - set(self.also_store))
        if unknown:
            raise ValueError(f"replay: cannot refresh {unknown}: the buffer keeps only {list(self.also_store)} "
                             f"besides the play itself")
        serial = np.asarray(index, np.int64).ravel()
        held = self._held(serial)
        if self.store is None or not held.any():
            return 0
        slots = serial[held] % self.segments
        for key in fields:
            self.store[key][slots] = np.swapaxes(np.asarray(fields[key]), 0, 1)[held]
        return int(held.sum())

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, np.ndarray]:
        """The contents as flat numpy arrays (for `np.savez`: no pickled objects)."""
        state = {"tree": self.tree.tree, "serial": self.serial,
                 "counters": np.array([self.inserted, self.max_priority], np.float64)}
        for prefix, tree in (("store", self.store), ("targets", self.targets)):
            for path, leaf in (tree.items_flat() if tree is not None else []):
                state[f"{prefix}/{path}"] = leaf
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["serial"].shape != self.serial.shape or state["tree"].shape != self.tree.tree.shape:
            raise ValueError(f"replay: the saved buffer holds {state['serial'].shape[0]} segments; this one "
                             f"{self.segments} (capacity or trajectory_length changed)")
        self.tree.tree[:] = state["tree"]
        self.serial[:] = state["serial"]
        self.inserted, self.max_priority = int(state["counters"][0]), float(state["counters"][1])
        for prefix in ("store", "targets"):
            leaves = {k.split("/", 1)[1]: np.array(v) for k, v in state.items() if k.startswith(prefix + "/")}
            setattr(self, prefix, NamedArray.from_flat(leaves) if leaves else None)
