"""The parameter relay: one per host that has parameter readers but no trainer.

It receives each new version once over TCP and re-publishes it into the host's shared
memory, where that host's policy workers (or inline actors) read it for free.
"""

from __future__ import annotations

import time
from typing import Any

from srl.api.worker import Port
from srl.streams.parameters import open_publisher, open_subscriber
from srl.workers.base import Worker


class RelayWorker(Worker):
    ports = {"source": Port("parameters", "consume"), "sink": Port("parameters", "produce")}

    def setup(self) -> None:
        source, self.sink = self.spec.streams["source"], self.spec.streams["sink"]
        self.subscriber = open_subscriber(self.ctx, source.key, source.transport)
        self.publisher = open_publisher(self.ctx, self.sink.key, self.sink.transport)
        self.version = -1
        self.relayed = 0

    def poll(self) -> None:
        got = self.subscriber.poll()
        if got is None:
            time.sleep(0.002)
            return
        version, params, meta = got
        if version < self.version:
            # A restarted trainer counts from its checkpoint again: start a new publisher so
            # readers here accept the lower version numbers.
            self.publisher.close()
            self.publisher = open_publisher(self.ctx, self.sink.key, self.sink.transport)
        self.version = version
        self.publisher.publish(version, params, meta)
        self.relayed += 1

    def stats(self) -> dict[str, Any]:
        return {"policy_version": getattr(self, "version", -1), "relayed": getattr(self, "relayed", 0)}

    def teardown(self) -> None:
        for closable in ("subscriber", "publisher"):
            if hasattr(self, closable):
                getattr(self, closable).close()
