"""An algorithm that hangs on purpose: a no-op whose step never returns after a given step."""

import time

import pydantic

from srl.algorithms.noop import NoopAlgorithm, NoopConfig


class HangingConfig(NoopConfig):
    #: The step that never returns (a deadlock inside the algorithm, heartbeats still going).
    hang_at: int = pydantic.Field(3, ge=1)


class HangingAlgorithm(NoopAlgorithm):
    Config = HangingConfig

    def __init__(self, policy, config: HangingConfig) -> None:
        super().__init__(policy, config)
        self.steps = 0

    def step(self, batch):
        self.steps += 1
        while self.steps >= self.config.hang_at:
            time.sleep(3600)
        return super().step(batch)
