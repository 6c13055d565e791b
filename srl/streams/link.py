"""Links: the one primitive under every stream. Many clients, one server, messages both ways.

A link is a ZeroMQ DEALER (client) / ROUTER (server) pair. Every message carries a
`slot` number chosen by the client (a ring slot for inference, a credit for samples);
the reply to a slot goes back to the client that sent it.

Three transports, one code path:

* ``zmq``: arrays travel inside the message as raw frames over TCP, sealed with the
  run's secret (see `srl.data.wire`).
* ``inproc``: every end in this process (`launcher: inline`): the frames go through ZeroMQ's
  in-process queues; nothing crosses a socket or shared memory, so nothing is sealed.
* ``shm``: arrays are laid out in a shared-memory segment owned by the sender; only a
  small descriptor crosses a Unix socket in a directory private to the run's user.
  The receiver gets views into the segment that stay valid until the same slot is
  written again, which the stream protocols above never do before the reader is done.

Every link belongs to a stream *kind* (`control`, `inference`, `samples`, `parameters`),
which sets the largest message it takes (`streams.max_message_mb`). Over TCP each message
is sealed to its stream and sender (`wire.Seal`, `wire.Guard`): links drop what is too big,
forged, meant for another stream or replayed, and count each by reason, per link and in
the process's `StreamContext.rejected` (which the worker's heartbeat reports). One `recv`
looks at `MAX_PER_RECV` messages at most, so a flood cannot hold a worker's loop.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import re
import resource
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from srl.api.config import MessageCaps, StreamsConfig
from srl.api.worker import Transport
from srl.data import wire
from srl.data.named_array import NamedArray
from srl.streams import gate
from srl.streams.names import NameService
from srl.streams.shm import PREFIX, Segment

_SHM_KEY = "_shm"
_SLOT_KEY = "_slot"
#: Invalid messages, and their bytes, one `recv` call looks at, at most: past either it returns
#: with the rest left waiting (counted as `deferred`), and the caller's loop gets to its
#: heartbeat and other work. The bytes bound the hashing: a flood of large forged messages
#: costs each call the HMAC of 32 MiB at most, not 64 messages' worth.
MAX_PER_RECV = 64
MAX_BYTES_PER_RECV = 32 << 20
DEFERRED = "deferred"


def allow_many_connections() -> None:
    """Raise this process's limit of open files to the most it may have: a server holds a
    socket per connected client (thousands of actors on one controller or policy worker)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def binding(kind: str, key: str, address: str, direction: str) -> str:
    """What a sealed message is bound to. The address changes when a server is replaced, so
    messages captured on the way to its predecessor are refused by it as for another stream."""
    return f"{kind}:{key}@{address}{direction}"


_DEFAULT_CAPS = MessageCaps().in_bytes()
_DEFAULT_STREAMS = StreamsConfig()
#: The gate's settings where no config gives them (`streams.handshake_timeout_s`, `streams.max_pending_connections`).
DEFAULT_HANDSHAKE_MS = int(_DEFAULT_STREAMS.handshake_timeout_s * 1000)
DEFAULT_MAX_PENDING = _DEFAULT_STREAMS.max_pending_connections


@dataclass
class StreamContext:
    """What a process needs to open links: the run's identity, secret and name service."""

    run_id: str
    secret: bytes
    names: NameService
    ipc_dir: str
    host: str = "127.0.0.1"
    zmq_context: zmq.Context = field(default_factory=zmq.Context.instance, repr=False)
    #: The largest message of each stream kind, in bytes (kinds not named: the default caps).
    caps: dict[str, int] = field(default_factory=dict)
    #: Messages every link of this process rejected, by reason (`wire.OVERSIZED`, ...). Links
    #: in helper threads add to it too; a count lost to a race would only be a count.
    rejected: collections.Counter = field(default_factory=collections.Counter, repr=False)
    #: Every worker of the run lives in this process, stepped in turn by one loop (`launcher:
    #: inline`): nothing may wait for another, so every wait on a link returns at once.
    inline: bool = False
    #: TCP servers drop a peer that has not finished its handshake within this (`srl.streams.gate`) ...
    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_MS
    #: ... and keep at most this many connections in their handshake, each.
    max_pending: int = DEFAULT_MAX_PENDING
    #: The gates of this process's TCP servers, checked between a worker's polls (`check_gates`).
    gates: list[gate.Gatekeeper] = field(default_factory=list, repr=False)

    def cap(self, kind: str) -> int:
        return self.caps.get(kind) or _DEFAULT_CAPS[kind]

    @functools.cached_property
    def curve(self) -> gate.CurveKeys:
        return gate.CurveKeys.of(self.secret)

    def secure(self, socket: zmq.Socket, server: bool) -> gate.Gatekeeper | None:
        """Put a TCP socket (before it binds or connects) behind the run's gate; a server's gatekeeper."""
        if not server:
            gate.connect(socket, self.curve)
            return None
        gate.serve(socket, self.curve, self.handshake_timeout_ms)
        keeper = gate.Gatekeeper(socket, self.handshake_timeout_ms, self.max_pending, self.rejected)
        self.gates.append(keeper)
        return keeper

    def release(self, keeper: gate.Gatekeeper | None) -> None:
        """Stop watching a server's gate, before its socket closes (twice is harmless)."""
        if keeper in self.gates:
            self.gates.remove(keeper)
            keeper.close()

    def check_gates(self) -> None:
        for keeper in self.gates:
            keeper.check()

    @property
    def shm_prefix(self) -> str:
        return f"{PREFIX}{self.run_id}_"


@dataclass
class Received:
    slot: int
    meta: dict[str, Any]
    arrays: NamedArray | None
    client: bytes = b""


class ShmWriter:
    """Slots in segments owned by this writer; grows (new segment) when a message doesn't fit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.segment: Segment | None = None
        self.generation = 0
        self.slot_bytes = 0
        self.nslots = 0
        #: Slots written in the current segment; and replaced segments with slots not yet written again.
        self.written: set[int] = set()
        self.retired: list[tuple[Segment, set[int]]] = []

    def write(self, slot: int, meta: dict[str, Any], arrays: NamedArray) -> list[Any]:
        packed = wire.Packed(meta, arrays)  # the header is encoded once, sized and written from it
        if self.segment is None or packed.size > self.slot_bytes or slot >= self.nslots:
            self._grow(max(packed.size, self.slot_bytes), max(slot + 1, self.nslots))
        offset = slot * self.slot_bytes
        assert self.segment is not None
        used = packed.write(self.segment.buf[offset:offset + self.slot_bytes])
        self.written.add(slot)
        self._release(slot)
        return [self.segment.name, offset, used]

    def _release(self, slot: int) -> None:
        """Unlink replaced segments once each of their slots is written again: by the stream
        protocols, the reader is then done with the old data (and has attached the old segment)."""
        keep = []
        for segment, pending in self.retired:
            pending.discard(slot)
            if pending:
                keep.append((segment, pending))
            else:
                segment.close()
        self.retired = keep

    def _grow(self, slot_bytes: int, nslots: int) -> None:
        if self.segment is not None:
            # Not unlinked yet: a message already sent may name it before its reader attached.
            self.retired.append((self.segment, self.written))
        self.written = set()
        self.generation += 1
        self.slot_bytes = -(-int(slot_bytes * 1.25 + 64) // 4096) * 4096
        self.nslots = nslots
        self.segment = Segment.create(f"{self.name}_g{self.generation}", self.slot_bytes * nslots)

    def close(self) -> None:
        for segment, _ in self.retired:
            segment.close()
        self.retired = []
        if self.segment is not None:
            self.segment.close()
            self.segment = None


class ShmReader:
    """Attaches the segments named in descriptors, keeping one mapping per writer."""

    def __init__(self, prefix: str, max_bytes: int) -> None:
        self._valid = re.compile(rf"^{re.escape(prefix)}[A-Za-z0-9_.\-]+_g\d+$")
        self._segments: dict[str, Segment] = {}
        self.max_bytes = max_bytes

    def read(self, descriptor: Any) -> tuple[dict[str, Any], NamedArray | None]:
        if not (isinstance(descriptor, list) and len(descriptor) == 3):
            raise wire.WireError("bad shared-memory descriptor")
        name, offset, nbytes = descriptor
        if not (isinstance(name, str) and self._valid.match(name) and type(offset) is int and type(nbytes) is int):
            raise wire.WireError(f"bad shared-memory descriptor {descriptor!r:.100}")
        if nbytes > self.max_bytes:
            raise wire.WireError(f"{nbytes} bytes, more than the stream's {self.max_bytes}", wire.OVERSIZED)
        writer = name.rsplit("_g", 1)[0]
        segment = self._segments.get(writer)
        if segment is None or segment.name != name:
            if segment is not None:
                segment.close()
            try:
                segment = self._segments[writer] = Segment.attach(name)
            except FileNotFoundError:
                raise wire.WireError(f"shared-memory segment {name} is gone") from None
        if offset < 0 or nbytes < 0 or offset + nbytes > segment.size:
            raise wire.WireError("descriptor points outside its segment")
        return wire.unpack_from(segment.buf[offset:offset + nbytes])

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()


class LinkWaiter:
    """Waits on several links at once, so a worker fed by more than one (a policy worker serving
    several policies; a buffer between actors and a trainer) sleeps until any of them can move
    it on instead of taking turns at short timeouts, each turn a wake-up that costs CPU. Built
    once, since the wait is on a worker's every idle poll; a link whose socket was replaced (a
    client that reconnected to a restarted server) is picked up at the next wait."""

    def __init__(self, links: Sequence[_Endpoint]) -> None:
        self.links = list(links)
        self._watch()

    def _watch(self) -> None:
        self._sockets = [link.socket for link in self.links]
        self._poller = zmq.Poller()
        for socket in self._sockets:
            self._poller.register(socket, zmq.POLLIN)

    def wait(self, timeout_ms: int) -> bool:
        """Whether any link has a message waiting within `timeout_ms`."""
        if self.links and self.links[0].ctx.inline:
            timeout_ms = 0
        if any(link.socket is not socket for link, socket in zip(self.links, self._sockets)):
            self._watch()
        return bool(self._poller.poll(timeout_ms))


class _Endpoint:
    def __init__(self, ctx: StreamContext, key: str, transport: Transport, socket_type: int, kind: str) -> None:
        self.ctx = ctx
        self.key = key
        self.kind = kind
        self.transport = transport
        self.max_bytes = ctx.cap(kind)
        self.keeper: gate.Gatekeeper | None = None
        self.socket = self._socket(socket_type)
        # Over TCP every message is sealed; Unix sockets live in a directory only we can read.
        self.secret = ctx.secret if transport == "zmq" else None
        self.reader = ShmReader(ctx.shm_prefix, self.max_bytes) if transport == "shm" else None
        self.seal: wire.Seal | None = None
        self.guard = wire.Guard(None, "", self.max_bytes)
        self.rejected: collections.Counter = collections.Counter()
        self.last_error = ""
        #: Messages dropped on the way out, inline only: their receiver had gone.
        self.unsent = 0

    def _socket(self, socket_type: int) -> zmq.Socket:
        socket = self.ctx.zmq_context.socket(socket_type)
        socket.setsockopt(zmq.LINGER, 0)
        # libzmq drops a peer that sends a larger frame as soon as it reads the frame's length:
        # nothing that big is ever allocated. Over TCP that is a slice's length (`wire.split`),
        # which bounds a handshake too; a message of many frames is checked whole by the guard,
        # before its tag is computed.
        socket.setsockopt(zmq.MAXMSGSIZE, wire.FRAME_BYTES_ENCRYPTED if self.transport == "zmq" else self.max_bytes)
        if self.transport == "zmq":
            self.keeper = self.ctx.secure(socket, server=socket_type == zmq.ROUTER)
        return socket

    def _bind(self, address: str, outgoing: str, incoming: str) -> None:
        """Seal what we send and guard what we receive for the link at `address`."""
        if self.secret is not None:
            self.seal = wire.Seal(self.secret, binding(self.kind, self.key, address, outgoing))
            self.guard = wire.Guard(self.secret, binding(self.kind, self.key, address, incoming), self.max_bytes)

    @property
    def dropped(self) -> int:
        """Messages rejected, whatever the reason."""
        return sum(n for reason, n in self.rejected.items() if reason != DEFERRED)

    def _reject(self, reason: str, error: str) -> None:
        self.rejected[reason] += 1
        self.ctx.rejected[reason] += 1
        self.last_error = error

    def _encode(self, slot: int, meta: dict[str, Any], arrays: NamedArray | None, writer: ShmWriter | None) -> list[Any]:
        meta = {**meta, _SLOT_KEY: slot}
        if arrays is not None and writer is not None:
            meta[_SHM_KEY] = writer.write(slot, meta, arrays)
            self._check_size(meta[_SHM_KEY][2])
            arrays = None
        frames = self.seal.encode(meta, arrays) if self.seal is not None else wire.encode(meta, arrays)
        if arrays is not None:
            self._check_size(sum(memoryview(f).nbytes for f in frames))
        return wire.split(frames) if self.transport == "zmq" else frames

    def _check_size(self, nbytes: int) -> None:
        # Fail here, loudly, rather than have the receiver drop every such message.
        if nbytes > self.max_bytes:
            raise ValueError(f"a {self.kind} message of {nbytes / 2**20:.1f} MiB is larger than the "
                             f"{self.max_bytes / 2**20:.1f} MiB streams.max_message_mb.{self.kind} allows")

    def _decode(self, frames: list[Any]) -> Received | None:
        try:
            if self.transport == "zmq":
                frames = wire.join(frames, self.max_bytes)
            meta, arrays = self.guard.decode(frames)
            slot = meta.pop(_SLOT_KEY, None)
            if type(slot) is not int:
                raise wire.WireError("message has no slot")
            descriptor = meta.pop(_SHM_KEY, None)
            if descriptor is not None:
                if self.reader is None:
                    raise wire.WireError("shared-memory descriptor on a network link")
                meta, arrays = self.reader.read(descriptor)
                meta.pop(_SLOT_KEY, None)
                meta.pop(_SHM_KEY, None)
            return Received(slot, meta, arrays)
        except wire.WireError as exc:
            self._reject(exc.reason, str(exc))
            return None

    def recv(self, timeout_ms: int = 0) -> Received | None:
        """The next valid message, or None on timeout, or after `MAX_PER_RECV` invalid ones in a
        row or `MAX_BYTES_PER_RECV` of them (each dropped and counted)."""
        rejected_bytes = 0
        for _ in range(MAX_PER_RECV):
            if not (timeout_ms < 0 or self._poll(timeout_ms)):
                return None
            frames = self.socket.recv_multipart(copy=False)
            received = self._take(frames)
            if received is not None:
                return received
            rejected_bytes += sum(map(len, frames))
            if rejected_bytes >= MAX_BYTES_PER_RECV:
                break
            timeout_ms = 0  # dropped one; look for another already waiting
        if self._poll(0):
            self._reject(DEFERRED, self.last_error)
        return None

    def _take(self, frames: list[Any]) -> Received | None:
        """One received message, decoded (None: rejected)."""
        return self._decode(frames)

    def _send(self, frames: list[Any]) -> None:
        # copy=True: zmq may send after we return, and callers reuse their arrays at once.
        if not self.ctx.inline:
            self.socket.send_multipart(frames, copy=True)
            return
        # Inline nothing may wait: a client whose server has gone (stopped before it, replaced)
        # would block on an in-process socket with no peer, where a network one queues.
        try:
            self.socket.send_multipart(frames, copy=True, flags=zmq.DONTWAIT)
        except zmq.Again:
            self.unsent += 1

    def _poll(self, timeout_ms: int) -> bool:
        return bool(self.socket.poll(0 if self.ctx.inline else timeout_ms, zmq.POLLIN))

    def close(self) -> None:
        self.ctx.release(self.keeper)
        self.socket.close(linger=0)
        if self.reader is not None:
            self.reader.close()


#: Characters in a Unix socket's path at most (Linux's sun_path, less its terminating NUL).
UNIX_PATH_MAX = 107


class LinkServer(_Endpoint):
    """Binds, registers its address under `key`, receives from many clients and replies."""

    def __init__(self, ctx: StreamContext, key: str, transport: Transport, kind: str = "control") -> None:
        super().__init__(ctx, key, transport, zmq.ROUTER, kind)
        if transport == "shm":
            path = f"{ctx.ipc_dir}/{key.replace('/', '.')}.{secrets.token_hex(3)}"
            if len(path) > UNIX_PATH_MAX:
                self.socket.close(linger=0)
                raise OSError(f"stream {key!r}: its socket path {path!r} is longer than a Unix socket address allows "
                              f"({UNIX_PATH_MAX} characters); the run's sockets live in the temporary directory: set "
                              "TMPDIR to a shorter one (such as /tmp)")
            self.address = f"ipc://{path}"
            self.socket.bind(self.address)
        elif transport == "inproc":
            self.address = f"inproc://{ctx.run_id}/{key}.{secrets.token_hex(3)}"
            self.socket.bind(self.address)
        else:
            self.socket.bind(f"tcp://{ctx.host}:0")
            self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._bind(self.address, "<", ">")
        self._writers: dict[bytes, ShmWriter] = {}
        self._token = secrets.token_hex(2)  # a restarted server's segments never collide with its predecessor's
        ctx.names.register(key, self.address)

    def _take(self, frames: list[Any]) -> Received | None:
        if len(frames) <= 1:
            self._reject(wire.GARBAGE, "a message with no frame after the client's identity")
            return None
        received = self._decode(frames[1:])
        if received is not None:
            received.client = frames[0].bytes
        return received

    def send(self, client: bytes, slot: int, meta: dict[str, Any], arrays: NamedArray | None = None) -> None:
        writer = None
        if self.transport == "shm" and arrays is not None:
            writer = self._writers.get(client)
            if writer is None:
                name = f"{self.ctx.shm_prefix}{self.key.replace('/', '.')}-{self._token}_r{len(self._writers)}"
                writer = self._writers[client] = ShmWriter(name)
        self._send([client, *self._encode(slot, meta, arrays, writer)])

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        super().close()


class LinkClient(_Endpoint):
    """Connects to the server registered under `key`; sends to it and receives its replies."""

    def __init__(self, ctx: StreamContext, key: str, transport: Transport, name: str, lookup_timeout_s: float = 60.0,
                 kind: str = "control") -> None:
        super().__init__(ctx, key, transport, zmq.DEALER, kind)
        # Inline, a server not registered yet never will be while we wait (no one else runs).
        self.address = ctx.names.lookup(key, 0.0 if ctx.inline else lookup_timeout_s)
        self.socket.connect(self.address)
        self._bind(self.address, ">", "<")
        # The token keeps a restarted worker's segments apart from its predecessor's.
        writer_name = f"{ctx.shm_prefix}{name}-{secrets.token_hex(2)}_{key.replace('/', '.')}"
        self.writer = ShmWriter(writer_name) if transport == "shm" else None

    def refresh(self) -> bool:
        """Reconnect if the server re-registered elsewhere (it was restarted). True if it did."""
        address = self.ctx.names.get(self.key)
        if address is None or address == self.address:
            return False
        self.socket.close(linger=0)
        self.socket = self._socket(zmq.DEALER)
        self.socket.connect(address)
        self.address = address
        self._bind(address, ">", "<")
        return True

    def send(self, slot: int, meta: dict[str, Any], arrays: NamedArray | None = None) -> None:
        self._send(self._encode(slot, meta, arrays, self.writer))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        super().close()
