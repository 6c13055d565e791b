"""Elastic actors on a three-node loopback Ray cluster: env steps/s as nodes join and die.

The env is the fake env with a fixed wait in every step (a simulator answering over the
network), so an actor's pace is set by that wait and not by a CPU: on a small machine, whose
loopback nodes all share its cores, the run's env steps/s still shows what the actors of a node
that joins add and what those of a node that dies take away. On a real cluster the new node
brings its own cores as well.

    python benchmarks/elastic_nodes.py [--window 8] [--wait-ms 2]

Phases, each measured over `--window` seconds of the run's own metrics once its actors step:
two actors of one CPU (one on each spot node of two CPUs); a fourth node joins (two actors
added on it, up to `max_actors: 4`); that node dies whole (its two actors move to the free CPU
of nodes 2 and 3).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from srl.launch.loopback_ray import loopback_ray_cluster
from srl.launch.run_dir import read_status
from srl.report.runs import read_metrics
from srl.streams import shm


def _workers(run_dir: Path) -> dict[str, dict]:
    try:
        return {w["name"]: w for w in read_status(run_dir)["workers"]}
    except (OSError, ValueError, KeyError):
        return {}


def _wait(predicate, timeout: float, what: str, process: subprocess.Popen, run_dir: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the run ended while waiting for {what}")
        if predicate():
            return
        time.sleep(0.2)
    states = ", ".join(f"{w['name']} {w['state']} on {w['host']} ({w['restarts']} restarts)"
                       for w in _workers(run_dir).values())
    raise SystemExit(f"timed out waiting for {what}: {states}")


def _rate(run_dir: Path, window: float, process: subprocess.Popen) -> float:
    """Env steps/s over the next `window` seconds, from the run's metrics lines."""
    start = time.monotonic()
    _wait(lambda: time.monotonic() - start >= window, window + 60, "the window", process, run_dir)
    rows = read_metrics(run_dir)
    last = rows[-1]
    first = next(r for r in rows if r["time_s"] >= last["time_s"] - window)
    return (last["env_steps"] - first["env_steps"]) / max(last["time_s"] - first["time_s"], 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=8.0, help="seconds measured in each phase")
    parser.add_argument("--wait-ms", type=float, default=2.0, help="the env's wait in each step")
    args = parser.parse_args()
    env = f"{{type: fake, args: {{step_sleep_s: {args.wait_ms / 1000}, episode_length: 200}}}}"
    table = []
    with tempfile.TemporaryDirectory() as tmp, \
            loopback_ray_cluster(nodes=3, worker_resources={"spot": 1}, quick_node_deaths=True) as cluster, \
            cluster.driver_environment():
        run_dir = Path(tmp) / "run"
        process = subprocess.Popen(
            [sys.executable, "-m", "srl.cli", "train", "cartpole-ppo", "--run-dir", str(run_dir), f"env={env}",
             "launcher=ray", f"ray.address={cluster.address}", "ray.elastic={min_actors: 1, max_actors: 4}",
             "actors.count=2", "actors.envs_per_slot=4", "actors.placement={num_cpus: 1, resources: {spot: 0.01}}",
             "trainers.placement.resources={node1: 0.01}", "trainers.batch_steps=1024", "stop.episode_return=null",
             "stop.time_s=900", "log.tensorboard=false", "log.progress=false"],
            cwd=tmp, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def stepping(count: int) -> bool:
                running = [w for w in _workers(run_dir).values()
                           if w["kind"] == "actor" and w["state"] == "running" and w["stats"].get("env_steps")]
                return len(running) == count

            _wait(lambda: stepping(2), 180, "two actors stepping", process, run_dir)
            time.sleep(2)
            table.append(("2 actors on nodes 2 and 3", 2, _rate(run_dir, args.window, process)))
            fourth = cluster.add_node()
            _wait(lambda: stepping(4), 120, "actors on the new node", process, run_dir)
            time.sleep(2)
            table.append((f"node {fourth} joined", 4, _rate(run_dir, args.window, process)))
            cluster.kill_node(fourth)
            _wait(lambda: stepping(4) and sum(w["restarts"] for w in _workers(run_dir).values()) == 2,
                  120, "the new node's actors placed again", process, run_dir)
            time.sleep(2)
            table.append((f"node {fourth} died, its actors moved", 4, _rate(run_dir, args.window, process)))
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=60)
            summary = json.loads((run_dir / "summary.json").read_text())
        finally:
            if process.poll() is None:  # it failed: end it, and sweep the shared memory it could not
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                with contextlib.suppress(OSError, ValueError, KeyError):
                    shm.sweep(f"{shm.PREFIX}{read_status(run_dir)['run_id']}_")
    base = table[0][2]
    print(f"env wait {args.wait_ms:g} ms a step, {args.window:g} s a phase; lost_env_steps "
          f"{summary.get('lost_env_steps', 0):,}")
    print(f"{'phase':38} {'actors':>6} {'env steps/s':>12} {'x first':>8}")
    for phase, actors, rate in table:
        print(f"{phase:38} {actors:>6} {rate:>12,.0f} {rate / base:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
