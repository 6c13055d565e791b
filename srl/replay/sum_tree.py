"""A sum tree over non-negative priorities: sampling in proportion to them, batch-vectorised.

Leaves hold the priorities; each inner node the sum of its children. Drawing a leaf with
probability p_i / sum(p) is a walk from the root, one level per step; `find` walks a whole
batch of draws at once, and `set` repairs the sums above a batch of changed leaves level
by level, so a batch costs about log2(capacity) numpy operations, not that many per row.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 1 << max(0, int(np.ceil(np.log2(max(capacity, 1)))))
        self.tree = np.zeros(2 * self.size, np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, index: np.ndarray) -> np.ndarray:
        return self.tree[np.asarray(index) + self.size]

    def set(self, index: np.ndarray, value: np.ndarray) -> None:
        """Set the leaves `index` (repeated indices: the last value wins) and repair the sums."""
        node = np.asarray(index, np.int64) + self.size
        self.tree[node] = value
        if self.size == 1 or not len(node):  # the one leaf is the root; or nothing changed
            return
        if node[-1] - node[0] + 1 == len(node) and (np.diff(node) == 1).all():
            # Consecutive leaves (a buffer stores whole segments side by side): their parents are
            # a run too, repaired by slices. Checked on the leaves, before any sorting: np.unique
            # of a stored trajectory's leaves cost more than the rest of the update
            # (docs/benchmarks.md, "Measurements behind the code").
            self._repair_run(int(node[0]) // 2, int(node[-1]) // 2 + 1)
            return
        node = np.unique(node // 2)  # sorted once: halving keeps it sorted, so each level dedupes in O(n)
        while True:
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]
            if node[0] == 1:
                break
            node //= 2
            node = node[np.concatenate(([True], node[1:] != node[:-1]))]

    def _repair_run(self, lo: int, hi: int) -> None:
        """Recompute the inner nodes [lo, hi) and every node above them, a level at a time."""
        tree = self.tree
        while True:
            np.add(tree[2 * lo:2 * hi:2], tree[2 * lo + 1:2 * hi:2], out=tree[lo:hi])
            if lo == 1:
                break
            lo, hi = lo // 2, (hi - 1) // 2 + 1

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each `mass` in [0, total): the leaf where the running sum of priorities passes it."""
        mass = np.minimum(np.asarray(mass, np.float64), np.nextafter(self.total, 0))
        node = np.ones(mass.shape, np.int64)
        while node[0] < self.size:
            left = self.tree[2 * node]
            # Rounding can leave `mass` a hair above the left sum with nothing on the right:
            # stay left then, never reach a zero-priority leaf.
            right = (mass >= left) & (self.tree[2 * node + 1] > 0)
            mass = np.where(right, mass - left, mass)
            node = 2 * node + right
        return node - self.size
