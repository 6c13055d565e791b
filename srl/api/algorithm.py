"""The algorithm interface: owns the optimiser and the loss; one call per training batch.

The loop it lives in (a trainer worker)::

    algorithm = PPO(policy, PPO.Config(**args))
    while running:
        batch = buffer.get()               # time-major NamedArray [T + 1, B, ...]
        stats = algorithm.step(batch)      # updates policy in place, bumps policy.version
        publish(policy.get_params(), policy.version)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pydantic

from srl.api.policy import Policy
from srl.data.named_array import NamedArray


class AlgorithmConfig(pydantic.BaseModel):
    """Base for an algorithm's own settings; unknown keys are errors."""

    model_config = pydantic.ConfigDict(extra="forbid")


class Algorithm(ABC):
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: True when the loss corrects for samples acted by older policy versions (V-trace):
    #: its trainers then learn from every sample instead of dropping the stale ones.
    corrects_staleness: ClassVar[bool] = False

    def __init__(self, policy: Policy, config: AlgorithmConfig) -> None:
        self.policy = policy
        self.config = config

    @abstractmethod
    def step(self, batch: NamedArray) -> dict[str, float]:
        """Learn from one batch; return scalar statistics for logging."""

    def state_dict(self) -> dict[str, Any]:
        """Optimiser state and counters for checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
