"""Per-message HMAC-SHA256 vs per-connection CurveZMQ on 100 KB float32 messages.

Two processes (multiprocessing, "spawn"): a sender streams `srl.data.wire` frames over
ZeroMQ PUSH -> PULL on tcp://127.0.0.1 and the main process receives and decodes them.
Three measurements, one sender process for all of them:

  none   wire.encode(..., secret=None)          -> wire.decode(frames)
  hmac   wire.encode(..., secret=<32 bytes>)    -> wire.decode(frames, secret)  (tag checked)
  curve  wire.encode(..., secret=None) on sockets configured with CURVE (encrypts and
         authenticates every message; the receiver is the curve server)

plus single-process microbenchmarks of `wire.sign` on one message, and of a message's
encode + decode tagged alone against sealed as links send it (`wire.Seal` / `wire.Guard`). The per-message
overhead is 1e6 / rate(mode) - 1e6 / rate(none), in microseconds: what the authentication
adds to the slower of the two pipelined ends. Work done off that path (CURVE runs in
ZeroMQ's I/O threads) shows instead in the CPU columns: user + system time of both
processes, all threads, per message.

    python benchmarks/wire_auth.py                 # 3 s per measurement
    python benchmarks/wire_auth.py --smoke         # ~1 s in all, for tests
    python benchmarks/wire_auth.py --json out.json
    python benchmarks/wire_auth.py --rounds 1      # one slice per mode, none -> hmac -> curve

The whole run is bounded by (3 x seconds + 10) s; the sender is always joined, and
terminated (by its Process object) if it does not stop.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from typing import Any
from pathlib import Path

import numpy as np
import psutil
import zmq

from srl.data import wire
from srl.data.named_array import NamedArray
from srl.launch.run_dir import write_json_atomic

MODES = ("none", "hmac", "curve")
HWM = 8  # messages queued per socket; bounded so that a slow receiver cannot grow memory
SEND_TIMEOUT_MS = 50  # a blocked send wakes this often to look for "stop"
POLL_EVERY = 4  # the sender checks its control pipe every this many messages
SEED = 1234


def _payload(size: int) -> NamedArray:
    n = size // 4
    return NamedArray(x=np.random.default_rng(SEED).standard_normal(n, dtype=np.float32))


# ---------------------------------------------------------------------------- sender
def _sender(conn: Any, size: int) -> None:
    """Child process: for each ("run", ...) command stream messages until ("stop",).

    Each slice gets its own context, terminated before "done" is sent back: the receiver closes its end
    only once this side is fully down. (libzmq 4.3 can abort in session_base clean_pipes when the peer
    drops the connection while a closing linger-0 PUSH socket is partway through a multipart message.)
    """
    arrays = _payload(size)
    while True:
        try:
            cmd = conn.recv()
        except EOFError:  # the parent has gone
            return
        if cmd[0] == "quit":
            return
        _, mode, port, server_public, secret = cmd
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sent = 0
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, HWM)
            sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
            if mode == "curve":
                client_public, client_secret = zmq.curve_keypair()
                sock.curve_serverkey = server_public
                sock.curve_publickey = client_public
                sock.curve_secretkey = client_secret
            sock.connect(f"tcp://127.0.0.1:{port}")
            while True:
                if sent % POLL_EVERY == 0 and conn.poll():
                    break
                frames = wire.encode({"seq": sent}, arrays, secret)
                try:
                    sock.send_multipart(frames, copy=False)
                except zmq.Again:  # receiver full or gone: look at the pipe again
                    if conn.poll(SEND_TIMEOUT_MS / 1000):
                        break
                    continue
                sent += 1
        finally:
            sock.close(linger=0)
            ctx.term()
        try:
            stop = conn.recv()
        except EOFError:
            return
        if stop[0] != "stop":
            return
        conn.send(("done", sent))


# -------------------------------------------------------------------------- receiver
class _Deadline(Exception):
    pass


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _measure(ctx: zmq.Context, conn: Any, proc: Any, sender: psutil.Process, mode: str, seconds: float, warmup: float,
             deadline: float, expected: np.ndarray) -> dict[str, Any]:
    """One slice: connect a fresh socket pair in `mode`, warm up, count messages for `seconds`."""
    secret = os.urandom(32) if mode == "hmac" else None
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, HWM)
    server_public = None
    if mode == "curve":
        server_public, server_secret = zmq.curve_keypair()
        sock.curve_server = True
        sock.curve_publickey = server_public
        sock.curve_secretkey = server_secret
        assert sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
    try:
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        conn.send(("run", mode, port, server_public, secret))
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)

        def receive() -> wire.Message:
            while not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Deadline(f"{mode}: no message before the run's deadline")
                if not proc.is_alive():
                    raise RuntimeError(f"{mode}: the sender process exited (code {proc.exitcode})")
                poller.poll(min(left, 0.25) * 1000)
            return wire.decode(sock.recv_multipart(copy=False), secret)

        meta, arrays = receive()  # connection (and CURVE handshake) established
        if arrays is None or not np.array_equal(arrays["x"], expected):
            raise RuntimeError(f"{mode}: received payload differs from the one sent")
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            receive()
        count = 0
        here = psutil.Process()
        cpu0 = _cpu_s(here) + _cpu_s(sender)
        start = time.perf_counter()
        end = start + seconds
        now = start
        while now < end:
            meta, arrays = receive()
            count += 1
            now = time.perf_counter()
        elapsed = now - start
        cpu = _cpu_s(here) + _cpu_s(sender) - cpu0
        assert arrays is not None and arrays["x"].nbytes == expected.nbytes and isinstance(meta["seq"], int)
        conn.send(("stop",))
        if not conn.poll(max(0.1, min(2.0, deadline - time.monotonic()))):
            raise _Deadline(f"{mode}: sender did not acknowledge stop")
        reply = conn.recv()
    finally:
        sock.close(linger=0)
    return {"messages": count, "seconds": elapsed, "cpu_seconds": cpu, "sent": reply[1]}


def _sign_us(size: int, seconds: float) -> float:
    """Median µs per `wire.sign` call over batches, on one message's frames (header + buffer)."""
    secret = os.urandom(32)
    frames = wire.encode({"seq": 0}, _payload(size))
    wire.sign(secret, frames)
    per_call = []
    batch = 16
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(per_call) < 3:
        t0 = time.perf_counter()
        for _ in range(batch):
            wire.sign(secret, frames)
        per_call.append((time.perf_counter() - t0) / batch)
    return float(np.median(per_call)) * 1e6


def _round_trip_us(size: int, seconds: float) -> dict[str, float]:
    """Median µs to encode and decode one message in one process: tagged alone (`wire.encode`
    and `wire.decode` with the secret), and sealed as links send it (`wire.Seal` and
    `wire.Guard`: the stamp under the tag, and the size, binding and sequence checks)."""
    secret, arrays = os.urandom(32), _payload(size)
    binding = "inference:inference/0@tcp://127.0.0.1:5555>"
    seal, guard = wire.Seal(secret, binding), wire.Guard(secret, binding, 1 << 30)
    ways = {"tag_us": lambda: wire.decode(wire.encode({"seq": 0}, arrays, secret), secret),
            "seal_us": lambda: guard.decode(seal.encode({"seq": 0}, arrays))}
    per_call: dict[str, list[float]] = {name: [] for name in ways}
    batch = 16
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(per_call["seal_us"]) < 3:
        for name, way in ways.items():  # interleaved: background load hits both alike
            t0 = time.perf_counter()
            for _ in range(batch):
                way()
            per_call[name].append((time.perf_counter() - t0) / batch)
    return {name: float(np.median(times)) * 1e6 for name, times in per_call.items()}


def run(size: int, seconds: float, warmup: float, sign_seconds: float, budget: float, rounds: int = 1) -> dict[str, Any]:
    """Measure each mode for `seconds` in all, split into `rounds` interleaved slices (order rotated each
    round) so that drifting background load on the machine hits the three modes alike."""
    deadline = time.monotonic() + budget
    expected = _payload(size)["x"]
    spawn = mp.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=_sender, args=(child, size), name="wire-auth-sender", daemon=True)
    results: dict[str, Any] = {"size": int(expected.nbytes), "seconds": seconds, "rounds": rounds}
    ctx = zmq.Context()
    try:
        proc.start()
        child.close()
        sender = psutil.Process(proc.pid)
        slices: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for r in range(rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                slices[mode].append(_measure(ctx, parent, proc, sender, mode, seconds / rounds, warmup, deadline, expected))
        parent.send(("quit",))
    finally:
        proc.join(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=2)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2)
        parent.close()
        ctx.term()
    for mode, parts in slices.items():
        count = sum(p["messages"] for p in parts)
        elapsed = sum(p["seconds"] for p in parts)
        rate = count / elapsed
        results[mode] = {
            "msgs_per_s": rate,
            "gb_per_s": rate * expected.nbytes / 1e9,
            "messages": count,
            "seconds": elapsed,
            # CPU time of both processes, all threads (ZeroMQ's I/O threads included), per message
            "cpu_us_per_msg": sum(p["cpu_seconds"] for p in parts) / count * 1e6,
            "slice_msgs_per_s": [p["messages"] / p["seconds"] for p in parts],
        }
    base_us = 1e6 / results["none"]["msgs_per_s"]
    for mode in ("hmac", "curve"):
        results[mode]["overhead_us"] = 1e6 / results[mode]["msgs_per_s"] - base_us
        results[mode]["cpu_overhead_us"] = results[mode]["cpu_us_per_msg"] - results["none"]["cpu_us_per_msg"]
    results["sign_us"] = _sign_us(size, sign_seconds)
    results.update(_round_trip_us(size, sign_seconds))
    return results


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"wire_auth: {r['size']} B float32 messages, ZeroMQ PUSH->PULL tcp://127.0.0.1, 2 processes, "
        f"{r['seconds']:g} s per measurement in {r['rounds']} interleaved slices, {psutil.cpu_count()} CPUs",
        f"{'mode':<7}{'msgs/s':>10}{'GB/s':>8}{'us/msg':>9}{'overhead us':>13}{'cpu us/msg':>12}{'cpu overhead':>14}",
    ]
    for mode in MODES:
        m = r[mode]
        overhead = f"{m['overhead_us']:+.1f}" if "overhead_us" in m else "-"
        cpu_overhead = f"{m['cpu_overhead_us']:+.1f}" if "cpu_overhead_us" in m else "-"
        lines.append(f"{mode:<7}{m['msgs_per_s']:>10.0f}{m['gb_per_s']:>8.3f}{1e6 / m['msgs_per_s']:>9.1f}{overhead:>13}"
                     f"{m['cpu_us_per_msg']:>12.1f}{cpu_overhead:>14}")
    lines.append(f"wire.sign on one message: {r['sign_us']:.1f} us/call")
    lines.append(f"encode + decode, one process: tagged {r['tag_us']:.1f} us, sealed (stamp, binding, sequence) "
                 f"{r['seal_us']:.1f} us")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    ap.add_argument("--size", type=int, default=100_000, help="message bytes, float32 (default 100000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved slices per measurement (default 3)")
    ap.add_argument("--smoke", action="store_true", help="a ~1 s run in all (for tests)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.size < 4:
        ap.error("--size must be at least 4 bytes (one float32)")
    if args.seconds <= 0:
        ap.error("--seconds must be positive")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    seconds = 0.15 if args.smoke else args.seconds
    rounds = 1 if args.smoke else args.rounds
    warmup = 0.05 if args.smoke else min(0.2, 0.1 * seconds / rounds)
    sign_seconds = 0.05 if args.smoke else min(0.5, 0.1 * seconds)
    # Deadline for the measurements (warm-ups and connection set-ups included): leaves time to sign and to stop
    # the sender within 3 x seconds + 10.
    budget = 3 * seconds + 8 - sign_seconds
    if __name__ != "__main__":  # imported (say by a test): let the spawned child import this module by name
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.append(here)
    results = run(args.size, seconds, warmup, sign_seconds, budget, rounds)
    print(format_table(results), flush=True)
    if args.json:
        write_json_atomic(Path(args.json), results)
    return results


if __name__ == "__main__":
    try:
        main()
    except _Deadline as exc:
        sys.exit(f"wire_auth: {exc}")
