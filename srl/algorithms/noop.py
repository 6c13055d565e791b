"""An algorithm that learns nothing: a fake for tests and for measuring the system alone.

The parameters never change, so the version stays put and nothing is re-published: the
sampling measurement of `srl bench` pays only for draining the sample stream.
"""

from __future__ import annotations

import time

import pydantic

from srl.api.algorithm import Algorithm, AlgorithmConfig
from srl.data import keys
from srl.data.named_array import NamedArray


class NoopConfig(AlgorithmConfig):
    # Other algorithms' args are ignored: `srl bench` swaps this in for a graph's trainers and
    # leaves the rest of the algorithm's section (and its graph) as it is.
    model_config = pydantic.ConfigDict(extra="ignore")

    #: Pretend each step is this slow (to test what a long training step does to the system).
    step_sleep_s: float = pydantic.Field(0.0, ge=0)


class NoopAlgorithm(Algorithm):
    Config = NoopConfig

    def step(self, batch: NamedArray) -> dict[str, float]:
        if self.config.step_sleep_s:
            time.sleep(self.config.step_sleep_s)
        if keys.REPLAY_WEIGHT in batch:  # a replay buffer's batch
            return {"rows": float(batch[keys.REPLAY_WEIGHT].size)}
        return {"rows": float(batch[keys.REWARD][:-1].size)}
