"""The parameter stream: one publisher, many subscribers, versioned; subscribers take the newest.

`shm`: the publisher keeps the latest parameters in a shared-memory segment guarded by a
sequence lock; a subscriber checks one integer to learn whether anything is new, so
polling between inference batches costs nothing.

`inproc` (every worker in this process, `launcher: inline`): the publisher keeps its newest
version on a board that subscribers read directly.

`zmq`: PUB/SUB over TCP with sealed messages (`wire.Seal`). A background thread receives
and decodes, so a large model never stalls the subscriber's loop; the publisher re-sends the
latest version now and then for subscribers that joined (or restarted) after it was
published. Those repeats are the one message a subscriber's guard takes twice.
"""

from __future__ import annotations

import secrets
import struct
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import zmq

from srl.api.worker import Transport
from srl.data import wire
from srl.data.named_array import NamedArray
from srl.streams.link import ShmReader, ShmWriter, StreamContext, binding
from srl.streams.shm import Segment

_CONTROL = struct.Struct("<QQ")  # sequence (odd while writing), version + 1 (0: nothing yet)
_CONTROL_BYTES = 4096
REPUBLISH_S = 1.0
KIND = "parameters"


def _binding(key: str) -> str:
    # Not the publisher's address: a subscriber follows a replaced trainer to its new one,
    # and no peer can send into a subscriber's socket anyway (it connects out, to the publisher).
    return binding(KIND, key, "", "|pub")


class ParameterPublisher(ABC):
    @abstractmethod
    def publish(self, version: int, params: NamedArray, meta: dict[str, Any] | None = None) -> None: ...

    def tick(self) -> None:
        """Called from the publisher's loop; lets a transport re-send for late joiners."""

    @abstractmethod
    def close(self) -> None: ...


class ParameterSubscriber(ABC):
    @abstractmethod
    def poll(self) -> tuple[int, NamedArray, dict[str, Any]] | None:
        """(version, params, meta) if a version newer than the last one returned exists, else None."""

    def wait(self, timeout_s: float = 60.0) -> tuple[int, NamedArray, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while (got := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no parameters were published")
            time.sleep(0.005)
        return got

    @abstractmethod
    def close(self) -> None: ...


class ShmParameterPublisher(ParameterPublisher):
    def __init__(self, ctx: StreamContext, key: str) -> None:
        # A fresh name per publisher: a restarted trainer never collides with what its
        # predecessor left, and subscribers notice the new name in the name service.
        base = f"{ctx.shm_prefix}{key.replace('/', '.')}-{secrets.token_hex(3)}"
        self.control = Segment.create(f"{base}_ctl", _CONTROL_BYTES)
        self.writer = ShmWriter(f"{base}_data")
        self.seq = 0
        ctx.names.register(key, self.control.name)

    def publish(self, version: int, params: NamedArray, meta: dict[str, Any] | None = None) -> None:
        self.seq += 1  # odd: readers back off
        _CONTROL.pack_into(self.control.buf, 0, self.seq, 0)
        descriptor = self.writer.write(0, {**(meta or {}), "version": version}, params)
        encoded = wire.encode({"d": descriptor})[0]
        self.control.buf[_CONTROL.size:_CONTROL.size + 4] = struct.pack("<I", len(encoded))
        self.control.buf[_CONTROL.size + 4:_CONTROL.size + 4 + len(encoded)] = encoded
        self.seq += 1
        _CONTROL.pack_into(self.control.buf, 0, self.seq, version + 1)

    def close(self) -> None:
        self.writer.close()
        self.control.close()


class ShmParameterSubscriber(ParameterSubscriber):
    def __init__(self, ctx: StreamContext, key: str, lookup_timeout_s: float = 60.0) -> None:
        self.ctx, self.key = ctx, key
        self.name = ctx.names.lookup(key, lookup_timeout_s)
        self.control = Segment.attach(self.name)
        self.reader = ShmReader(ctx.shm_prefix, ctx.cap(KIND))
        self.version = -1
        self.last_lookup = time.monotonic()

    def _follow_publisher(self) -> None:
        """Re-attach (and accept any version) if a new publisher registered, e.g. a restarted trainer."""
        if time.monotonic() - self.last_lookup < REPUBLISH_S:
            return
        self.last_lookup = time.monotonic()
        name = self.ctx.names.get(self.key)
        if name and name != self.name:
            try:
                control = Segment.attach(name)
            except FileNotFoundError:
                return
            self.control.close()
            self.control, self.name, self.version = control, name, -1

    def poll(self) -> tuple[int, NamedArray, dict[str, Any]] | None:
        self._follow_publisher()
        for _ in range(100):
            seq, version_plus_one = _CONTROL.unpack_from(self.control.buf, 0)
            if seq % 2 or version_plus_one - 1 <= self.version:
                if seq % 2 == 0:
                    return None
                time.sleep(0.0005)
                continue
            (length,) = struct.unpack_from("<I", self.control.buf, _CONTROL.size)
            header = bytes(self.control.buf[_CONTROL.size + 4:_CONTROL.size + 4 + length])
            try:
                meta, params = self.reader.read(wire.decode([header])[0]["d"])
                params = params.copy() if params is not None else NamedArray()
            except wire.WireError:
                continue  # torn read while the publisher moved to a new segment
            if _CONTROL.unpack_from(self.control.buf, 0)[0] != seq:
                continue  # the publisher wrote while we copied
            self.version = int(meta.pop("version"))
            return self.version, params, meta
        return None

    def close(self) -> None:
        self.reader.close()
        self.control.close()


class ZmqParameterPublisher(ParameterPublisher):
    def __init__(self, ctx: StreamContext, key: str) -> None:
        self.socket = ctx.zmq_context.socket(zmq.PUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 2)  # slow subscribers skip versions, never queue them
        # A PUB socket reads only subscriptions, but a peer could still send it large frames.
        self.socket.setsockopt(zmq.MAXMSGSIZE, 1 << 16)
        self.ctx = ctx
        self.keeper = ctx.secure(self.socket, server=True)  # subscribers hold the run's keys
        self.socket.bind(f"tcp://{ctx.host}:0")
        self.seal = wire.Seal(ctx.secret, _binding(key))
        self.frames: list[Any] | None = None
        self.last_sent = 0.0
        self.incarnation = secrets.token_hex(4)
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        ctx.names.register(key, self.address)

    def publish(self, version: int, params: NamedArray, meta: dict[str, Any] | None = None) -> None:
        # Copy: the trainer keeps updating its tensors while zmq sends asynchronously.
        meta = {**(meta or {}), "version": version, "incarnation": self.incarnation}
        self.frames = self.seal.encode(meta, params.copy())
        self._send()

    def _send(self) -> None:
        assert self.frames is not None
        self.socket.send_multipart(self.frames, copy=False)
        self.last_sent = time.monotonic()

    def tick(self) -> None:
        if self.frames is not None and time.monotonic() - self.last_sent > REPUBLISH_S:
            self._send()

    def close(self) -> None:
        self.ctx.release(self.keeper)
        self.socket.close(linger=0)


class ZmqParameterSubscriber(ParameterSubscriber):
    def __init__(self, ctx: StreamContext, key: str, lookup_timeout_s: float = 60.0) -> None:
        self.socket = ctx.zmq_context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVHWM, 2)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.setsockopt(zmq.MAXMSGSIZE, ctx.cap(KIND))
        ctx.secure(self.socket, server=False)
        self.ctx, self.key = ctx, key
        self.address = ctx.names.lookup(key, lookup_timeout_s)
        self.socket.connect(self.address)
        self.guard = wire.Guard(ctx.secret, _binding(key), ctx.cap(KIND), repeats=True)
        self.version = -1
        self.incarnation = ""
        self.last_lookup = time.monotonic()
        self.dropped = 0
        self._latest: tuple[int, NamedArray, dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True, name="param-sub")
        self._thread.start()

    def _follow_publisher(self) -> None:
        if time.monotonic() - self.last_lookup < REPUBLISH_S:
            return
        self.last_lookup = time.monotonic()
        address = self.ctx.names.get(self.key)
        if address and address != self.address:  # a restarted trainer publishes elsewhere
            self.socket.connect(address)
            self.address = address

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow_publisher()
                if not self.socket.poll(100):
                    continue
                frames = self.socket.recv_multipart(copy=False)
            except zmq.ZMQError:
                return
            try:
                meta, params = self.guard.decode(frames)
                version = int(meta.pop("version"))
                incarnation = str(meta.pop("incarnation", ""))
            except (wire.WireError, KeyError, TypeError, ValueError) as exc:
                self.dropped += 1
                self.ctx.rejected[getattr(exc, "reason", wire.GARBAGE)] += 1
                continue
            with self._lock:
                if incarnation != self.incarnation:  # a new publisher restarts the version count
                    self.incarnation, self.version, self._latest = incarnation, -1, None
                if version > self.version and (self._latest is None or version > self._latest[0]):
                    self._latest = (version, params.copy() if params is not None else NamedArray(), meta)

    def poll(self) -> tuple[int, NamedArray, dict[str, Any]] | None:
        with self._lock:
            latest, self._latest = self._latest, None
        if latest is not None:
            self.version = latest[0]
        return latest

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self.socket.close(linger=0)


#: The boards of this process's in-process publishers, by the name each registers.
_BOARDS: dict[str, InprocParameterPublisher] = {}


class InprocParameterPublisher(ParameterPublisher):
    """The newest version as an immutable snapshot: each publish replaces it, never changes it,
    so subscribers may hold it without a copy of their own."""

    def __init__(self, ctx: StreamContext, key: str) -> None:
        self.name = f"inproc:{ctx.run_id}/{key}.{secrets.token_hex(3)}"
        self.latest: tuple[int, NamedArray, dict[str, Any]] | None = None
        _BOARDS[self.name] = self
        ctx.names.register(key, self.name)

    def publish(self, version: int, params: NamedArray, meta: dict[str, Any] | None = None) -> None:
        self.latest = (version, params.copy(), dict(meta or {}))

    def close(self) -> None:
        _BOARDS.pop(self.name, None)


class InprocParameterSubscriber(ParameterSubscriber):
    def __init__(self, ctx: StreamContext, key: str) -> None:
        self.ctx, self.key = ctx, key
        self.name = ctx.names.lookup(key, 0.0)
        self.version = -1
        self.last_lookup = time.monotonic()

    def poll(self) -> tuple[int, NamedArray, dict[str, Any]] | None:
        if time.monotonic() - self.last_lookup > REPUBLISH_S:  # a restarted trainer publishes anew
            self.last_lookup = time.monotonic()
            name = self.ctx.names.get(self.key)
            if name and name != self.name:
                self.name, self.version = name, -1
        board = _BOARDS.get(self.name)
        latest = board.latest if board is not None else None
        if latest is None or latest[0] <= self.version:
            return None
        self.version = latest[0]
        return latest[0], latest[1], dict(latest[2])

    def wait(self, timeout_s: float = 60.0) -> tuple[int, NamedArray, dict[str, Any]]:
        # Nobody else runs while we wait: what is not published yet never will be.
        if (got := self.poll()) is None:
            raise RuntimeError(f"parameters stream {self.key!r}: nothing published yet; inline, the group that "
                               "publishes it must come before its readers in the graph")
        return got

    def close(self) -> None:
        pass


class FanOut(ParameterPublisher):
    """Publish every version to several publishers (this host's shared memory, and the network)."""

    def __init__(self, publishers: list[ParameterPublisher]) -> None:
        self.publishers = publishers

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.publishers if hasattr(p, "address")]

    def publish(self, version: int, params: NamedArray, meta: dict[str, Any] | None = None) -> None:
        for publisher in self.publishers:
            publisher.publish(version, params, meta)

    def tick(self) -> None:
        for publisher in self.publishers:
            publisher.tick()

    def close(self) -> None:
        for publisher in self.publishers:
            publisher.close()


_PUBLISHERS = {"shm": ShmParameterPublisher, "zmq": ZmqParameterPublisher, "inproc": InprocParameterPublisher}
_SUBSCRIBERS = {"shm": ShmParameterSubscriber, "zmq": ZmqParameterSubscriber, "inproc": InprocParameterSubscriber}


def open_publisher(ctx: StreamContext, key: str, transport: Transport) -> ParameterPublisher:
    return _PUBLISHERS[transport](ctx, key)


def open_subscriber(ctx: StreamContext, key: str, transport: Transport) -> ParameterSubscriber:
    return _SUBSCRIBERS[transport](ctx, key)
