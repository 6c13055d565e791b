"""On-policy batching: trajectories in, a training batch out once `batch_steps` env steps are held.

A trajectory whose oldest action came from a policy more than `max_staleness` versions behind
is dropped (and counted), unless the algorithm corrects for staleness (`Algorithm.corrects_staleness`,
V-trace), which learns from every sample (counted as `kept_stale`). A replay buffer's batches
bypass it: each is one step as it comes.
"""

from __future__ import annotations

from srl.data import keys
from srl.data.named_array import NamedArray, concat


class Batcher:
    def __init__(self, batch_steps: int, max_staleness: int, corrects_staleness: bool) -> None:
        self.batch_steps = batch_steps
        self.max_staleness = max_staleness
        self.corrects_staleness = corrects_staleness
        self.held: list[NamedArray] = []
        #: Env steps held, dropped as too stale, and kept though past the bound.
        self.buffered = 0
        self.dropped_stale = 0
        self.kept_stale = 0

    def add(self, trajectory: NamedArray, policy_version: int) -> tuple[NamedArray, int] | None:
        """Take one trajectory; (the batch, its env steps) once enough are held, else None."""
        steps = trajectory[keys.REWARD][:-1].size
        stale = policy_version - int(trajectory[keys.VERSION].min()) > self.max_staleness
        if stale and not self.corrects_staleness:
            self.dropped_stale += steps
            return None
        if stale:
            self.kept_stale += steps
        self.held.append(trajectory)
        self.buffered += steps
        if self.buffered < self.batch_steps:
            return None
        batch, steps = concat(self.held, axis=1), self.buffered
        self.clear()
        return batch, steps

    def clear(self) -> None:
        """Forget what is held (acted by weights that were just replaced)."""
        self.held, self.buffered = [], 0
