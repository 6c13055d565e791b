"""Policy worker ceiling: observations answered per second, through the real inference path.

One process runs the policy worker's serving loop (one torch thread): drain the waiting
requests, concatenate them, `serve(policy, batch)`, answer each request with its rows, as
`PolicyWorker.poll` does. Client processes play actors with an env ring: each keeps `--ring`
requests in flight through `RemoteInference` and asks again the moment a reply arrives (no
env, so the clients cost as little as they can). Twice a batch's worth of requests is in
flight, so the clients refill one batch while the server computes the other; the server
waits until it holds one full batch, so every forward pass has the batch size asked for.

For each model and batch size this reports observations/s over `shm` and `zmq`, and the
forward pass alone (`serve` on a ready batch, no streams) so the stream overhead shows.
Each figure comes three ways: `mean` over the measurement, the `best` `--window` within it,
and `cpu`, observations per CPU-second of the serving process (its zmq I/O thread
included), which is what one dedicated core would serve. On a shared machine the wall-clock
figures swing with other load, and a process that never sleeps (the forward pass alone)
gets a smaller share of a contended core than one that waits on sockets, so compare the
`cpu` figures to see what the streams cost.

    python benchmarks/policy_worker.py                                  # MLP and Nature CNN
    python benchmarks/policy_worker.py --smoke --json out.json          # a few seconds
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

import gymnasium as gym
import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray, concat
from srl.launch.run_dir import write_json_atomic
from srl.streams import shm
from srl.streams.inference import InferenceServer, RemoteInference, serve
from srl.streams.context import ContextSpec

#: name -> (observation shape, dtype, number of actions, policy args)
MODELS: dict[str, tuple[tuple[int, ...], type, int, dict[str, Any]]] = {
    "mlp": ((4,), np.float32, 2, {"hidden": [64, 64]}),
    "cnn": ((4, 84, 84), np.uint8, 6, {"encoder": "nature_cnn", "share_encoder": True, "hidden": []}),
}
DEFAULT_BATCHES = {"mlp": [16, 64, 256, 1024], "cnn": [8, 32, 128]}
KEY = "inference"



def _observations(model: str, rows: int) -> NamedArray:
    shape, dtype, _, _ = MODELS[model]
    data = np.random.default_rng(0).integers(0, 255, (rows, *shape)).astype(dtype)
    return NamedArray({keys.OBS: NamedArray(obs=data)})


def _client(run_id: str, secret: bytes, root: str, transport: str, index: int, model: str, ring: int, rows: int,
            stop) -> None:
    """An actor without envs: re-request a slot as soon as its reply is in."""
    inference = RemoteInference(ContextSpec(run_id, secret, f"{root}/names", root).build(), KEY, transport, f"client{index}")
    requests = [_observations(model, rows) for _ in range(ring)]
    try:
        for slot, request in enumerate(requests):
            inference.request(slot, request)
        while not stop.is_set():
            got = inference.reply(100)
            if got is not None:
                inference.request(got[0], requests[got[0]])
    finally:
        inference.close()


def make_policy(model: str):
    from srl.models.actor_critic import ActorCriticPolicy

    shape, dtype, actions, args = MODELS[model]
    low, high = (0, 255) if dtype == np.uint8 else (-np.inf, np.inf)
    space = gym.spaces.Dict({"obs": gym.spaces.Box(low, high, shape, dtype)})
    return ActorCriticPolicy(space, gym.spaces.Discrete(actions), **args)


def windowed(step: Callable[[], int], seconds: float, window: float) -> dict[str, float]:
    """Calls `step` (which returns observations done) for `seconds`: rates per wall second and per CPU second."""
    total, best, start, cpu_start = 0, 0.0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - start) < seconds:
        done, window_start = 0, time.perf_counter()
        while (took := time.perf_counter() - window_start) < window:
            done += step()
        total, best = total + done, max(best, done / took)
    return {"mean": total / elapsed, "best": best, "cpu": total / max(time.process_time() - cpu_start, 1e-9)}


def forward_rate(policy, model: str, batch: int, seconds: float, window: float) -> dict[str, float]:
    """Observations/s of `serve` alone on a ready batch."""
    request = _observations(model, batch)
    serve(policy, request)

    def step() -> int:
        serve(policy, request)
        return batch

    return windowed(step, seconds, window)


def _serve_batch(server: InferenceServer, policy, per_batch: int) -> int:
    """One turn of the policy worker's loop, waiting (while requests keep coming) until `per_batch` are in.

    Returns the rows answered."""
    requests = server.receive(100, per_batch)
    while requests and len(requests) < per_batch and (more := server.receive(100, per_batch - len(requests))):
        requests += more
    if not requests:
        return 0
    sizes = [len(r.arrays[keys.OBS]) for r in requests]
    out = serve(policy, concat([r.arrays for r in requests]))
    start = 0
    for request, size in zip(requests, sizes):
        server.answer(request, out[start:start + size])
        start += size
    return start


def stream_rate(policy, model: str, batch: int, transport: str, clients: int, ring: int, seconds: float,
                window: float, warmup: float) -> dict[str, float]:
    """Observations/s of the serving loop fed by `clients` processes over `transport`, and its mean batch."""
    in_flight = clients * ring
    per_batch = max(1, in_flight // 2)
    rows = max(1, batch // per_batch)
    run_id, secret = secrets.token_hex(4), secrets.token_bytes(32)
    spawn = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="srl-pw-") as root:
        server = InferenceServer(ContextSpec(run_id, secret, f"{root}/names", root).build(), KEY, transport)
        stop = spawn.Event()
        procs = [spawn.Process(target=_client, args=(run_id, secret, root, transport, i, model, ring, rows, stop))
                 for i in range(clients)]
        for p in procs:
            p.start()
        try:
            deadline = time.monotonic() + 120
            while _serve_batch(server, policy, per_batch) == 0:  # clients are still starting
                if time.monotonic() > deadline:
                    raise RuntimeError("no client connected within 120 s")
            start = time.perf_counter()
            while time.perf_counter() - start < warmup:
                _serve_batch(server, policy, per_batch)
            served: list[int] = []

            def step() -> int:
                served.append(_serve_batch(server, policy, per_batch))
                return served[-1]

            figures = windowed(step, seconds, window)
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=10)
                if p.exitcode is None:
                    p.kill()
                    p.join()
            server.close()
            shm.sweep(f"{shm.PREFIX}{run_id}_")  # whatever a killed client left behind
    return {**figures, "mean_batch": sum(served) / max(len(served), 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes for every model (default: per model)")
    parser.add_argument("--transports", nargs="+", default=["shm", "zmq"])
    parser.add_argument("--clients", type=int, default=2, help="client processes (actors)")
    parser.add_argument("--ring", type=int, default=4, help="requests each client keeps in flight")
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement per point")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=0.5, help="seconds per window for the best-window figure")
    parser.add_argument("--smoke", action="store_true", help="one small batch per model, short runs")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.seconds, args.window, args.warmup = args.batches or [16], 0.5, 0.25, 0.2

    from srl.workers.threads import compute_threads

    compute_threads(1)  # as in every worker process
    results: dict[str, Any] = {"load_average": list(os.getloadavg()), "clients": args.clients, "ring": args.ring}
    for model in args.models:
        policy = make_policy(model)
        figures = results.setdefault(model, {})
        for batch in args.batches or DEFAULT_BATCHES[model]:
            point = {"forward": forward_rate(policy, model, batch, args.seconds, args.window)}
            for transport in args.transports:
                point[transport] = stream_rate(policy, model, batch, transport, args.clients, args.ring,
                                               args.seconds, args.window, args.warmup)
            for mode, rates in point.items():
                figures.setdefault(mode, {})[str(batch)] = rates
            print(f"{model} batch {batch:>5} obs/s (best window / mean / per CPU-s):",
                  "  ".join(f"{m} {r['best']:>8,.0f} / {r['mean']:>8,.0f} / {r['cpu']:>8,.0f}" for m, r in point.items()),
                  flush=True)
    results["load_average_after"] = list(os.getloadavg())
    if args.json:
        write_json_atomic(Path(args.json), results)
    return results


if __name__ == "__main__":
    main()
