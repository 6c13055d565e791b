"""The inference stream: actors ask, policy workers answer, one request per ring slot.

`InferenceClient` is what an actor sees. `RemoteInference` sends each slot's
observations to a policy worker and collects replies; `InlineInference` runs the policy
in the actor itself (cheaper than a round trip for a small CPU network). The actor's
code is the same for both.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections import deque

import numpy as np

from srl.api.policy import Policy
from srl.api.worker import Transport
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.streams.link import LinkClient, LinkServer, Received, StreamContext
from srl.streams.meter import Mean
from srl.streams.parameters import ParameterSubscriber


#: The meta key of a request's number, which its reply echoes (`RemoteInference`).
REQUEST = "n"


class InferenceClient(ABC):
    #: Seconds from each request to its reply, averaged per heartbeat (set by each client).
    round_trip: Mean

    @abstractmethod
    def request(self, slot: int, request: NamedArray) -> None:
        """Ask for actions for `request` (obs and rnn_state of one ring slot)."""

    @abstractmethod
    def reply(self, timeout_ms: int) -> tuple[int, NamedArray] | None:
        """(slot, reply) for some earlier request, or None on timeout. Read it before re-requesting the slot."""

    def close(self) -> None:
        pass


class RemoteInference(InferenceClient):
    """Requests to a policy worker. If it is replaced, reconnect and ask again; if a request
    goes unanswered all the same, ask again.

    No reply for `reconnect_after_s` makes the client check the name service; a restarted
    policy worker has registered a new address, and every pending request is re-sent there
    (the ring keeps each pending request's rows untouched until answered). A request
    unanswered for `resend_after_s` where the server has not moved is sent again on the same
    link, whatever the other slots do: a dropped connection loses what was in flight on it,
    and a ring would go on without that slot's envs. Each request carries a
    number the reply echoes, so a late answer to an earlier request of the same ring slot
    (or a second answer to a re-sent one) is never taken for the current request's.
    """

    def __init__(self, ctx: StreamContext, key: str, transport: Transport, name: str,
                 reconnect_after_s: float = 2.0, resend_after_s: float = 10.0) -> None:
        self.link = LinkClient(ctx, key, transport, name, kind="inference")
        self.pending: dict[int, NamedArray] = {}
        self.reconnect_after_s = reconnect_after_s
        self.resend_after_s = resend_after_s
        self.last_reply = self._last_check = time.monotonic()
        self.reconnects = 0
        self.resends = 0
        self.sent_at: dict[int, float] = {}
        self.last_sent: dict[int, float] = {}
        #: The number of each slot's newest request, which its reply must carry.
        self.asked: dict[int, int] = {}
        self._numbers = itertools.count(1)
        self.round_trip = Mean()

    def request(self, slot: int, request: NamedArray) -> None:
        self.pending[slot] = request
        self.sent_at[slot] = now = time.monotonic()  # one clock read per round trip, not per env step
        self.asked[slot] = next(self._numbers)
        self._send(slot, now)

    def _send(self, slot: int, now: float) -> None:
        self.last_sent[slot] = now
        self.link.send(slot, {REQUEST: self.asked[slot]}, self.pending[slot])

    def reply(self, timeout_ms: int) -> tuple[int, NamedArray] | None:
        got = self.link.recv(timeout_ms)
        now = time.monotonic()
        if (got is None or got.arrays is None or got.slot not in self.pending
                or got.meta.get(REQUEST) != self.asked[got.slot]):
            if self.pending and now - self._last_check > self.reconnect_after_s:
                self._last_check = now
                self._ask_again(now)
            return None
        self.last_reply = now
        del self.pending[got.slot]
        self.round_trip.add(now - self.sent_at[got.slot])  # a resend counts from the first send
        return got.slot, got.arrays

    def _ask_again(self, now: float) -> None:
        if now - self.last_reply > self.reconnect_after_s and self.link.refresh():
            self.reconnects += 1
            for slot in self.pending:
                self._send(slot, now)
            return
        for slot in self.pending:
            if now - self.last_sent[slot] > self.resend_after_s:
                self.resends += 1
                self._send(slot, now)

    def close(self) -> None:
        self.link.close()


class InlineInference(InferenceClient):
    """Runs `policy` in-process, taking the newest parameters before each forward pass."""

    def __init__(self, policy: Policy, params: ParameterSubscriber | None) -> None:
        self.policy = policy
        self.params = params
        self.ready: deque[tuple[int, NamedArray]] = deque()
        self.round_trip = Mean()

    def request(self, slot: int, request: NamedArray) -> None:
        if self.params is not None and (new := self.params.poll()) is not None:
            self.policy.set_params(new[1], new[0])
        start = time.monotonic()
        self.ready.append((slot, serve(self.policy, request)))
        self.round_trip.add(time.monotonic() - start)

    def reply(self, timeout_ms: int) -> tuple[int, NamedArray] | None:
        return self.ready.popleft() if self.ready else None

    def take_new_parameters(self) -> bool:
        """Take the newest version if one came out since the last (synchronous acting waits for it)."""
        assert self.params is not None
        if (new := self.params.poll()) is None:
            return False
        self.policy.set_params(new[1], new[0])
        return True

    def close(self) -> None:
        if self.params is not None:
            self.params.close()


def serve(policy: Policy, request: NamedArray) -> NamedArray:
    """One forward pass: the reply carries the policy's version for staleness checks."""
    state = request[keys.RNN_STATE] if keys.RNN_STATE in request else NamedArray()
    out = policy.rollout(request[keys.OBS], state)
    out[keys.VERSION] = np.full(len(out[keys.ACTION]), policy.version, np.int64)
    return out


#: Requests one `receive` takes at most (more than any ring of actors has in flight at once):
#: a flood of them cannot keep a policy worker from its heartbeat.
MAX_REQUESTS = 1024


class InferenceServer:
    """A policy worker's end: receive many requests, answer each."""

    def __init__(self, ctx: StreamContext, key: str, transport: Transport) -> None:
        self.link = LinkServer(ctx, key, transport, kind="inference")

    def receive(self, timeout_ms: int, max_requests: int = MAX_REQUESTS) -> list[Received]:
        """Wait up to `timeout_ms` for one request, then take all others already waiting."""
        first = self.link.recv(timeout_ms)
        if first is None:
            return []
        batch = [first]
        while len(batch) < max_requests and (more := self.link.recv(0)) is not None:
            batch.append(more)
        return [r for r in batch if r.arrays is not None]

    def answer(self, request: Received, reply: NamedArray) -> None:
        number = request.meta.get(REQUEST)
        self.link.send(request.client, request.slot, {REQUEST: number} if type(number) is int else {}, reply)

    @property
    def dropped(self) -> int:
        return self.link.dropped

    def close(self) -> None:
        self.link.close()
