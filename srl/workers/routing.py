"""An actor's ends: one inference client and one sample producer per policy, as one.

`AgentRouter` (`srl.api.agents`) says which policy acts for which agent; the ring
(`srl.workers.env_ring.EnvRing`) splits each slot's rows by policy. These two put each
policy's part on that policy's streams (one policy: one client and one producer, keyed
`DEFAULT_POLICY`):

    inference = RoutedInference({"seeker": RemoteInference(...), "hider": InlineInference(...)})
    inference.request(slot, {"seeker": request, "hider": request})
    slot, replies = inference.reply(100)          # once every policy has answered for the slot
    samples = RoutedSamples({"seeker": SampleProducer(...), "hider": SampleProducer(...)})
    samples.try_put({"seeker": trajectory}, meta)  # each policy's trajectory to its own trainers

Any `InferenceClient` serves a policy (a frozen opponent is an `InlineInference` without a
parameter subscriber); a policy whose samples nobody trains on has no producer here.
"""

from __future__ import annotations

import time
from typing import Any

from srl.data.named_array import NamedArray
from srl.streams.inference import InferenceClient
from srl.streams.meter import Mean
from srl.streams.samples import SampleProducer


class RoutedInference:
    """Several policies' inference clients as one: a slot's reply comes when all have answered."""

    def __init__(self, clients: dict[str, InferenceClient]) -> None:
        self.clients = clients
        self.partial: dict[int, dict[str, NamedArray]] = {}
        self.sent_at: dict[int, float] = {}
        #: The one client, when there is one: its replies pass straight through.
        self.single = next(iter(clients.items())) if len(clients) == 1 else None
        #: Seconds from a slot's requests to its last reply (the one client's own measure).
        self.round_trip = self.single[1].round_trip if self.single else Mean()

    def request(self, slot: int, requests: dict[str, NamedArray]) -> None:
        if self.single:
            policy, client = self.single
            client.request(slot, requests[policy])
            return
        self.sent_at[slot] = time.monotonic()
        for policy, request in requests.items():
            self.clients[policy].request(slot, request)

    def reply(self, timeout_ms: int) -> tuple[int, dict[str, NamedArray]] | None:
        """(slot, replies by policy) for a slot every policy has answered, or None on timeout."""
        if self.single:
            policy, client = self.single
            got = client.reply(timeout_ms)
            return None if got is None else (got[0], {policy: got[1]})
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            for policy, client in self.clients.items():
                # Short waits in turn: a reply on one client must not wait out another's timeout.
                wait_ms = min(5, max(0, int((deadline - time.monotonic()) * 1000)))
                got = client.reply(wait_ms)
                if got is None:
                    continue
                slot, reply = got
                replies = self.partial.setdefault(slot, {})
                replies[policy] = reply
                if len(replies) == len(self.clients):
                    del self.partial[slot]
                    self.round_trip.add(time.monotonic() - self.sent_at[slot])
                    return slot, replies
            if time.monotonic() >= deadline:
                return None

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


class RoutedSamples:
    """Several policies' sample producers as one: each policy's trajectory goes to its own stream."""

    def __init__(self, producers: dict[str, SampleProducer]) -> None:
        self.producers = producers

    def try_put(self, trajectories: dict[str, NamedArray], meta: dict[str, Any] | None = None) -> bool:
        """Send each policy's trajectory that has a credit, taking it out of `trajectories`
        (never waits, as `SampleProducer.try_put`). True once none is left to send."""
        for policy in list(trajectories):
            if policy not in self.producers or self.producers[policy].try_put(trajectories[policy], meta):
                del trajectories[policy]
        return not trajectories

    def poll(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for credits (each producer in turn, the time shared among them)."""
        for producer in self.producers.values():
            producer.poll(timeout_ms // len(self.producers))

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.producers.values())

    @property
    def slots(self) -> int:
        return sum(p.slots for p in self.producers.values())

    @property
    def blocked_s(self) -> float:
        return sum(p.blocked_s for p in self.producers.values())

    def close(self) -> None:
        for producer in self.producers.values():
            producer.close()
