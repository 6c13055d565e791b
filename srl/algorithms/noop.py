"""An algorithm that learns nothing: a fake for tests and for measuring the system alone."""

from __future__ import annotations

from srl.api.algorithm import Algorithm
from srl.data import keys
from srl.data.named_array import NamedArray


class NoopAlgorithm(Algorithm):
    def step(self, batch: NamedArray) -> dict[str, float]:
        self.policy.version += 1
        return {"rows": float(batch[keys.REWARD][:-1].size)}
