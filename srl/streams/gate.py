"""The gate of every TCP socket: only a peer that holds the run's secret gets past the handshake.

A ZeroMQ peer that has connected may send a message of any number of frames, and libzmq holds
every frame until the last one has arrived: a guard that looks at whole messages (`wire.Guard`)
comes too late to bound memory. So TCP sockets speak CurveZMQ with keys derived from the run's
secret. A server's public key is never sent on the wire: a peer that cannot derive it cannot
even start a handshake, and the server drops it before reading a single message. Handshakes
have a deadline (`streams.handshake_timeout_s`), and each server keeps at most
`streams.max_pending_connections` connections that have not finished one, shutting the oldest
when more arrive. libzmq reads a whole frame even in a handshake, so TCP frames are at most
`wire.FRAME_BYTES` (longer ones travel in slices): all that peers without the secret can make a
server hold is max_pending_connections x (FRAME_BYTES + a few KiB), 16 MiB by default, for a
few seconds, and never the descriptors its own files need.

Sealed messages (`wire.Seal`) stay as they are: they bind each message to its stream and
sender, which the handshake does not.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import hmac
import secrets
import socket as _socket
import struct
import time
from dataclasses import dataclass

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

#: Counted (in a link's and its process's `rejected`) for each peer dropped at the handshake:
#: one without the run's keys, or one too slow to finish it ...
UNAUTHENTICATED = "unauthenticated"
#: ... and for each connection shut because more than `max_pending` were in their handshake.
SHED = "shed"

_REFUSED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | _REFUSED
_libc = ctypes.CDLL(None, use_errno=True)
#: A ZMTP 3 greeting's bytes, which a server sends to any peer; and where Linux's `struct
#: tcp_info` keeps the bytes the peer has acknowledged (`tcpi_bytes_acked`, since Linux 4.1).
GREETING_BYTES = 64
_BYTES_ACKED, _BYTES_ACKED_AT, _TCP_INFO_BYTES = struct.Struct("=Q"), 120, 256
_TCP_INFO = getattr(_socket, "TCP_INFO", None)
#: Seconds between looks at a gate's events: often enough that the pending cap holds within a
#: few dozen connections of a flood, rarely enough to cost nothing on a worker's hot loop.
CHECK_S = 0.02


@dataclass(frozen=True)
class CurveKeys:
    """Z85 key pairs for servers and clients, each derived from the run's secret."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def of(cls, secret: bytes) -> CurveKeys:
        def pair(label: bytes) -> tuple[bytes, bytes]:
            private = z85.encode(hmac.new(secret, label, hashlib.sha256).digest())
            return zmq.curve_public(private), private

        return cls(*pair(b"srl curve server"), *pair(b"srl curve client"))


def serve(socket: zmq.Socket, keys: CurveKeys, handshake_timeout_ms: int) -> None:
    """Make `socket` (before it binds) a CurveZMQ server with the run's keys."""
    socket.setsockopt(zmq.CURVE_SERVER, 1)
    socket.setsockopt(zmq.CURVE_SECRETKEY, keys.server_secret)
    socket.setsockopt(zmq.HANDSHAKE_IVL, handshake_timeout_ms)


def connect(socket: zmq.Socket, keys: CurveKeys) -> None:
    """Make `socket` (before it connects) a CurveZMQ client of the run's servers."""
    socket.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
    socket.setsockopt(zmq.CURVE_PUBLICKEY, keys.client_public)
    socket.setsockopt(zmq.CURVE_SECRETKEY, keys.client_secret)


def _past_hello(fd: int) -> bool:
    """Whether the server has had more than its greeting acknowledged on connection `fd`: it
    answers a HELLO only when the peer sealed it to the server's key, which a peer without the
    run's secret cannot derive, so a connection past it belongs to a peer with the keys."""
    if _TCP_INFO is None:  # not Linux: no way to tell, so every young connection counts as pending
        return False
    info = ctypes.create_string_buffer(_TCP_INFO_BYTES)
    size = ctypes.c_uint32(_TCP_INFO_BYTES)
    if _libc.getsockopt(fd, _socket.IPPROTO_TCP, _TCP_INFO, info, ctypes.byref(size)) != 0:
        return True  # not a TCP socket any more: nothing of ours to shed
    return size.value >= _BYTES_ACKED.size + _BYTES_ACKED_AT and \
        _BYTES_ACKED.unpack_from(info, _BYTES_ACKED_AT)[0] > GREETING_BYTES


class Gatekeeper:
    """Watches a server socket's connections through its monitor: counts the peers refused at the
    handshake and sheds the oldest connections still in it when more than `max_pending` are.

    A connection older than the handshake deadline that is still open has finished its
    handshake (libzmq drops it otherwise), and one the server has answered past its greeting
    belongs to a peer with the keys (`_past_hello`): only the others are shed, so a client that
    connected a moment before a flood keeps its connection and what it has in flight. `check()`
    is cheap when nothing happened; a worker calls it between its polls (`StreamContext.check_gates`)."""

    def __init__(self, socket: zmq.Socket, handshake_timeout_ms: int, max_pending: int,
                 rejected: collections.Counter) -> None:
        self.socket = socket
        address = f"inproc://srl-gate-{secrets.token_hex(8)}"
        socket.monitor(address, _EVENTS)
        # libzmq's I/O thread blocks on an event its monitor's queue has no room for, and with
        # it every connection of the process: the queue is unbounded (a flood between two
        # checks is a few hundred bytes per connection), and `close` stops the events first.
        self.monitor = socket.context.socket(zmq.PAIR)
        self.monitor.setsockopt(zmq.RCVHWM, 0)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self.monitor.connect(address)
        self.deadline_s = handshake_timeout_ms / 1000
        self.max_pending = max_pending
        self.rejected = rejected
        self._checked = 0.0
        #: Open connections still within the handshake deadline: file descriptor -> accepted at.
        self.pending: collections.OrderedDict[int, float] = collections.OrderedDict()

    def check(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_S:
            return
        self._checked = now
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError:  # the watched socket has closed
                return
            event = parse_monitor_message(frames)
            kind, fd = event["event"], event["value"]
            if kind == zmq.EVENT_ACCEPTED:
                self.pending[fd] = now
                self.pending.move_to_end(fd)
            elif kind == zmq.EVENT_DISCONNECTED:
                self.pending.pop(fd, None)
            elif kind & _REFUSED:
                self._count(UNAUTHENTICATED)
        self._expire()
        if len(self.pending) > self.max_pending:
            for fd in [fd for fd in self.pending if _past_hello(fd)]:
                del self.pending[fd]
        while len(self.pending) > self.max_pending:
            fd, _ = self.pending.popitem(last=False)
            # Shut, not closed: libzmq owns the descriptor and closes it when it sees the end.
            if _libc.shutdown(fd, _socket.SHUT_RDWR) == 0:
                self._count(SHED)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.deadline_s
        while self.pending and next(iter(self.pending.values())) < cutoff:
            self.pending.popitem(last=False)

    def _count(self, reason: str) -> None:
        self.rejected[reason] += 1

    def close(self) -> None:
        """Before the watched socket closes."""
        if not self.socket.closed:
            self.socket.disable_monitor()
        self.monitor.close(linger=0)
