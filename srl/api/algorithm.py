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

import numpy as np

from srl.api.config import ExperimentConfig, Section
from srl.api.graph import Graph
from srl.api.policy import Policy
from srl.data.named_array import NamedArray


class AlgorithmConfig(Section):
    """Base for an algorithm's own settings; unknown keys are errors, as in every config section."""


class Algorithm(ABC):
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: True when the loss corrects for samples acted by older policy versions (V-trace):
    #: its trainers then learn from every sample instead of dropping the stale ones.
    corrects_staleness: ClassVar[bool] = False

    @classmethod
    def graph(cls, config: ExperimentConfig) -> Graph | None:
        """The worker graph this algorithm trains in (`srl.graphs`); the config's `workers:` section
        changes it. None, the default: the on-policy graph (actors' trajectories in, parameters
        back), which most algorithms learn in."""
        return None

    def __init__(self, policy: Policy, config: AlgorithmConfig) -> None:
        self.policy = policy
        self.config = config

    @abstractmethod
    def step(self, batch: NamedArray) -> dict[str, float]:
        """Learn from one batch; return scalar statistics for logging."""

    def priorities(self) -> np.ndarray | None:
        """After a `step` on a replay batch: a new priority per sampled unit, shaped like its
        `keys.REPLAY_INDEX` (prioritized replay), or None to leave priorities as they are."""
        return None

    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """Change some fields of `Config` between steps (population-based training explores
        this way); the result is validated like the config was. An algorithm that copies a
        field elsewhere at construction (an optimiser's learning rate) updates it too."""
        self.config = type(self.config).model_validate({**self.config.model_dump(), **values})

    def state_dict(self) -> dict[str, Any]:
        """Optimiser state and counters for checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
