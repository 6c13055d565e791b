"""Sample stream ceiling: trajectories per second and GB/s from producers to one consumer.

Producer processes play actors: each pushes the same ready trajectory through a
`SampleProducer` (credits, `--slots` of them) as fast as credits come back. The consumer
plays the trainer: `SampleConsumer.get` takes each one, copies it out and returns the
credit. No env and no learner, so this is the stream's own ceiling. `shm` lays the
trajectory out in shared memory; `zmq` sends it over TCP loopback, tagged with the run's
HMAC. GB/s counts the trajectory's array bytes (1 GB = 1e9 bytes).

Rates come three ways: the mean over the measurement, the best `--window` within it, and
per CPU-second of the consumer process (its zmq I/O thread included): the consumer's own
ceiling on a dedicated core. On a shared machine the wall-clock figures swing with other load.

Messages are shaped like real ones, time-major [T + 1, rows, ...] with every sample key:

* `pong`: obs uint8 [129, 8, 4, 84, 84] (about 29 MB), as Atari actors with 8 rows send;
* `cartpole`: obs float32 [129, 16, 4] (about 100 KB).

    python benchmarks/sample_stream.py                        # both sizes, 1 and 2 producers
    python benchmarks/sample_stream.py --smoke --json out.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import tempfile
import time
from typing import Any
from pathlib import Path

import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.launch.run_dir import write_json_atomic
from srl.streams.samples import SampleConsumer, SampleProducer
from srl.streams.context import ContextSpec

#: name -> (T, rows, observation shape, observation dtype)
SIZES: dict[str, tuple[int, int, tuple[int, ...], type]] = {
    "pong": (128, 8, (4, 84, 84), np.uint8),
    "cartpole": (128, 16, (4,), np.float32),
}
KEY = "samples"



def trajectory(size: str) -> NamedArray:
    """A trajectory with every field an actor sends, filled with noise so nothing compresses."""
    T, rows, shape, dtype = SIZES[size]
    rng = np.random.default_rng(0)
    lead = (T + 1, rows)
    return NamedArray({
        keys.OBS: NamedArray(obs=rng.integers(0, 255, (*lead, *shape)).astype(dtype)),
        keys.ACTION: rng.integers(0, 6, lead),
        keys.LOGPROB: rng.standard_normal(lead, np.float32),
        keys.VALUE: rng.standard_normal(lead, np.float32),
        keys.REWARD: rng.standard_normal(lead, np.float32),
        keys.TERMINATED: np.zeros(lead, bool),
        keys.TRUNCATED: np.zeros(lead, bool),
        keys.VERSION: np.zeros(lead, np.int64),
        keys.ALIVE: np.ones(lead, np.float32),
    })


def _producer(run_id: str, secret: bytes, root: str, transport: str, index: int, size: str, slots: int,
              stop) -> None:
    producer = SampleProducer(ContextSpec(run_id, secret, f"{root}/names", root).build(), KEY, transport, f"producer{index}", slots)
    batch = trajectory(size)
    try:
        while not stop.is_set() and producer.put(batch, {"actor": index}, while_waiting=lambda: not stop.is_set()):
            pass
    finally:
        producer.close()


def measure(size: str, transport: str, producers: int, slots: int, seconds: float, window: float,
            warmup: float) -> dict[str, float]:
    """Trajectories received, copied and credited by one consumer: messages/s and GB/s."""
    run_id, secret = secrets.token_hex(4), secrets.token_bytes(32)
    spawn = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="srl-ss-") as root:
        consumer = SampleConsumer(ContextSpec(run_id, secret, f"{root}/names", root).build(), KEY, transport)
        stop = spawn.Event()
        procs = [spawn.Process(target=_producer, args=(run_id, secret, root, transport, i, size, slots, stop))
                 for i in range(producers)]
        for p in procs:
            p.start()
        try:
            if consumer.get(120_000) is None:
                raise RuntimeError("no trajectory arrived within 120 s")
            start = time.perf_counter()
            while time.perf_counter() - start < warmup:
                consumer.get(100)
            messages, best, start, cpu_start = 0, 0.0, time.perf_counter(), time.process_time()
            while (elapsed := time.perf_counter() - start) < seconds:
                in_window, window_start = 0, time.perf_counter()
                while (took := time.perf_counter() - window_start) < window:
                    in_window += consumer.get(100) is not None
                messages, best = messages + in_window, max(best, in_window / took)
            cpu = time.process_time() - cpu_start
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=10)
                if p.exitcode is None:
                    p.kill()
                    p.join()
            consumer.close()
    message_gb = trajectory(size).nbytes / 1e9
    rates = {"messages_per_s": messages / elapsed, "best_messages_per_s": best,
             "consumer_cpu_messages_per_s": messages / max(cpu, 1e-9)}
    return {**rates, **{k.replace("messages", "gb"): v * message_gb for k, v in rates.items()}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--transports", nargs="+", default=["shm", "zmq"])
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 2], help="producer process counts")
    parser.add_argument("--slots", type=int, default=4, help="credits per producer (the actors' sample_slots)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement per point")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=1.0, help="seconds per window for the best-window figure")
    parser.add_argument("--smoke", action="store_true", help="small messages, one producer, short runs")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.producers, args.seconds, args.window, args.warmup = ["cartpole"], [1], 0.5, 0.25, 0.2

    results: dict[str, Any] = {"load_average": list(os.getloadavg()), "slots": args.slots}
    for size in args.sizes:
        message_bytes = trajectory(size).nbytes
        figures = results.setdefault(size, {"message_bytes": message_bytes})
        for transport in args.transports:
            for producers in args.producers:
                point = measure(size, transport, producers, args.slots, args.seconds, args.window, args.warmup)
                figures.setdefault(transport, {})[str(producers)] = point
                print(f"{size:>8} ({message_bytes / 1e6:6.2f} MB) {transport:>4} {producers} producer(s): "
                      f"{point['messages_per_s']:>8,.1f} msg/s  GB/s mean {point['gb_per_s']:6.3f}"
                      f"  best {point['best_gb_per_s']:6.3f}  per consumer CPU-s {point['consumer_cpu_gb_per_s']:6.3f}",
                      flush=True)
    results["load_average_after"] = list(os.getloadavg())
    if args.json:
        write_json_atomic(Path(args.json), results)
    return results


if __name__ == "__main__":
    main()
