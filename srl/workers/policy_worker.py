"""The policy worker: batch every waiting request into one forward pass, answer each actor.

New parameters are taken between batches; with shared memory checking costs one integer
read, and over ZeroMQ a background thread has already received them, so inference never
waits for a parameter transfer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from srl.api.env import spaces_of
from srl.api.graph import Port
from srl.data import keys
from srl.data.named_array import concat
from srl.streams.inference import InferenceServer, serve
from srl.streams.meter import Mean
from srl.streams.parameters import open_subscriber
from srl.workers.base import Worker
from srl.workers.components import make_env, make_policy


class PolicyWorker(Worker):
    ports = {"inference": Port("inference", "consume"), "parameters": Port("parameters", "consume")}
    progress = "samples"  # requests answered (observations, one per env)

    def setup(self) -> None:
        s = self.spec.settings
        env = make_env(s["env"])
        # With several policies, this group serves one: its spaces are its agents'.
        agent = s["agents"][0] if s.get("agents") else None
        self.policy = make_policy(s["policy"], *spaces_of(env, agent), device=s["device"])
        # Its copy acts for its share of the actors: it explores as policy worker i of n.
        self.policy.acting_as(self.spec.index, self.spec.group_size)
        env.close()
        params = self.spec.streams["parameters"]
        self.params = open_subscriber(self.ctx, params.key, params.transport)
        version, weights, _ = self.params.wait()
        self.policy.set_params(weights, version)
        inf = self.spec.streams["inference"]
        self.server = InferenceServer(self.ctx, inf.key, inf.transport)
        self.max_wait_s = s["max_wait_ms"] / 1000
        self.samples = 0
        self.batches = 0
        self.started = time.monotonic()
        #: Per batch: seconds from taking its first request to answering its last, and its requests.
        self.batch_time, self.batch_requests = Mean(), Mean()

    def poll(self) -> None:
        if (new := self.params.poll()) is not None:
            self.policy.set_params(new[1], new[0])
        requests = self.server.receive(100)
        self.waiting_on = "" if requests else "inference"
        if not requests:
            return
        received = time.monotonic()
        if self.max_wait_s:
            deadline = received + self.max_wait_s
            while time.monotonic() < deadline:
                requests += self.server.receive(1)
        sizes = [len(r.arrays[keys.OBS]) for r in requests]
        out = serve(self.policy, concat([r.arrays for r in requests]))
        for request, start, size in zip(requests, np.cumsum([0, *sizes[:-1]]), sizes):
            self.server.answer(request, out[start:start + size])
        self.samples += sum(sizes)
        self.batches += 1
        self.batch_time.add(time.monotonic() - received)
        self.batch_requests.add(len(requests))

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "server"):
            return {}
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {"samples": self.samples, "fps": self.samples / elapsed, "policy_version": self.policy.version,
                "mean_batch": self.samples / max(self.batches, 1), "dropped": self.server.dropped,
                "batch_ms": self.batch_time.take(1000), "requests_per_batch": self.batch_requests.take()}

    def endpoints(self) -> list[str]:
        return [self.server.link.address] if hasattr(self, "server") else []

    def teardown(self) -> None:
        for closable in ("server", "params"):
            if hasattr(self, closable):
                getattr(self, closable).close()
