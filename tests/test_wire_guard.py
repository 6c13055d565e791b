"""Hostile peers on a link: caps, seals, replays and floods are dropped, counted, and survived."""

from __future__ import annotations

import contextlib
import secrets
import socket
import struct
import time

import numpy as np
import pytest
import zmq

from srl.data import wire
from srl.data.named_array import NamedArray
from srl.streams.link import MAX_BYTES_PER_RECV, MAX_PER_RECV, LinkClient, LinkServer, StreamContext, binding
from srl.streams.names import DirectoryNameService

CAP = 1 << 20  # every stream kind's cap in these tests: 1 MiB


@pytest.fixture
def ctx(tmp_path):
    caps = {kind: CAP for kind in ("control", "inference", "samples", "parameters")}
    return StreamContext(run_id=f"t{secrets.token_hex(4)}", secret=secrets.token_bytes(32),
                         names=DirectoryNameService(tmp_path / "names"), ipc_dir=str(tmp_path), caps=caps)


def seal_for(server: LinkServer) -> wire.Seal:
    """What a legitimate client of `server` seals with (a peer that holds the run's secret)."""
    return wire.Seal(server.ctx.secret, binding(server.kind, server.key, server.address, ">"))


def dealer(ctx: StreamContext, address: str, opened) -> zmq.Socket:
    """A ZeroMQ peer past the handshake (it holds the run's keys) that sends whatever a test makes:
    what the guard stops. Peers without the keys are the gate's (tests/test_gate.py)."""
    sock = ctx.zmq_context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, 5000)
    ctx.secure(sock, server=False)
    sock.connect(address)
    opened(sock)
    return sock


def drain(server, until, timeout_s: float = 5.0) -> list:
    """Receive until `until()` holds; returns the valid messages."""
    got = []
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:
        if (r := server.recv(20)) is not None:
            got.append(r)
    assert until(), f"rejected {dict(server.rejected)}, last error: {server.last_error}"
    return got


def recv_one(end, timeout_s: float = 5.0):
    deadline = time.monotonic() + timeout_s
    while (got := end.recv(20)) is None:
        assert time.monotonic() < deadline, f"nothing valid; rejected {dict(end.rejected)}: {end.last_error}"
    return got


def zmtp_dealer_declaring(host: str, port: int, size: int) -> socket.socket:
    """A raw TCP peer that completes the ZMTP 3.0 handshake as a DEALER, then starts a frame
    that declares `size` bytes (and sends only a few of them)."""
    raw = socket.create_connection((host, port), timeout=5)
    raw.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31)
    props = b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    body = b"\x05READY" + props
    with contextlib.suppress(OSError):  # a server behind the gate has hung up at the greeting
        raw.sendall(b"\x04" + bytes([len(body)]) + body)
        raw.sendall(b"\x02" + struct.pack(">Q", size) + b"x" * 1024)  # a long final frame
    return raw


def test_guard_checks_the_size_before_hashing(monkeypatch):
    secret = secrets.token_bytes(32)
    seal, guard = wire.Seal(secret, "samples:s/0@a>"), wire.Guard(secret, "samples:s/0@a>", max_bytes=4096)
    signed = []
    monkeypatch.setattr(wire, "sign", lambda *a: signed.append(1) or b"\0" * wire.TAG_BYTES)
    for frames in ([b"x" * 5000], [b"x"] * (wire.MAX_FIELDS + 4)):
        with pytest.raises(wire.WireError) as err:
            guard.decode(frames)
        assert err.value.reason == wire.OVERSIZED
    assert not signed
    monkeypatch.undo()
    meta, arrays = guard.decode(seal.encode({"a": 1}, NamedArray({"x": np.arange(3)})))
    assert meta == {"a": 1} and arrays["x"].tolist() == [0, 1, 2]


def test_guard_binding_sequence_and_restarts():
    secret = secrets.token_bytes(32)
    guard = wire.Guard(secret, "inference:i/0@a>", CAP)
    seal = wire.Seal(secret, "inference:i/0@a>")
    first, second = seal.encode({"n": 1}), seal.encode({"n": 2})
    guard.decode(second)
    for frames, reason in ((first, wire.REPLAYED), (second, wire.REPLAYED),  # older, and the same again
                           (wire.Seal(secret, "samples:s/0@b>").encode({}), wire.WRONG_STREAM),
                           (wire.Seal(secret, "inference:i/0@a<").encode({}), wire.WRONG_STREAM),  # a reply sent back
                           (wire.Seal(secrets.token_bytes(32), "inference:i/0@a>").encode({}), wire.BAD_TAG),
                           (wire.encode({}, None, secret), wire.BAD_TAG)):  # tagged, but no stamp
        with pytest.raises(wire.WireError) as err:
            guard.decode(frames)
        assert err.value.reason == reason
    restarted = wire.Seal(secret, "inference:i/0@a>")  # a new sender: counting from 1 again is fine
    assert guard.decode(restarted.encode({"n": 1}))[0] == {"n": 1}
    repeats = wire.Guard(secret, "parameters:p|pub", CAP, repeats=True)  # a publisher re-sends its latest
    publisher = wire.Seal(secret, "parameters:p|pub")
    older, latest = publisher.encode({"v": 2}), publisher.encode({"v": 3})
    assert repeats.decode(latest) == repeats.decode(latest)
    with pytest.raises(wire.WireError, match="replayed"):
        repeats.decode(older)


def test_garbage_replayed_misdirected_and_reflected_messages_are_counted(ctx, opened):
    server = LinkServer(ctx, "inference/0", "zmq", kind="inference")
    other = LinkServer(ctx, "samples/0", "zmq", kind="samples")
    opened(server), opened(other)
    raw = dealer(ctx, server.address, opened)
    captured = [bytes(f) for f in seal_for(server).encode({"_slot": 1}, NamedArray({"x": np.arange(4)}))]
    for frames in ([b"garbage"], [wire.MAGIC + b"{", b"\0"],
                   captured, captured,  # served once; the same bytes again are a replay
                   wire.split([b"x" * (CAP // 2)] * 3),  # each in slices under the cap, the message over it
                   [bytes(f) for f in seal_for(other).encode({"_slot": 0})],  # sealed for another stream
                   [bytes(f) for f in server.seal.encode({"_slot": 0})]):  # the server's own reply, sent back
        raw.send_multipart(frames)
    served = drain(server, lambda: server.dropped >= 6)
    assert [r.slot for r in served] == [1]
    assert dict(server.rejected) == {"bad_tag": 2, "replayed": 1, "oversized": 1, "wrong_stream": 2}
    assert ctx.rejected == server.rejected  # what the worker's heartbeat reports
    # a restarted server (a new address) refuses what was captured on the way to its predecessor
    server.close()
    restarted = LinkServer(ctx, "inference/0", "zmq", kind="inference")
    opened(restarted)
    dealer(ctx, restarted.address, opened).send_multipart(captured)
    drain(restarted, lambda: restarted.rejected["wrong_stream"] == 1)
    # and real clients are still served, both ways
    client = LinkClient(ctx, "inference/0", "zmq", "actor", kind="inference")
    opened(client)
    client.send(2, {}, NamedArray({"x": np.arange(2)}))
    request = recv_one(restarted)
    restarted.send(request.client, request.slot, {}, NamedArray({"a": np.ones(2)}))
    assert recv_one(client).slot == 2


def test_a_frame_declaring_a_gibibyte_and_a_100_mb_message_are_refused_unread(ctx, opened):
    import resource

    server = LinkServer(ctx, "samples/0", "zmq", kind="samples")
    opened(server)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
    declaring = zmtp_dealer_declaring(host, int(port), 1 << 30)
    try:
        # dropped at the handshake (it has not the run's keys); past it, libzmq would drop the
        # peer on reading the frame's length: the GiB is never allocated either way
        declaring.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert declaring.recv(4096) is not None  # (the server's greeting, then end of stream)
        assert server.recv(100) is None
    finally:
        declaring.close()
    raw = dealer(ctx, server.address, opened)
    raw.send_multipart([b"x" * (100 << 20)])  # one 100 MB frame: the same, in libzmq
    raw = dealer(ctx, server.address, opened)
    raw.send_multipart([b"x" * (2 * wire.FRAME_BYTES)])  # a frame over a TCP frame's size: the same
    raw = dealer(ctx, server.address, opened)
    raw.send_multipart(wire.split([b"x" * (CAP - 64)] * 100), copy=False)  # 100 MB in slices: the guard
    drain(server, lambda: server.rejected["oversized"] == 1, 10)
    # a sender that builds a message over its stream's cap fails at once, naming the setting
    client = LinkClient(ctx, "samples/0", "zmq", "actor", kind="samples")
    opened(client)
    with pytest.raises(ValueError, match="max_message_mb.samples"):
        client.send(0, {}, NamedArray({"x": np.zeros(CAP, np.uint8)}))
    client.send(1, {}, NamedArray({"x": np.zeros(CAP // 2, np.uint8)}))
    assert recv_one(server).slot == 1
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert grown_mb < 600, f"peak memory grew by {grown_mb:.0f} MB"


def test_a_flood_of_bad_messages_neither_starves_the_heartbeat_nor_the_valid_client(ctx, opened, tmp_path):
    """A worker whose poll reads a flooded server still heartbeats; its stats count the flood."""
    import threading

    from srl.api.worker import StreamEnd, WorkerSpec
    from srl.workers.base import Worker

    class Serving(Worker):
        def setup(self) -> None:
            self.server = LinkServer(self.ctx, "inference/0", "zmq", kind="inference")
            self.served = []
            ready.set()

        def poll(self) -> None:
            if (got := self.server.recv(5)) is not None:
                self.served.append(got.slot)

        def teardown(self) -> None:
            self.server.close()

    ready = threading.Event()
    controller = LinkServer(ctx, "control", "zmq")
    opened(controller)
    spec = WorkerSpec("server.0", "serving", "server", 0, 1, 0, settings={}, streams={},
                      control=StreamEnd("control", "zmq"), run_dir=str(tmp_path), heartbeat_s=0.05)
    worker = Serving(spec, ctx)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    stop = threading.Event()

    def flood() -> None:
        sock = ctx.zmq_context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        ctx.secure(sock, server=False)
        sock.connect(worker.server.address)
        while not stop.is_set():
            try:
                sock.send_multipart([b"SRL1{", b"y" * 64, b"z" * 32], zmq.NOBLOCK)
            except zmq.Again:
                time.sleep(0.0005)
        sock.close(linger=0)

    assert ready.wait(10)
    flooders = [threading.Thread(target=flood) for _ in range(2)]
    beats = []
    try:
        for f in flooders:
            f.start()
        client = LinkClient(ctx, "inference/0", "zmq", "actor", kind="inference")
        opened(client)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if (message := controller.recv(20)) is not None:
                beats.append((time.monotonic(), message.meta.get("stats", {})))
                controller.send(message.client, 0, {"command": "ok"})
                client.send(len(beats), {}, NamedArray({"x": np.arange(2)}))
    finally:
        stop.set()
        for f in flooders:
            f.join()
        worker.request_stop()
        thread.join(10)
    rejected = beats[-1][1]["rejected"]
    assert rejected["bad_tag"] > 1000 and rejected["deferred"] > 0, rejected
    gaps = np.diff([t for t, _ in beats])
    assert len(beats) >= 15 and gaps.max() < 0.5, (len(beats), gaps.max())  # one every 0.05 s asked
    assert len(worker.served) >= len(beats) // 2  # the valid client's requests got through


def test_one_receive_stops_after_its_share_of_invalid_messages_or_bytes(ctx, opened):
    server = LinkServer(ctx, "inference/0", "zmq", kind="inference")
    opened(server)
    raw = dealer(ctx, server.address, opened)
    for _ in range(MAX_PER_RECV + 10):  # small: the count stops a receive
        raw.send_multipart([b"x"])
    time.sleep(0.3)  # all queued before the first receive
    assert server.recv(1000) is None
    assert server.dropped == MAX_PER_RECV and server.rejected["deferred"] == 1
    drain(server, lambda: server.dropped == MAX_PER_RECV + 10)
    # under the cap, so each is hashed before it is refused: the bytes stop a receive
    forged = [b"SRL1{}", b"y" * (CAP - 1024), b"t" * wire.TAG_BYTES]
    for _ in range(MAX_PER_RECV):
        raw.send_multipart(wire.split(forged))
    time.sleep(1.0)
    before, deferred = server.dropped, server.rejected["deferred"]
    assert server.recv(1000) is None
    assert 0 < server.dropped - before <= -(-MAX_BYTES_PER_RECV // sum(map(len, forged))) < MAX_PER_RECV
    assert server.rejected["deferred"] == deferred + 1
    drain(server, lambda: server.dropped == before + MAX_PER_RECV)
