"""Parameter publication latency: trainer publishes, a reader in another process has it.

For each size (parameters, float32) and transport, the publisher process publishes a new
version and the subscriber process polls until it holds that version (a private copy);
latency is the time from `publish()` being called to the copy being ready, median of
`--repeats`. `zmq` runs over TCP between two loopback addresses (127.0.0.2 -> 127.0.0.3
where available), as between two nodes.

    python benchmarks/param_latency.py                       # 1M, 10M, 100M parameters
    python benchmarks/param_latency.py --sizes 100000 --repeats 3   # smoke
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from srl.data.named_array import NamedArray
from srl.launch.run_dir import write_json_atomic
from srl.streams.parameters import open_publisher, open_subscriber
from srl.streams.context import ContextSpec



def _subscriber(run_id: str, secret: bytes, root: str, host: str, transport: str, versions: int, queue) -> None:
    ctx = ContextSpec(run_id, secret, f"{root}/names", root, host).build()
    sub = open_subscriber(ctx, "params", transport)
    latencies = []
    try:
        while len(latencies) < versions:
            got = sub.poll()
            if got is None:
                time.sleep(0.0002)
                continue
            version, _, meta = got
            if version > 0:
                latencies.append(time.time() - meta["sent"])
                queue.put(("got", version))
    finally:
        sub.close()
    queue.put(("done", latencies))


def measure(size: int, transport: str, repeats: int, pub_host: str, sub_host: str) -> float:
    run_id, secret = secrets.token_hex(4), secrets.token_bytes(32)
    with tempfile.TemporaryDirectory(prefix="srl-pl-") as root:
        pub = open_publisher(ContextSpec(run_id, secret, f"{root}/names", root, pub_host).build(), "params", transport)
        params = NamedArray(w=np.random.default_rng(0).standard_normal(size).astype(np.float32))
        pub.publish(0, params, {"sent": time.time()})
        queue = mp.get_context("spawn").Queue()
        reader = mp.get_context("spawn").Process(target=_subscriber,
                                                 args=(run_id, secret, root, sub_host, transport, repeats, queue))
        reader.start()
        try:
            time.sleep(1.0 if transport == "zmq" else 0.2)  # let the subscriber connect
            for version in range(1, repeats + 1):
                pub.publish(version, params, {"sent": time.time()})
                deadline = time.monotonic() + 60
                while True:  # one version at a time: wait until the reader has it
                    if transport == "zmq":
                        pub.tick()
                    kind, value = queue.get(timeout=max(0.1, deadline - time.monotonic()))
                    if kind == "got" and value == version:
                        break
            kind, latencies = queue.get(timeout=60)
        finally:
            reader.join(timeout=10)
            if reader.exitcode is None:
                reader.kill()
            pub.close()
    return statistics.median(latencies)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000, 100_000_000])
    parser.add_argument("--transports", nargs="+", default=["shm", "zmq"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    for transport in args.transports:
        pub_host, sub_host = ("127.0.0.2", "127.0.0.3") if transport == "zmq" else ("127.0.0.1", "127.0.0.1")
        for size in args.sizes:
            latency = measure(size, transport, args.repeats, pub_host, sub_host)
            results.setdefault(transport, {})[str(size)] = latency
            print(f"{transport:>4} {size:>12,} params ({size * 4 / 1e6:8.1f} MB): {latency * 1e3:9.1f} ms", flush=True)
    if args.json:
        write_json_atomic(Path(args.json), results)
    return results


if __name__ == "__main__":
    main()
