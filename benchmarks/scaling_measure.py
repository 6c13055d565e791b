"""The scaling model's measured side: component costs on this machine, and the runs that check it.

Reuses `srl bench`'s isolated measurements (one process each, so a figure is one core's or one
GPU's) and the stream benchmarks beside this file; adds the controller's CPU per heartbeat,
measured on the real `Controller` fed by clients that speak the control link. Called from
`scaling_model.py`'s CLI (`measure`, `check-cores`, `check-nodes`, `check-sweep`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import param_latency
import policy_worker
import sample_stream
from scaling_model import Costs, Host, load_costs, predict
from srl import bench, measure as isolated
from srl.api.config import load
from srl.api.worker import Supervision
from srl.launch.launcher import Launcher
from srl.launch.loopback_ray import loopback_ray_cluster
from srl.launch.run_dir import write_json_atomic

#: Batch sizes whose forward pass is timed (the acting batch is added per config).
INFERENCE_BATCHES = (8, 32, 128, 512)
#: Workers the controller supervises while its heartbeat cost is timed: the fit's two ends.
CONTROLLER_WORKERS = (100, 2000)


# ------------------------------------------------------------------------ per-config costs
def _one(target: Any, *args: Any, device: str = "cpu") -> float:
    """One process of `srl bench`'s isolated measurement `target`: one core's (or one GPU's) rate."""
    return isolated.parallel(functools.partial(target, device=device) if device != "cpu" else target,
                           lambda i: args, 1)


def experiment_costs(config_name: str, seconds: float, device: str = "cpu") -> dict[str, Any]:
    """Env, forward pass (by batch), learner, and the message sizes of one config."""
    from srl.api.components import make_policy

    config = load(config_name, [])
    data = config.model_dump(mode="json")
    obs_space, act_space, obs = isolated.policy_inputs(config, 64)
    policy = make_policy(config.policy.model_dump(), obs_space, act_space)
    T = config.actors.trajectory_length
    trajectory = isolated.trajectories(policy, obs, T, 4)
    batches = sorted({config.actors.envs_per_slot, *INFERENCE_BATCHES})
    algorithm = config.algorithm.args or {}
    figures = {
        "name": config.name, "device": device,
        "env_s": 1.0 / _one(isolated.env_rate, data["env"], config.actors.envs_per_slot, seconds, config.seed),
        "inference_s": {b: 1.0 / _one(isolated.inference_rate, data, b, seconds, device=device) for b in batches},
        "learner_s": 1.0 / _one(isolated.learner_rate, data, seconds, device=device),
        "sample_bytes": trajectory.nbytes / (T * 4),  # T + 1 rows carry T steps
        "obs_bytes": _row_bytes(obs),
        "param_bytes": float(policy.get_params().nbytes),
        "envs_per_slot": config.actors.envs_per_slot, "trajectory_length": T,
        "batch_steps": config.trainers.batch_steps,
        "updates_per_batch": int(algorithm.get("epochs", 1)) * int(algorithm.get("minibatches", 1)),
        "actors": config.actors.count, "trainer_threads": config.trainers.placement.threads,
        "inference": config.actors.inference, "ring_size": config.actors.ring_size,
        "policy_workers": config.policy_workers.count,
        "agents": _agents(config),  # the figures above are per row: one per agent an env step
    }
    print(f"{config.name} ({device}): E/core {1 / figures['env_s']:,.0f}  L/process {1 / figures['learner_s']:,.0f}  "
          "I by batch " + ", ".join(f"{b}: {1 / s:,.0f}" for b, s in figures["inference_s"].items()), flush=True)
    return figures


def _agents(config: Any) -> int:
    """Rows one env step sends the policy: the env's agents."""
    from srl.api.components import make_env

    env = make_env(config.env)
    try:
        return len(env.agent_ids)
    finally:
        env.close()


def _row_bytes(obs: Any) -> float:
    """Bytes of one observation row (of a recorded batch)."""
    rows = len(next(iter(_leaves(obs))))
    return obs.nbytes / rows


def _leaves(tree: Any) -> Iterator[np.ndarray]:
    for value in tree.values():
        yield from (_leaves(value) if hasattr(value, "values") else [value])


def _best(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The lower of two measurements of each cost: on a shared machine other work only ever slows one."""
    best = dict(new)
    for key in ("env_s", "learner_s"):
        best[key] = min(old[key], new[key])
    best["inference_s"] = {b: min(t, old["inference_s"].get(str(b), old["inference_s"].get(b, t)))
                           for b, t in new["inference_s"].items()}
    return best


# ------------------------------------------------------------------------ transports
def _line(points: list[tuple[float, float]]) -> dict[str, float]:
    """The line through (bytes, seconds) points: seconds per message and per byte (neither below 0)."""
    (b1, c1), (b2, c2) = sorted(points)[0], sorted(points)[-1]
    byte_s = max(0.0, (c2 - c1) / (b2 - b1))
    return {"message_s": max(0.0, c1 - byte_s * b1), "byte_s": byte_s}


def transport_costs(seconds: float) -> dict[str, Any]:
    """Sample stream (consumer CPU per message, two sizes), inference requests (server CPU), parameters."""
    samples, raw = {}, {}
    for transport in ("shm", "zmq"):
        points = []
        for size in ("cartpole", "pong"):
            point = sample_stream.measure(size, transport, 1, 4, seconds, 1.0, 1.0)
            nbytes = sample_stream.trajectory(size).nbytes
            points.append((nbytes, 1.0 / point["consumer_cpu_messages_per_s"]))
            raw[f"samples {transport} {size}"] = point
        samples[transport] = _line(points)
    # A request's own cost: the serving loop's CPU per observation over the stream, less the
    # forward pass's, times the rows of one request (4 requests a batch: 2 clients x ring 4 / 2).
    from srl.workers.threads import compute_threads

    compute_threads(1)  # as in every worker process
    requests = {}
    policy = policy_worker.make_policy("mlp")
    batch, per_request = 64, 16
    forward = policy_worker.forward_rate(policy, "mlp", batch, seconds, 0.5)["cpu"]
    for transport in ("shm", "zmq"):
        streamed = policy_worker.stream_rate(policy, "mlp", batch, transport, 2, 4, seconds, 0.5, 1.0)["cpu"]
        raw[f"requests {transport}"] = streamed
        message_s = max(0.0, (1.0 / streamed - 1.0 / forward) * per_request)
        # Per byte as the sample stream's (the same link code: shared memory or HMAC-tagged TCP).
        requests[transport] = {"message_s": message_s, "byte_s": samples[transport]["byte_s"]}
    raw["forward mlp 64"] = forward
    params = {t: {str(n): param_latency.measure(n, t, 3, *(("127.0.0.2", "127.0.0.3") if t == "zmq" else ("127.0.0.1",) * 2))
                  for n in (1_000_000, 10_000_000)} for t in ("shm", "zmq")}
    for name, figures in (("samples", samples), ("requests", requests)):
        for transport, cost in figures.items():
            print(f"{name} {transport}: {cost['message_s'] * 1e6:.1f} µs a message + {cost['byte_s'] * 1e9:.3f} ns a byte")
    print("parameter latency (s): " + json.dumps(params), flush=True)
    return {"samples": samples, "requests": requests, "parameter_latency_s": params, "raw": raw}


# ------------------------------------------------------------------------ controller
class _NoProcesses(Launcher):
    """A launcher that starts nothing: the controller supervises workers that only heartbeat."""

    name = "none"
    control_transport = "zmq"

    def place(self, specs): ...
    def host_of(self, worker): return "127.0.0.1"
    def start(self, spec, context): return 0
    def exitcode(self, worker): return None
    def signal(self, worker, sig): ...
    def join(self, worker, timeout): ...
    def started(self): return []
    def stop_all(self, grace_s): ...
    def close(self): ...


def _heartbeats(context: Any, names: list[str], clients: int, ready: Any, stop: Any) -> None:
    """Workers' heartbeats as fast as the controller answers: `clients` links, one heartbeat in flight each."""
    from srl.streams.link import LinkClient
    from srl.api.worker import CONTROL_KEY

    ctx = context.build()
    links = [LinkClient(ctx, CONTROL_KEY, "zmq", f"hb{i}") for i in range(clients)]
    stats = {"env_steps": 1000, "fps": 1000.0, "policy_version": 3, "episode_returns": [], "waiting_s": 0.1,
             "inference_ms": 0.2, "rejected": {}}
    sent = 0

    def beat(link: Any) -> None:
        nonlocal sent
        link.send(0, {"worker": names[sent % len(names)], "event": "heartbeat", "pid": 0, "log": [], "host": "127.0.0.1",
                      "endpoints": [], "stats": {**stats, "env_steps": 1000 + sent}, "waiting": ""})
        sent += 1

    ready.set()
    try:
        for link in links:
            beat(link)
        while not stop.is_set():
            answered = False
            for link in links:
                if link.recv(0) is not None:
                    beat(link)
                    answered = True
            if not answered:
                time.sleep(0.0002)
    finally:
        for link in links:
            link.close()


@dataclass(frozen=True)
class ControllerRun:
    """What the real controller did in a window: its CPU seconds, heartbeats answered, looks over
    every worker (supervision's check) and the CPU seconds of those looks."""

    workers: int
    cpu_s: float
    heartbeats: int
    looks: int
    looks_cpu_s: float

    @property
    def per_heartbeat(self) -> float:
        return (self.cpu_s - self.looks_cpu_s) / max(self.heartbeats, 1)

    @property
    def per_worker_look(self) -> float:
        return self.looks_cpu_s / max(self.looks * self.workers, 1)


def controller_cost(workers: int, seconds: float, clients: int = 16) -> ControllerRun:
    """The real controller's CPU, heartbeats and looks, supervising `workers` workers (TCP control link)."""
    from srl.launch.controller import Controller
    from srl.prepare import resolve_graph
    from srl.launch.supervision import WorkerState
    from srl.streams.link import LinkServer
    from srl.api.worker import CONTROL_KEY, StreamEnd, WorkerSpec

    config = load("cartpole-ppo", [f"stop.time_s={seconds}", "stop.env_steps=null", "stop.episode_return=null",
                                   "log.tensorboard=false", "log.progress=false",
                                   "supervision.heartbeat_timeout_s=1000000"])
    with tempfile.TemporaryDirectory(prefix="srl-hb-") as root:
        controller = Controller(config, resolve_graph(config), Path(root) / "run", launcher=_NoProcesses())
        controller.control = LinkServer(controller.context.build(), CONTROL_KEY, "zmq")
        names = [f"actor.{i}" for i in range(workers)]
        for i, name in enumerate(names):
            spec = WorkerSpec(name, "actor", "actor", i, workers, 0, {}, {}, StreamEnd(CONTROL_KEY, "zmq"), str(root))
            controller.supervisor.start(WorkerState(spec, Supervision(), ("env_steps", "episode_returns")))
        handled = 0
        handle = controller._handle

        def counted(message: Any) -> None:
            nonlocal handled
            handled += 1
            handle(message)

        controller._handle = counted
        looks, looks_cpu = 0, 0.0
        check = controller.supervisor.check

        def counted_look(now: float) -> Any:
            nonlocal looks, looks_cpu
            looks += 1
            started = time.thread_time()  # the look runs on the monitor's thread
            try:
                return check(now)
            finally:
                looks_cpu += time.thread_time() - started

        controller.supervisor.check = counted_look
        spawn = mp.get_context("spawn")
        ready, stop = spawn.Event(), spawn.Event()
        client = spawn.Process(target=_heartbeats, args=(controller.context, names, clients, ready, stop))
        client.start()
        try:
            if not ready.wait(120):
                raise RuntimeError("the heartbeat clients did not start within 120 s")
            controller.started = time.monotonic()
            cpu = time.process_time()
            controller._monitor()
            cpu = time.process_time() - cpu
        finally:
            stop.set()
            client.join(10)
            if client.exitcode is None:
                client.kill()
            controller.control.close()
            controller.run_dir.close()
            controller.lock.release()
            shutil.rmtree(controller.private_dir, ignore_errors=True)
    print(f"controller: {workers} workers, {handled / seconds:,.0f} heartbeats/s, {looks / seconds:,.1f} looks/s "
          f"({looks_cpu / max(looks, 1) * 1e3:.2f} ms CPU each), {(cpu - looks_cpu) / max(handled, 1) * 1e6:.1f} µs CPU "
          f"a heartbeat besides the looks", flush=True)
    return ControllerRun(workers, cpu, handled, looks, looks_cpu)


# ------------------------------------------------------------------------ `measure`
def measure(args: argparse.Namespace) -> None:
    """Measure the parts asked for into `--json`, keeping what the file already holds of the others
    (so each part can run as its own short measurement)."""
    path = Path(args.json)
    figures: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    started = time.monotonic()
    machine = figures.setdefault("machine", {})
    machine.update(cores=os.cpu_count(), affinity=sorted(os.sched_getaffinity(0)), load_average=list(os.getloadavg()))
    if "experiments" in args.parts:
        experiments = figures.setdefault("experiments", {})
        for config in args.configs:
            measured = experiment_costs(config, args.seconds, args.device)
            if args.keep_best and config in experiments:
                measured = _best(experiments[config], measured)
            experiments[config] = measured
            write_json_atomic(path, figures)  # each part kept as soon as it is measured
    if "transports" in args.parts:
        figures.update(transport_costs(args.seconds))
        write_json_atomic(path, figures)
    if "controller" in args.parts:
        runs = [controller_cost(w, args.seconds) for w in CONTROLLER_WORKERS]
        # Looks no longer follow each heartbeat, so they are timed apart rather than fitted: the
        # rest of the CPU, over the heartbeats, is a heartbeat's (the mean of the two sizes).
        figures["controller"] = {
            "heartbeat_s": sum(r.per_heartbeat for r in runs) / len(runs),
            "heartbeat_per_worker_s": sum(r.looks_cpu_s for r in runs) / sum(r.looks * r.workers for r in runs),
            "measured": {str(r.workers): {"cpu_s": r.cpu_s, "heartbeats": r.heartbeats, "looks": r.looks,
                                          "looks_cpu_s": r.looks_cpu_s, "per_heartbeat_s": r.per_heartbeat,
                                          "per_worker_look_s": r.per_worker_look} for r in runs}}
    machine[f"seconds {'+'.join(args.parts)}"] = time.monotonic() - started
    write_json_atomic(path, figures)


# ------------------------------------------------------------------------ checks
class CpuMeter(threading.Thread):
    """Cores' worth of CPU this process and its descendants (the run's workers) used in a window.

    On a shared machine a run gets what other work leaves it, so a check compares the model at
    the cores the run actually had, besides the cores it was given."""

    def __init__(self, start_after_s: float, window_s: float, others: Callable[[], list[Any]] = list) -> None:
        super().__init__(daemon=True)
        self.start_after_s, self.window_s = start_after_s, window_s
        #: More processes of the run that are not our descendants (a Ray cluster's).
        self.others = others
        self.cores = math.nan

    def _times(self) -> dict[int, float]:
        import psutil

        me = psutil.Process()
        times = {}
        for process in {p.pid: p for p in [me, *me.children(recursive=True), *self.others()]}.values():
            with contextlib.suppress(psutil.Error):
                cpu = process.cpu_times()
                times[process.pid] = cpu.user + cpu.system
        return times

    def run(self) -> None:
        time.sleep(self.start_after_s)
        before, start = self._times(), time.monotonic()
        time.sleep(self.window_s)
        after, wall = self._times(), time.monotonic() - start
        self.cores = sum(t - before.get(pid, 0.0) for pid, t in after.items()) / wall


def _rate(overrides: list[str], config: str, seconds: float, learning: bool,
          startup_s: float = bench.STARTUP_ALLOWANCE_S, others: Callable[[], list[Any]] = list) -> tuple[float, float]:
    """Steady env steps/s of a real run (sampling, or trained steps), and the cores' worth of CPU it
    used meanwhile; NaN, with the reason printed, if it gave no rate (too short a run for two
    training steps), so one point does not end a sweep."""
    data = load(config, overrides).model_dump(mode="json")
    meter = CpuMeter(startup_s + bench.WARMUP_S, max(1.0, seconds - bench.WARMUP_S - 1.0), others)
    meter.start()
    try:
        rate = bench.system_rate(data, seconds, sampling_only=not learning, startup_s=startup_s)[0]
    except RuntimeError as exc:
        print(f"{config} {' '.join(overrides)}: no rate ({exc})", file=sys.stderr, flush=True)
        rate = math.nan
    meter.join()
    return rate, meter.cores


def _report(rows: list[dict[str, Any]], path: str | None) -> None:
    print(f"{'check':<52} {'predicted':>10} {'measured':>10} {'ratio':>6} {'cores used':>10} "
          f"{'predicted at them':>17} {'ratio':>6}  bottleneck")
    for row in rows:
        print(f"{row['check']:<52} {row['predicted']:>10,.0f} {row['measured']:>10,.0f} "
              f"{row['measured'] / row['predicted']:>6.2f} {row['cores_used']:>10.2f} "
              f"{row['predicted_at_cores_used']:>17,.0f} "
              f"{row['measured'] / row['predicted_at_cores_used']:>6.2f}  {row['bottleneck']}")
    if path:
        write_json_atomic(Path(path), rows)


def _row(check: str, costs: Costs, exp: Any, layout: Host, measured: tuple[float, float]) -> dict[str, Any]:
    """A check: the model at the cores given and at the cores the run used, beside the measured rate."""
    rate, cores_used = measured
    prediction = predict(layout.resources(costs, exp))
    at_used = predict(replace(layout, cores=cores_used).resources(costs, exp)) if cores_used > 0 else prediction
    print(check, f"{rate:,.0f} env steps/s on {cores_used:.2f} cores", flush=True)
    return {"check": check, "predicted": prediction.throughput, "measured": rate, "bottleneck": prediction.bottleneck,
            "limits": prediction.limits, "cores_used": cores_used, "predicted_at_cores_used": at_used.throughput,
            "bottleneck_at_cores_used": at_used.bottleneck}


def check_cores(args: argparse.Namespace) -> None:
    """Sampling and training on core 0, then on cores 0 and 1, against the model from one core's costs."""
    costs = load_costs(args.costs)
    rows = []
    original = os.sched_getaffinity(0)
    try:
        for cpus in ({0}, {0, 1}):
            os.sched_setaffinity(0, cpus)  # every worker forked from here inherits it
            for config in args.configs:
                exp = costs.experiments[config]
                for learning in (False, True):
                    what = "training" if learning else "sampling"
                    rows.append(_row(f"{config} {what}, {len(cpus)} core(s)", costs, exp,
                                     Host(cores=len(cpus), learning=learning), _rate([], config, args.seconds, learning)))
    finally:
        os.sched_setaffinity(0, original)
    _report(rows, args.json)


def check_nodes(args: argparse.Namespace) -> None:
    """The same run with every worker on one Ray node, then with the actors on a second (loopback) node."""
    costs = load_costs(args.costs)
    rows = []
    with loopback_ray_cluster() as cluster:
        for config in args.configs:
            exp = costs.experiments[config]
            for nodes, actor_node in ((1, "node1"), (2, "node2")):
                overrides = ["launcher=ray", f"ray.address={cluster.address}", f"actors.placement.resources={{{actor_node}: 0.01}}",
                             "trainers.placement.resources={node1: 0.01}"]
                for learning in (False, True):
                    rows.append(_row(f"{config} {'training' if learning else 'sampling'}, {nodes} Ray node(s)", costs, exp,
                                     Host(cores=2, nodes=nodes, learning=learning),
                                     _rate(overrides, config, args.seconds, learning, startup_s=15.0,
                                           others=cluster.processes)))
    _report(rows, args.json)


def check_sweep(args: argparse.Namespace) -> None:
    """On a many-core (GPU) machine: inline sampling over actor counts, then Pong with its policy
    workers and trainer on the device (`--gpu-costs`), sampling over actor counts and training."""
    costs = load_costs(args.costs, args.gpu_costs)
    cores = len(os.sched_getaffinity(0))
    device = args.device
    rows = []
    for config in args.configs:
        for actors in args.actors:
            exp = replace(costs.experiments[config], actors=actors)
            rows.append(_row(f"{config} sampling, {actors} inline actors", costs, exp, Host(cores=cores, learning=False),
                             _rate([f"actors.count={actors}"], config, args.seconds, learning=False)))
    pong = "pong-ppo"
    if pong in costs.experiments:
        remote = ["actors.inference=remote", "actors.ring_size=2", f"policy_workers.device={device}",
                  f"trainers.device={device}"]
        for actors in args.actors:
            exp = replace(costs.experiments[pong], actors=actors, inference="remote", ring_size=2)
            for learning in (False, True):
                if learning and actors != args.actors[-1]:
                    continue  # training once, with the most actors
                rows.append(_row(f"{pong} {'training' if learning else 'sampling'}, {actors} actors, "
                                 f"remote inference on {device}", costs, exp,
                                 Host(cores=cores, learning=learning, device=device),
                                 _rate([*remote, f"actors.count={actors}"], pong, args.seconds, learning,
                                       startup_s=4.0 + 0.05 * 2 * exp.envs_per_slot * actors)))
    _report(rows, args.json)
