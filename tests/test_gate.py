"""The gate of TCP links: peers without the run's keys are dropped at the handshake, before any
message is read, and connections that linger in it are bounded in number and in time."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq

from srl.data.named_array import NamedArray
from srl.streams import gate
from srl.streams.link import LinkClient, LinkServer, StreamContext
from srl.streams.names import DirectoryNameService
from srl.streams.parameters import ZmqParameterPublisher, ZmqParameterSubscriber


def context(tmp_path, **gate_settings) -> StreamContext:
    return StreamContext(run_id=f"t{secrets.token_hex(4)}", secret=secrets.token_bytes(32),
                         names=DirectoryNameService(tmp_path / "names"), ipc_dir=str(tmp_path), **gate_settings)


def served(server: LinkServer, ctx: StreamContext, timeout_s: float = 10.0) -> bool:
    """A client with the run's keys still gets a message through, and the reply back."""
    client = LinkClient(ctx, server.key, "zmq", f"good{secrets.token_hex(2)}", kind=server.kind)
    try:
        client.send(7, {}, NamedArray({"x": np.arange(3)}))
        deadline = time.monotonic() + timeout_s
        while (got := server.recv(20)) is None:
            ctx.check_gates()
            if time.monotonic() > deadline:
                return False
        server.send(got.client, got.slot, {"ok": 1})
        reply = client.recv(int(timeout_s * 1000))
        return reply is not None and reply.meta == {"ok": 1}
    finally:
        client.close()


def watch(ctx: StreamContext, until, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, dict(ctx.rejected)
        time.sleep(gate.CHECK_S)
        ctx.check_gates()


def hung_up(raw: socket.socket, timeout_s: float = 5.0) -> bool:
    """Whether the server ends a raw connection within `timeout_s` (after its greeting)."""
    raw.settimeout(timeout_s)
    try:
        while raw.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_keys_come_from_the_secret_alone():
    secret = secrets.token_bytes(32)
    keys = gate.CurveKeys.of(secret)
    assert keys == gate.CurveKeys.of(secret) and keys != gate.CurveKeys.of(secrets.token_bytes(32))
    assert zmq.curve_public(keys.server_secret) == keys.server_public
    assert keys.server_public != keys.client_public


@pytest.mark.parametrize("peer", ["no keys", "another run's keys", "raw bytes"])
def test_a_peer_without_the_runs_keys_is_dropped_before_a_message_is_read(tmp_path, opened, peer):
    ctx = context(tmp_path)
    server = LinkServer(ctx, "samples/0", "zmq", kind="samples")
    opened(server)
    if peer == "raw bytes":
        host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            raw.sendall(b"\xff" + b"\0" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" * 32 + b"x" * 4096)
            assert hung_up(raw)
    else:
        sock = ctx.zmq_context.socket(zmq.DEALER)
        opened(sock)
        if peer == "another run's keys":
            context(tmp_path / "other").secure(sock, server=False)
        sock.connect(server.address)
        for _ in range(20):
            sock.send_multipart([b"SRL1{}", b"y" * 1000], zmq.NOBLOCK)
        watch(ctx, lambda: ctx.rejected[gate.UNAUTHENTICATED] >= 1)
    assert server.recv(200) is None and server.dropped == 0  # nothing reached the guard
    assert served(server, ctx)


ATTACKER = """
import socket, struct, sys, time
host, port, frames, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# A ZMTP 3 greeting that asks for CURVE, then a command frame of `size` bytes, `frames` times:
# all that a peer without the keys can send before the server must decide.
chunk = b"z" * (1 << 20)
for _ in range(frames):
    try:
        raw = socket.create_connection((host, port), timeout=5)
        raw.sendall(b"\\xff" + b"\\0" * 8 + b"\\x7f\\x03\\x00" + b"CURVE".ljust(20, b"\\0") + b"\\0" * 32)
        raw.sendall(b"\\x06" + struct.pack(">Q", size))
        for _ in range(size // len(chunk)):
            raw.sendall(chunk)
    except OSError:
        pass
print("sent")
"""


def test_an_unauthenticated_peers_large_frames_never_take_the_servers_memory(tmp_path, opened):
    """The attack that buffered 1.3 GB in a trainer: 20 frames of 64 MiB, each under the cap."""
    ctx = context(tmp_path)
    server = LinkServer(ctx, "samples/0", "zmq", kind="samples")  # 1 GiB cap per message
    opened(server)
    before = rss_mb()
    host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
    attack = subprocess.run([sys.executable, "-c", ATTACKER, host, port, "20", str(64 << 20)],
                            capture_output=True, text=True, timeout=120)
    assert attack.returncode == 0, attack.stderr
    ctx.check_gates()
    grown = rss_mb() - before
    assert grown < 32, f"the server grew by {grown:.0f} MB"
    assert served(server, ctx)


def test_lingering_handshakes_are_shed_over_the_cap_and_dropped_at_the_deadline(tmp_path, opened):
    ctx = context(tmp_path, handshake_timeout_ms=1500, max_pending=8)
    server = LinkServer(ctx, "inference/0", "zmq", kind="inference")
    opened(server)
    host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(60)]
    try:
        watch(ctx, lambda: ctx.rejected[gate.SHED] >= 52)  # 60 open, 8 kept
        keeper = ctx.gates[0]
        assert len(keeper.pending) <= 8
        assert served(server, ctx)  # a client with the keys gets in beside them
        assert all(hung_up(sock) for sock in idle)  # the shed ones at once, the rest by the deadline
        watch(ctx, lambda: ctx.rejected[gate.UNAUTHENTICATED] >= 1)  # those that reached the deadline
    finally:
        for sock in idle:
            sock.close()


def test_parameters_reach_subscribers_with_the_keys_and_no_one_else(tmp_path, opened):
    ctx = context(tmp_path)
    publisher = ZmqParameterPublisher(ctx, "parameters")
    opened(publisher)
    subscriber = ZmqParameterSubscriber(ctx, "parameters")
    opened(subscriber)
    stranger = ctx.zmq_context.socket(zmq.SUB)
    opened(stranger)
    stranger.setsockopt(zmq.SUBSCRIBE, b"")
    stranger.connect(publisher.address)
    deadline = time.monotonic() + 10
    got = None
    while got is None and time.monotonic() < deadline:
        publisher.publish(1, NamedArray({"w": np.arange(4, dtype=np.float32)}))
        time.sleep(0.05)
        got = subscriber.poll()
    assert got is not None and got[0] == 1
    np.testing.assert_array_equal(got[1]["w"], np.arange(4, dtype=np.float32))
    assert not stranger.poll(500)
    watch(ctx, lambda: ctx.rejected[gate.UNAUTHENTICATED] >= 1)


def test_the_gate_settings_are_checked_in_one_line():
    from srl.api.config import StreamsConfig

    for field, value in (("handshake_timeout_s", 0), ("max_pending_connections", 0),
                         ("max_pending_connections", 10**6)):
        with pytest.raises(ValueError, match=field):
            StreamsConfig(**{field: value})
