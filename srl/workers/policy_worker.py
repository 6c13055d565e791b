"""The policy worker: batch every waiting request into one forward pass, answer each actor.

New parameters are taken between batches; with shared memory checking costs one integer
read, and over ZeroMQ a background thread has already received them, so inference never
waits for a parameter transfer.

With several policies one policy worker may serve them all (`policies` in its settings,
its ports joined once per policy: `inference/<policy>`, `parameters/<policy>`): it holds
each policy's copy, parameter subscription and inference server, and batches each
policy's requests apart (one forward pass per policy and poll).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from srl.api.components import make_env, make_policy
from srl.api.env import spaces_of
from srl.api.policy import Policy
from srl.api.settings import PolicyWorkerSettings
from srl.api.worker import Port
from srl.data import keys
from srl.data.named_array import concat
from srl.streams.inference import InferenceServer, serve
from srl.streams.link import LinkWaiter, Received
from srl.streams.meter import Mean
from srl.streams.parameters import ParameterSubscriber, open_subscriber
from srl.workers.base import Worker


@dataclass
class ServedPolicy:
    """One policy a policy worker serves: its copy, its parameter subscription, its actors' requests."""

    policy: Policy
    params: ParameterSubscriber
    server: InferenceServer

    def take_new_parameters(self) -> None:
        if (new := self.params.poll()) is not None:
            self.policy.set_params(new[1], new[0])

    def close(self) -> None:
        self.server.close()
        self.params.close()


class PolicyWorker(Worker):
    ports = {"inference": Port("inference", "consume", keyed=True),
             "parameters": Port("parameters", "consume", keyed=True)}
    progress = "samples"  # requests answered (observations, one per env)
    Config = PolicyWorkerSettings
    settings: PolicyWorkerSettings

    def setup(self) -> None:
        s = self.settings
        env = make_env(s.env)
        # Port suffix -> (policy section, an agent it acts for: its spaces are that agent's).
        if s.policies:  # several policies, served here together
            plan = {f"/{name}": (config, s.agent(name)) for name, config in s.policies.items()}
        else:  # one policy (with several policies in groups of their own, this group's)
            plan = {"": (s.policy, s.agent())}
        #: Policy name ("" with one policy) -> what this worker serves of it.
        self.served: dict[str, ServedPolicy] = {}
        for port, (config, agent) in plan.items():
            policy = make_policy(config, *spaces_of(env, agent), device=s.device)
            # Its copy acts for its share of the actors: it explores as policy worker i of n.
            policy.acting_as(self.spec.index, self.spec.group_size)
            params, inf = self.spec.streams[f"parameters{port}"], self.spec.streams[f"inference{port}"]
            subscriber = open_subscriber(self.ctx, params.key, params.transport)
            version, weights, _ = subscriber.wait()
            policy.set_params(weights, version)
            self.served[port.lstrip("/")] = ServedPolicy(policy, subscriber,
                                                         InferenceServer(self.ctx, inf.key, inf.transport))
        env.close()
        # One wait on every served policy's server: a request to one never waits out a timeout on another.
        self.requests = LinkWaiter([served.server.link for served in self.served.values()])
        self.max_wait_s = s.max_wait_ms / 1000
        self.samples = 0
        self.batches = 0
        self.started = time.monotonic()
        #: Per batch: seconds from taking its first request to answering its last, and its requests.
        self.batch_time, self.batch_requests = Mean(), Mean()

    def poll(self) -> None:
        for served in self.served.values():
            served.take_new_parameters()
        if not self.requests.wait(self.wait_ms(100)):
            self.waiting_on = "inference"
            return
        received = time.monotonic()
        batches = self._take_requests(received + (0.0 if self.ctx.inline else self.max_wait_s))
        self.waiting_on = "" if batches else "inference"  # a rejected message is no work
        for served, requests in batches:
            sizes = [len(r.arrays[keys.OBS]) for r in requests]
            out = serve(served.policy, concat([r.arrays for r in requests]))
            for request, start, size in zip(requests, np.cumsum([0, *sizes[:-1]]), sizes):
                served.server.answer(request, out[start:start + size])
            self.samples += sum(sizes)
            self.batches += 1
            self.batch_time.add(time.monotonic() - received)
            self.batch_requests.add(len(requests))

    def _take_requests(self, deadline: float) -> list[tuple[ServedPolicy, list[Received]]]:
        """Each served policy's waiting requests, and more arriving until `deadline`
        (`max_wait_ms`); policies with none are left out."""
        batches = [(served, served.server.receive(0)) for served in self.served.values()]
        while time.monotonic() < deadline:
            for served, requests in batches:
                requests += served.server.receive(1)
        return [(served, requests) for served, requests in batches if requests]

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "started"):
            return {}
        elapsed = max(time.monotonic() - self.started, 1e-9)
        versions = {name: served.policy.version for name, served in self.served.items()}
        return {"samples": self.samples, "fps": self.samples / elapsed, "policy_version": max(versions.values()),
                # Several policies: each one's version, named as in the metrics (`<policy>/policy_version`).
                **({f"{name}/policy_version": v for name, v in versions.items()} if "" not in versions else {}),
                "mean_batch": self.samples / max(self.batches, 1),
                "dropped": sum(served.server.dropped for served in self.served.values()),
                "batch_ms": self.batch_time.take(1000), "requests_per_batch": self.batch_requests.take()}

    def endpoints(self) -> list[str]:
        return [served.server.link.address for served in getattr(self, "served", {}).values()]

    def teardown(self) -> None:
        for served in getattr(self, "served", {}).values():
            served.close()
