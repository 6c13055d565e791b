"""The sample stream: many actors push trajectories to a trainer, with backpressure.

Each producer holds `slots` credits. Sending spends one; the consumer returns it once
it has copied the trajectory out. A producer with no credit left waits, so a slow
trainer slows the actors down instead of growing a queue.

The consumer may also answer a batch (`SampleConsumer.reply`): a learner sends a replay
buffer the new priorities of the rows it sampled. Answers come back to the producer with
the credits and wait in `SampleProducer.take_replies()`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: Meta key of a consumer's answer (not a credit).
from srl.api.worker import Transport
from srl.data.named_array import NamedArray
from srl.streams.link import LinkClient, LinkServer, StreamContext

_REPLY = "reply"


class Meta(dict):
    """A batch's meta as its producer sent it, and who sent it (where `reply` answers)."""

    def __init__(self, fields: dict[str, Any], sender: bytes) -> None:
        super().__init__(fields)
        self.sender = sender


class SampleProducer:
    """An actor's end. If the trainer is replaced while we wait for credit, start afresh there.

    A producer that must not block (every worker is a `poll` that returns) calls `try_put`,
    and `poll(timeout_ms)` to sleep until a credit may have come.

    Trajectories in flight to a trainer that died are lost (at most `slots` of them).
    """

    def __init__(self, ctx: StreamContext, key: str, transport: Transport, name: str, slots: int,
                 reconnect_after_s: float = 2.0) -> None:
        self.link = LinkClient(ctx, key, transport, name, kind="samples")
        self.slots = slots
        self.free = list(range(slots))
        self.reconnect_after_s = reconnect_after_s
        self.reconnects = 0
        #: Seconds spent waiting for credit: the trainer holding the actor back.
        self.blocked_s = 0.0
        self.replies: list[NamedArray] = []
        #: When `try_put` first found no credit (None: it had credit last time); and when it
        #: started to (None: it has since sent), as `_short_since` restarts at each reconnect.
        self._short_since: float | None = None
        self._blocked_since: float | None = None

    @property
    def in_flight(self) -> int:
        """Trajectories sent and not yet taken by the consumer (at most `slots`)."""
        return self.slots - len(self.free)

    def _collect_credits(self, timeout_ms: int) -> None:
        while (got := self.link.recv(timeout_ms)) is not None:
            if got.meta.get(_REPLY):
                if got.arrays is not None:
                    self.replies.append(got.arrays.copy())  # views of shared memory the next reply reuses
            else:
                self.free.append(got.slot)
            timeout_ms = 0

    def _reconnect_if_replaced(self) -> None:
        """If the consumer re-registered elsewhere (it was replaced), go there: its credits start afresh."""
        if self.link.refresh():
            self.reconnects += 1
            self.free = list(range(self.slots))

    def poll(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for a credit or a reply."""
        self._collect_credits(timeout_ms)

    def take_replies(self) -> list[NamedArray]:
        """The consumer's answers received so far (see `SampleConsumer.reply`)."""
        self._collect_credits(0)
        replies, self.replies = self.replies, []
        return replies

    def try_put(self, batch: NamedArray, meta: dict[str, Any] | None = None) -> bool:
        """Send `batch` if a credit is free; never waits. False: none is (the batch was not sent;
        the time until a later call sends it counts as `blocked_s`)."""
        self._collect_credits(0)
        if not self.free:
            now = time.monotonic()
            if self._short_since is None:
                self._short_since = self._blocked_since = now
            elif now - self._short_since > self.reconnect_after_s:
                self._short_since = now
                self._reconnect_if_replaced()
            if not self.free:
                return False
        if self._blocked_since is not None:  # the trainer held us back until now
            self.blocked_s += time.monotonic() - self._blocked_since
            self._blocked_since = None
        self._short_since = None
        self.link.send(self.free.pop(), meta or {}, batch)
        return True

    def put(self, batch: NamedArray, meta: dict[str, Any] | None = None,
            while_waiting: Callable[[], bool] | None = None) -> bool:
        """Send `batch`; waits for a credit, calling `while_waiting` every 100 ms (return False to give up)."""
        while not self.try_put(batch, meta):
            self.poll(100)
            if not self.free and while_waiting is not None and not while_waiting():
                return False
        return True

    def close(self) -> None:
        self.link.close()


class SampleConsumer:
    def __init__(self, ctx: StreamContext, key: str, transport: Transport) -> None:
        self.link = LinkServer(ctx, key, transport, kind="samples")

    def get(self, timeout_ms: int) -> tuple[Meta, NamedArray] | None:
        """The next trajectory (a private copy) and its meta, or None on timeout."""
        got = self.link.recv(timeout_ms)
        if got is None:
            return None
        batch = got.arrays.copy() if got.arrays is not None else None
        self.link.send(got.client, got.slot, {})  # credit back: the slot is free again
        return (Meta(got.meta, got.client), batch) if batch is not None else None

    def reply(self, meta: Meta, arrays: NamedArray) -> None:
        """Answer the producer of the batch `get` returned with `meta` (it reads `take_replies`)."""
        self.link.send(meta.sender, 0, {_REPLY: 1}, arrays)

    @property
    def queued(self) -> int:
        """Trajectories read and held here: none. A backlog waits with the producers, as their
        credits in flight (`SampleProducer.in_flight`)."""
        return 0

    @property
    def dropped(self) -> int:
        return self.link.dropped

    def close(self) -> None:
        self.link.close()


class DrainingConsumer:
    """Keeps the sample stream drained from a thread, holding at most `capacity` trajectories.

    With it actors never wait: when the trainer falls behind, the *oldest* waiting
    trajectories are dropped (and counted) instead, and memory stays bounded. Inline (one
    loop steps every worker), it drains whatever waits at each `get` instead of in a thread.
    """

    def __init__(self, consumer: SampleConsumer, capacity: int) -> None:
        import collections
        import threading

        self.consumer = consumer
        self.queue: collections.deque = collections.deque(maxlen=capacity)
        self.dropped_oldest = 0
        self._ready = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not consumer.link.ctx.inline:
            self._thread = threading.Thread(target=self._drain, name="sample-drain", daemon=True)
            self._thread.start()

    @property
    def link(self):
        return self.consumer.link

    @property
    def dropped(self) -> int:
        return self.consumer.dropped

    def _drain(self) -> None:
        while not self._stop.is_set():
            self._take(100)

    def _take(self, timeout_ms: int) -> bool:
        got = self.consumer.get(timeout_ms)
        if got is None:
            return False
        with self._ready:
            if len(self.queue) == self.queue.maxlen:
                self.dropped_oldest += 1
            self.queue.append(got)
            self._ready.notify()
        return True

    @property
    def queued(self) -> int:
        """Trajectories drained from the stream and waiting for the trainer (at most `capacity`)."""
        return len(self.queue)

    def get(self, timeout_ms: int) -> tuple[dict[str, Any], NamedArray] | None:
        if self._thread is None:
            while self._take(0):
                pass
        with self._ready:
            if not self.queue and self._thread is not None:
                self._ready.wait(timeout_ms / 1000)
            return self.queue.popleft() if self.queue else None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.consumer.close()
