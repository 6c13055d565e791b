"""Links and the streams built on them, over both transports ("shm" and "zmq")."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time

import numpy as np
import pytest
import zmq

import srl.streams.parameters as parameters
from srl.data import wire
from srl.data.named_array import NamedArray
from srl.streams.inference import InferenceServer, RemoteInference
from srl.streams.link import LinkClient, LinkServer, LinkWaiter, StreamContext, binding
from srl.streams.names import DirectoryNameService
from srl.streams.samples import SampleConsumer, SampleProducer
from srl.streams.shm import SHM_DIR

TRANSPORTS = ["shm", "zmq"]


def shm_files(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(prefix))


class Endpoints:
    """Closes what a test opened (in reverse), even when the test fails."""

    def __init__(self) -> None:
        self.opened: list = []

    def __call__(self, endpoint):
        self.opened.append(endpoint)
        return endpoint

    def close_all(self) -> None:
        while self.opened:
            self.opened.pop().close()


@pytest.fixture
def ipc_dir():
    # Unix socket paths are limited to ~107 characters: pytest's tmp_path is too long.
    path = tempfile.mkdtemp(prefix="srl-t", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ctx(tmp_path, ipc_dir):
    context = StreamContext(run_id=f"t{secrets.token_hex(4)}", secret=secrets.token_bytes(32),
                            names=DirectoryNameService(tmp_path / "names"), ipc_dir=ipc_dir)
    yield context
    leftover = shm_files(context.shm_prefix)
    for name in leftover:  # don't leak into other tests even when this one fails
        (SHM_DIR / name).unlink(missing_ok=True)
    assert not leftover, f"shared-memory segments left behind: {leftover}"


@pytest.fixture
def ends(ctx):
    endpoints = Endpoints()
    yield endpoints
    endpoints.close_all()
    assert not shm_files(ctx.shm_prefix), "segments left after every endpoint closed"


def recv_all(server: LinkServer, n: int, timeout_s: float = 5.0) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        r = server.recv(50)
        if r is not None:
            got.append(r)
    assert len(got) == n, f"received {len(got)} of {n} (dropped {server.dropped}: {server.last_error})"
    return got


def sealed_for(server: LinkServer) -> wire.Seal:
    """A sender holding the run's secret that seals messages as a client of `server` does."""
    return wire.Seal(server.ctx.secret, binding(server.kind, server.key, server.address, ">"))


def raw_dealer(ctx: StreamContext, address: str) -> zmq.Socket:
    """A ZeroMQ peer that holds the run's keys (over TCP) and sends whatever a test makes."""
    sock = ctx.zmq_context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if address.startswith("tcp://"):
        ctx.secure(sock, server=False)
    sock.connect(address)
    return sock


# ------------------------------------------------------------------ links
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_messages_arrive_intact_and_replies_are_routed(ctx, ends, transport):
    server = ends(LinkServer(ctx, "inference/0", transport))
    clients = [ends(LinkClient(ctx, "inference/0", transport, f"actor{i}")) for i in range(3)]
    slots = 4
    for i, client in enumerate(clients):
        for slot in range(slots):  # back to back: a slot is requested before the server read the last
            value = 100 * i + slot
            client.send(slot, {"who": i, "note": "é"},
                        NamedArray({"obs": {"x": np.full((2, 3), value, np.float32)}, "id": np.array([value])}))
    got = recv_all(server, len(clients) * slots)
    assert server.dropped == 0
    seen = set()
    for r in got:
        i = r.meta["who"]
        assert r.meta == {"who": i, "note": "é"}  # the link's own keys are not exposed
        value = 100 * i + r.slot
        np.testing.assert_array_equal(r.arrays["obs/x"], np.full((2, 3), value, np.float32))
        assert r.arrays["id"].tolist() == [value]
        seen.add((i, r.slot))
        server.send(r.client, r.slot, {"echo": value}, NamedArray({"y": r.arrays["id"] + 1}))
    assert seen == {(i, s) for i in range(len(clients)) for s in range(slots)}
    assert len({r.client for r in got}) == len(clients)

    for i, client in enumerate(clients):
        replies = {}
        deadline = time.monotonic() + 5
        while len(replies) < slots and time.monotonic() < deadline:
            r = client.recv(50)
            if r is not None:
                replies[r.slot] = r
        assert sorted(replies) == list(range(slots)), client.last_error
        for slot, r in replies.items():
            assert r.meta == {"echo": 100 * i + slot}
            assert r.arrays["y"].tolist() == [100 * i + slot + 1]
        assert client.recv(0) is None
        assert client.dropped == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_meta_only_messages(ctx, ends, transport):
    server = ends(LinkServer(ctx, "k", transport))
    client = ends(LinkClient(ctx, "k", transport, "c"))
    client.send(7, {"hello": [1, 2]})
    (r,) = recv_all(server, 1)
    assert (r.slot, r.meta, r.arrays) == (7, {"hello": [1, 2]}, None)
    server.send(r.client, 7, {"ok": True})
    got = client.recv(2000)
    assert got is not None and (got.slot, got.meta, got.arrays) == (7, {"ok": True}, None)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_large_message_and_slot_growth(ctx, ends, transport):
    server = ends(LinkServer(ctx, "samples", transport))
    client = ends(LinkClient(ctx, "samples", transport, "big"))
    rng = np.random.default_rng(1)
    small = NamedArray({"x": np.arange(10, dtype=np.int32)})
    big = NamedArray({"x": rng.standard_normal(10 * 2**20 // 8), "y": {"z": rng.integers(0, 255, 4096, np.uint8)}})

    client.send(0, {"n": 0}, small)
    (r,) = recv_all(server, 1)
    np.testing.assert_array_equal(r.arrays["x"], small["x"])
    generation = client.writer.generation if client.writer else None

    client.send(0, {"n": 1}, big)  # does not fit the slot: the shm writer grows
    (r,) = recv_all(server, 1, timeout_s=20)
    assert r.meta == {"n": 1}
    assert r.arrays.nbytes == big.nbytes
    np.testing.assert_array_equal(r.arrays["x"], big["x"])
    np.testing.assert_array_equal(r.arrays["y/z"], big["y/z"])
    if transport == "shm":
        assert client.writer.generation > generation
        assert client.writer.slot_bytes >= big.nbytes
        # the replaced segment is gone once its slot was written again
        assert len(shm_files(client.writer.name)) == 1

    # big reply back, then small again into the grown slot
    server.send(r.client, 0, {}, big)
    reply = client.recv(20_000)
    assert reply is not None
    np.testing.assert_array_equal(reply.arrays["x"], big["x"])
    client.send(0, {"n": 2}, small)
    (r,) = recv_all(server, 1)
    np.testing.assert_array_equal(r.arrays["x"], small["x"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_garbage_frames_are_dropped_and_server_keeps_serving(ctx, ends, transport):
    server = ends(LinkServer(ctx, "inference/0", transport))
    raw = raw_dealer(ctx, server.address)
    try:
        secret = ctx.secret if transport == "zmq" else None
        valid = [bytes(f) for f in wire.encode({"_slot": 1}, NamedArray({"x": np.arange(3)}), secret)]
        flipped = list(valid)
        flipped[1] = bytes([valid[1][0] ^ 1]) + valid[1][1:]
        bad_messages = [
            [b"garbage"],
            [b""],
            [b"SRL1{not json", b"x"],
            [wire.MAGIC + b'{"meta":{"_slot":0},"fields":[["x","|O",[1]]]}', b"\0" * 8],
            [bytes(f) for f in wire.encode({"_slot": "zero"}, None, secret)],  # slot is not an int
            [bytes(f) for f in wire.encode({"_slot": 0}, None, secrets.token_bytes(32))],  # wrong secret
            valid[:-1] if transport == "zmq" else valid[:1],  # missing tag / missing buffer
        ]
        if transport == "zmq":
            bad_messages.append(flipped)  # any changed bit fails the tag
            bad_messages.append([bytes(f) for f in wire.encode({"_slot": 0})])  # unsigned
        for message in bad_messages:
            raw.send_multipart(message)
        # every one is dropped, none kills the server, and a valid client is still served
        client = ends(LinkClient(ctx, "inference/0", transport, "good"))
        client.send(3, {"ok": 1}, NamedArray({"x": np.arange(5)}))
        (r,) = recv_all(server, 1)
        assert (r.slot, r.meta) == (3, {"ok": 1})
        np.testing.assert_array_equal(r.arrays["x"], np.arange(5))
        deadline = time.monotonic() + 5
        while server.dropped < len(bad_messages) and time.monotonic() < deadline:
            assert server.recv(20) is None
        assert server.dropped == len(bad_messages)
        server.send(r.client, r.slot, {}, NamedArray({"a": np.ones(2)}))
        reply = client.recv(2000)
        assert reply is not None and reply.slot == 3
        # the raw socket gets nothing back
        assert not raw.poll(50)
    finally:
        raw.close(linger=0)


def test_zmq_link_rejects_shared_memory_descriptor(ctx, ends):
    server = ends(LinkServer(ctx, "inference/0", "zmq"))
    raw = raw_dealer(ctx, server.address)
    try:
        # correctly sealed, but a network peer may not point us at shared memory
        frames = sealed_for(server).encode({"_slot": 0, "_shm": [f"{ctx.shm_prefix}x_g1", 0, 64]})
        raw.send_multipart(frames)
        deadline = time.monotonic() + 5
        while server.dropped == 0 and time.monotonic() < deadline:
            assert server.recv(20) is None
        assert server.dropped == 1
        assert "shared-memory" in server.last_error
    finally:
        raw.close(linger=0)


def test_shm_link_rejects_bad_descriptors(ctx, ends):
    server = ends(LinkServer(ctx, "inference/0", "shm"))
    client = ends(LinkClient(ctx, "inference/0", "shm", "c"))
    client.send(0, {}, NamedArray({"x": np.arange(4)}))  # creates the client's segment
    (r,) = recv_all(server, 1)
    segment = client.writer.segment.name
    raw = raw_dealer(ctx, server.address)
    try:
        bad = [
            [segment, 0, 10**9],  # past the segment's end
            [segment, -64, 64],
            ["srl_other_run_x_g1", 0, 64],  # not this run's prefix
            [f"{ctx.shm_prefix}../../etc/passwd_g1", 0, 64],
            [f"{ctx.shm_prefix}missing_g1", 0, 64],  # no such segment
            [segment, 0],
            "nope",
            [segment, 0.0, 64],
        ]
        for descriptor in bad:
            raw.send_multipart(wire.encode({"_slot": 0, "_shm": descriptor}))
        deadline = time.monotonic() + 5
        while server.dropped < len(bad) and time.monotonic() < deadline:
            assert server.recv(20) is None
        assert server.dropped == len(bad), server.last_error
    finally:
        raw.close(linger=0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_inference_stream_round_trip(ctx, ends, transport):
    server = ends(InferenceServer(ctx, "inference/0", transport))
    actors = [ends(RemoteInference(ctx, "inference/0", transport, f"actor{i}")) for i in range(2)]
    for i, actor in enumerate(actors):
        for slot in range(3):
            actor.request(slot, NamedArray({"obs": {"obs": np.full((4, 3), 10 * i + slot, np.float32)}}))
    requests = []
    deadline = time.monotonic() + 5
    while len(requests) < 6 and time.monotonic() < deadline:
        requests += server.receive(50)
    assert len(requests) == 6 and server.dropped == 0
    for req in requests:
        tag = req.arrays["obs/obs"][:, 0]
        server.answer(req, NamedArray({"action": tag.astype(np.int64), "value": tag * 2}))
    for i, actor in enumerate(actors):
        got = {}
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            if (r := actor.reply(50)) is not None:
                got[r[0]] = r[1]
        assert sorted(got) == [0, 1, 2]
        for slot, reply in got.items():
            assert reply["action"].tolist() == [10 * i + slot] * 4


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_lost_request_is_asked_again_and_a_stale_reply_is_not_taken(ctx, ends, transport):
    """A request lost with its connection is re-sent on the same link; a late answer to an
    earlier request of a ring slot never passes for the answer to the slot's current one."""
    server = ends(InferenceServer(ctx, "inference/0", transport))
    actor = ends(RemoteInference(ctx, "inference/0", transport, "actor", reconnect_after_s=0.05,
                                 resend_after_s=0.3))

    def obs(tag: float) -> NamedArray:
        return NamedArray({"obs": {"obs": np.full((2, 3), tag, np.float32)}})

    def answer(request) -> None:
        server.answer(request, NamedArray({"action": request.arrays["obs/obs"][:, 0].astype(np.int64)}))

    def receive_one():
        deadline = time.monotonic() + 5
        while not (got := server.receive(50)):
            actor.reply(0)  # the client's turn: where it decides to ask again
            assert time.monotonic() < deadline, "no request arrived"
        return got[0]

    actor.request(0, obs(1))
    first = receive_one()  # received, never answered: as if lost on the way back
    again = receive_one()  # asked again once resend_after_s had passed
    assert actor.resends == 1 and again.arrays["obs/obs"][0, 0] == 1
    answer(again)
    deadline = time.monotonic() + 5
    while (got := actor.reply(50)) is None:
        assert time.monotonic() < deadline
    assert got[0] == 0 and got[1]["action"].tolist() == [1, 1]
    actor.request(0, obs(2))  # the slot's next request; then the lost one's answer arrives late
    answer(first)
    assert all(actor.reply(50) is None for _ in range(4))
    answer(receive_one())
    deadline = time.monotonic() + 5
    while (got := actor.reply(50)) is None:
        assert time.monotonic() < deadline
    assert got[1]["action"].tolist() == [2, 2]


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_parameters_newest_version_only(ctx, ends, transport, monkeypatch):
    monkeypatch.setattr(parameters, "REPUBLISH_S", 0.02)  # late joiners catch up fast in tests

    def params(version: int) -> NamedArray:
        return NamedArray({"layer": {"w": np.full((64, 64), version, np.float32), "b": np.full(64, version, np.float64)}})

    pub = ends(parameters.open_publisher(ctx, "params/policy", transport))
    sub = ends(parameters.open_subscriber(ctx, "params/policy", transport))
    assert sub.poll() is None  # nothing published yet

    def wait_for(version: int, timeout_s: float = 5.0) -> list[int]:
        """Poll (ticking the publisher) until `version` arrives; returns every version seen."""
        seen = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pub.tick()
            got = sub.poll()
            if got is not None:
                v, p, meta = got
                np.testing.assert_array_equal(p["layer/w"], np.full((64, 64), v, np.float32))
                np.testing.assert_array_equal(p["layer/b"], np.full(64, v))
                assert meta == {"step": v * 10}
                seen.append(v)
                if v == version:
                    return seen
            time.sleep(0.005)
        raise AssertionError(f"version {version} never arrived; saw {seen}")

    pub.publish(1, params(1), {"step": 10})
    assert wait_for(1) == [1]
    assert sub.poll() is None  # nothing new

    for v in range(2, 11):
        pub.publish(v, params(v), {"step": v * 10})
    time.sleep(0.1)
    seen = wait_for(10)
    assert seen == sorted(set(seen)), "versions went backwards or repeated"
    assert all(v > 1 for v in seen)
    assert len(seen) < 9, f"intermediate versions were not skipped: {seen}"

    # an older version is never delivered, however often it is (re)published
    pub.publish(4, params(4), {"step": 40})
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pub.tick()
        assert sub.poll() is None
        time.sleep(0.01)

    pub.publish(11, params(11), {"step": 110})
    assert wait_for(11) == [11]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_parameters_grow(ctx, ends, transport):
    pub = ends(parameters.open_publisher(ctx, "params", transport))
    sub = ends(parameters.open_subscriber(ctx, "params", transport))
    for version, n in ((0, 10), (1, 300_000)):  # the second no longer fits the first segment
        expected = np.arange(n, dtype=np.float32)
        pub.publish(version, NamedArray({"w": expected}))
        deadline = time.monotonic() + 5
        got = None
        while got is None or got[0] < version:
            assert time.monotonic() < deadline, "parameters never arrived"
            pub.tick() if transport == "shm" else pub.publish(version, NamedArray({"w": expected}))
            got = sub.poll() or got
            time.sleep(0.01)
        np.testing.assert_array_equal(got[1]["w"], expected)
    if transport == "shm":
        assert len([f for f in shm_files(ctx.shm_prefix + "params") if "_data_g" in f]) == 1


# ------------------------------------------------------------------ samples
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sample_stream_backpressure(ctx, ends, transport):
    consumer = ends(SampleConsumer(ctx, "samples", transport))
    producer = ends(SampleProducer(ctx, "samples", transport, "actor0", slots=2))

    def batch(i: int) -> NamedArray:
        return NamedArray({"obs": np.full((5, 3), i, np.float32), "reward": np.full(5, i, np.float64)})

    assert producer.put(batch(0), {"i": 0})
    assert producer.put(batch(1), {"i": 1})

    calls = []

    def give_up_after_three() -> bool:
        calls.append(time.monotonic())
        return len(calls) < 3

    start = time.monotonic()
    assert producer.put(batch(2), {"i": 2}, while_waiting=give_up_after_three) is False
    assert len(calls) == 3
    assert time.monotonic() - start < 5

    got = consumer.get(2000)
    assert got is not None
    meta, first = got
    assert meta == {"i": 0}
    np.testing.assert_array_equal(first["obs"], batch(0)["obs"])

    calls.clear()
    assert producer.put(batch(3), {"i": 3}, while_waiting=give_up_after_three) is True

    rest = []
    while (got := consumer.get(500)) is not None:
        rest.append(got)
    assert [m["i"] for m, _ in rest] == [1, 3]  # batch 2 was never sent: no hidden queue
    for m, b in rest:
        np.testing.assert_array_equal(b["reward"], batch(m["i"])["reward"])
    # the consumer's copy is private: later writes into the producer's slot don't change it
    assert producer.put(batch(4), {"i": 4})
    np.testing.assert_array_equal(rest[0][1]["obs"], batch(1)["obs"])
    assert consumer.get(2000)[0] == {"i": 4}
    assert consumer.dropped == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_link_waiter_wakes_for_either_side_and_times_out_when_neither_moves(ctx, ends, transport):
    # A buffer worker's idle wait: trajectories in on one link, credits back on another.
    samples_in = ends(SampleConsumer(ctx, "samples", transport))
    actor = ends(SampleProducer(ctx, "samples", transport, "actor0", slots=1))
    trainer = ends(SampleConsumer(ctx, "replay", transport))
    batches_out = ends(SampleProducer(ctx, "replay", transport, "buffer0", slots=1))
    either = LinkWaiter([batches_out.link, samples_in.link])
    start = time.monotonic()
    assert either.wait(200) is False
    assert time.monotonic() - start >= 0.15  # it slept, rather than returning at once

    assert actor.put(NamedArray({"obs": np.ones((2, 3), np.float32)}))
    assert either.wait(5000) is True  # the trajectory's side
    assert samples_in.get(0) is not None
    assert either.wait(100) is False  # nothing else is waiting

    assert batches_out.try_put(NamedArray({"obs": np.ones((4, 3), np.float32)}))
    assert not batches_out.free
    assert trainer.get(5000) is not None  # the trainer takes it: its credit comes back
    assert either.wait(5000) is True  # the credit's side
    batches_out.poll(0)
    assert batches_out.free


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_link_waiter_follows_a_client_that_reconnected_to_a_restarted_server(ctx, ends, transport):
    first = ends(LinkServer(ctx, "replay/0", transport))
    client = ends(LinkClient(ctx, "replay/0", transport, "buffer0"))
    waiter = LinkWaiter([client])
    first.close()
    second = ends(LinkServer(ctx, "replay/0", transport))  # the restarted server registers anew
    assert client.refresh()  # the client's socket is a new one now
    client.send(0, {"hello": 1})
    got = recv_all(second, 1)[0]
    second.send(got.client, 0, {"credit": 1})
    assert waiter.wait(5000) is True  # woken by the new socket, not deaf on the closed one
    assert client.recv(0).meta == {"credit": 1}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sample_stream_many_producers(ctx, ends, transport):
    consumer = ends(SampleConsumer(ctx, "samples", transport))
    producers = [ends(SampleProducer(ctx, "samples", transport, f"actor{i}", slots=2)) for i in range(3)]
    received = []
    for round_ in range(4):
        for i, p in enumerate(producers):
            # the consumer drained the last round, so a credit is (or soon is) back
            assert p.put(NamedArray({"x": np.full(8, 10 * i + round_)}), {"p": i, "r": round_},
                         while_waiting=lambda: False)
        while (got := consumer.get(100)) is not None:
            received.append(got)
    assert sorted((m["p"], m["r"]) for m, _ in received) == [(i, r) for i in range(3) for r in range(4)]
    for m, b in received:
        assert b["x"].tolist() == [10 * m["p"] + m["r"]] * 8


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_draining_consumer_drops_the_oldest_and_never_blocks_producers(ctx, ends, transport):
    from srl.streams.samples import DrainingConsumer

    consumer = ends(DrainingConsumer(SampleConsumer(ctx, "samples/0", transport), capacity=3))
    producer = ends(SampleProducer(ctx, "samples/0", transport, "actor.0", slots=1))
    for i in range(10):  # one credit only: each put needs the drain thread to have returned it
        assert producer.put(NamedArray(x=np.full(4, i)), while_waiting=lambda: True)
    deadline = time.monotonic() + 5
    while consumer.dropped_oldest < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    kept = [consumer.get(100)[1]["x"][0] for _ in range(3)]
    assert kept == [7, 8, 9] and consumer.dropped_oldest == 7
    assert consumer.get(10) is None


def test_a_socket_path_too_long_for_unix_is_one_clear_error_naming_tmpdir(tmp_path):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    ctx = StreamContext(run_id=f"t{secrets.token_hex(4)}", secret=secrets.token_bytes(32),
                        names=DirectoryNameService(tmp_path / "names"), ipc_dir=str(deep))
    with pytest.raises(OSError, match=r"stream 'control'.*longer than a Unix socket address allows.*set TMPDIR"):
        LinkServer(ctx, "control", "shm")
