"""A worker kind of your own: it follows the parameter stream and reports the weights' norm.

Nothing inside `srl/` changes to run it. A config adds a group of this kind by import path
and joins its port to the experiment's parameter stream:

    workers:
      watcher:
        kind: user_worker.weight_watcher:WeightWatcher   # importable: PYTHONPATH=examples
        count: 1
        settings: {log_every: 20}
        streams: {parameters: parameters}

Its numbers appear in `srl status --json` under the worker's `stats`; a watcher that dies
is replaced like any worker (its kind keeps the default supervision: restart it alone, fresh).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pydantic

from srl.api.worker import Port
from srl.workers.base import Worker

log = logging.getLogger(__name__)


class WeightWatcher(Worker):
    """Reads every new policy version and reports the global L2 norm of its weights."""

    ports = {"parameters": Port("parameters", "consume")}

    class Config(pydantic.BaseModel):
        """The group's `settings`, checked before anything starts."""

        model_config = pydantic.ConfigDict(extra="forbid")
        #: Write a log line every this many versions.
        log_every: pydantic.PositiveInt = 10

    def setup(self) -> None:
        self.params = self.subscribe("parameters")
        self.log_every = self.settings.log_every  # settings: an instance of `Config`
        self.version, self.weight_norm, self.versions_seen = -1, 0.0, 0

    def poll(self) -> None:
        got = self.params.poll()
        if got is None:
            self.pause(0.01)  # a new version arrives a few times a second at most
            return
        self.version, weights, _ = got
        self.weight_norm = float(np.sqrt(sum(np.square(leaf, dtype=np.float64).sum()
                                             for _, leaf in weights.items_flat())))
        self.versions_seen += 1
        if self.versions_seen % self.log_every == 1:
            log.info("version %d: weight norm %.4f", self.version, self.weight_norm)

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "params"):
            return {}
        return {"policy_version": self.version, "weight_norm": self.weight_norm, "versions_seen": self.versions_seen}

    def teardown(self) -> None:
        if hasattr(self, "params"):
            self.params.close()
