"""Fan-in harness: thousands of simulated actors against the real policy workers, trainer and controller.

The controller is the real `Controller`, running the real graph of `cartpole-ppo` with remote
inference, the `noop` algorithm, a `random` policy and the `fake` env: real policy workers
answer inference requests, a real trainer takes trajectories and returns credits, and the
controller supervises every actor through the control link (heartbeats, restarts, stop).
Only the actor group's kind is replaced, by `SimulatedActor`: the real `ActorWorker` (its env
ring, inference client, sample producer and worker shell, heartbeats included) whose env step
costs `step_ms` of *waiting* rather than CPU, as if each actor had a core of its own.
`FanInLauncher` (the local launcher otherwise) runs them in `--client-procs` processes, each
driving its share on one event loop, so 10,000 actors fit on two cores. Names are looked up
in the run's name service as every worker does.

Each point runs the controller in a process of its own and, once the servers are up, lets the
clients start; after a warm-up it measures for `--seconds`, then drains (no new requests;
every one sent must be answered) and stops the run with SIGTERM, as Ctrl-C would. Reported:

- descriptors held by the controller, each policy worker and the trainer (one per connected
  client and its shared-memory mapping aside);
- memory per client on each server: (RSS at the end of the window - RSS before the clients
  started) / clients (the controller's baseline is taken before it built anything);
- inference latency p50/p99 (request sent to reply read, by the clients, in the window) and
  the controller's heartbeat answer latency p50/p99;
- the trainer's ingest rate (trajectories and env steps credited back per second);
- the controller's CPU over the window, as a fraction of one core (`psutil`, all its threads);
- lost requests (sent and never answered after the drain; must be 0) and lost trajectories
  (never credited back), workers restarted, the run's stop reason, and anything else that broke.

    python -m benchmarks.fanin --clients 100 1000 10000 --json fanin.json
    python -m benchmarks.fanin --clients 1000 --kill 1      # and restart one simulated actor mid-run

Run it from the repository root (the controller finds the kind as `benchmarks.fanin:SimulatedActor`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import zmq

from srl.api.agents import DEFAULT_POLICY
from srl.launch.local import LocalLauncher
from srl.workers.actor import ActorWorker
from srl.workers.base import CONTROL_CHECK_S
from srl.streams.context import ContextSpec
from srl.api.worker import WorkerSpec

SIM_GROUP = "actor"
KIND = "benchmarks.fanin:SimulatedActor"
#: Files in `<run dir>/fanin/` by which the harness moves the clients from phase to phase.
GO, MEASURE, DRAIN, KILL = "go", "measure", "drain", "kill-"
#: Seconds the clients give the servers to answer what is in flight once they stop asking.
DRAIN_S = 20.0


class Readiness:
    """Wakes one coroutine when a ZeroMQ socket has a message.

    A socket's `zmq.FD` only signals that its events may have changed; reading `zmq.EVENTS`
    resets it, so the callback always reads them, and `wait` looks at them first (a message
    that came while nobody waited stays in the socket).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, socket: zmq.Socket) -> None:
        self.loop, self.socket = loop, socket
        self.fd = socket.getsockopt(zmq.FD)
        self.waiter: asyncio.Future | None = None
        loop.add_reader(self.fd, self._changed)

    def _readable(self) -> bool:
        return bool(self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def _changed(self) -> None:
        if self._readable() and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)

    async def wait(self, timeout_s: float) -> bool:
        if self._readable():
            return True
        self.waiter = waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout_s, lambda: waiter.done() or waiter.set_result(False))
        try:
            return await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def close(self) -> None:
        self.loop.remove_reader(self.fd)


class SimulatedActor(ActorWorker):
    """The real actor, driven by `drive()` on an event loop it shares with many others.

    Its env is the `fake` env; each env step also waits `step_ms` (the group setting), which
    costs the process nothing: the client stands for an actor on a core of its own.
    """

    async def drive(self, clients: Clients) -> int:
        self.connect()
        self.setup()
        self.heartbeat(force=True)
        # One policy: its one inference client and sample producer, driven here directly.
        self.remote = self.inference.clients[DEFAULT_POLICY]
        self.producer = self.samples.producers[DEFAULT_POLICY]
        loop = asyncio.get_running_loop()
        self.ready = [Readiness(loop, link.socket) for link in (self._control, self.remote.link, self.producer.link)]
        acting = asyncio.ensure_future(self._act(clients))
        try:
            await self._beat(clients)
        finally:
            acting.cancel()
            for ready in self.ready:
                ready.close()
        self.say_goodbye(0)
        await asyncio.sleep(0.05)  # let the goodbye leave before the socket closes
        self._control.close()
        return 0

    def kill(self) -> None:
        """Die as a SIGKILL would end an actor: no teardown message, the sockets simply close."""
        for ready in getattr(self, "ready", []):
            ready.close()
        for closable in (self.inference, self.samples, self._control):
            closable.close()

    async def _beat(self, clients: Clients) -> None:
        """The worker shell's heartbeats; an answer (or a stop) wakes it at once."""
        control = self.ready[0]
        while True:
            asked = self._unanswered_since
            if not self.heartbeat():
                return
            if asked is not None and self._unanswered_since is None:
                clients.heartbeat_answered(time.monotonic() - asked)
            await asyncio.sleep(CONTROL_CHECK_S)  # the shell looks at most this often
            await control.wait(self.heartbeat_s)

    async def _act(self, clients: Clients) -> None:
        step_s = float(self.spec.settings.get("step_ms", 0.0)) / 1000
        inference, samples = self.ready[1], self.ready[2]
        while True:
            if not await inference.wait(1.0):
                continue
            while (got := self.remote.reply(0)) is not None:
                slot, reply = got
                clients.answered(time.monotonic() - self.remote.sent_at[slot])
                await asyncio.sleep(step_s)  # the env's step
                requests, trajectories = self.ring.step(slot, {DEFAULT_POLICY: reply})
                if trajectories is not None:
                    self.waiting_on = "samples"
                    while not self.producer.try_put(trajectories[DEFAULT_POLICY], {"actor": self.name}):
                        await samples.wait(0.1)
                    self.waiting_on = ""
                    self.trajectories += 1
                    clients.sent_trajectory()
                if clients.draining:
                    return
                self.remote.request(slot, requests[DEFAULT_POLICY])
                clients.requests += 1


class Clients:
    """One client process: starts the simulated actors the launcher sends, counts what they see."""

    def __init__(self, pipe: Any, context: ContextSpec, run_dir: str) -> None:
        self.pipe = pipe
        self.flags = Path(run_dir) / "fanin"
        # Three sockets per client; the default context allows 1,023.
        zmq.Context.instance().set(zmq.MAX_SOCKETS, 1 << 17)
        self.ctx = context.build()
        self.actors: dict[str, SimulatedActor] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.waiting: list[WorkerSpec] = []
        self.go = self.measuring = self.draining = False
        self.requests = 0
        self.latencies: list[float] = []
        self.heartbeat_latencies: list[float] = []
        #: How late the loop wakes a sleeper: the part of every latency above that is the clients' own.
        self.loop_lags: list[float] = []
        self.trajectories = 0
        self.errors: list[str] = []
        self.done = asyncio.Event()

    def answered(self, seconds: float) -> None:
        if self.measuring:
            self.latencies.append(seconds)

    def heartbeat_answered(self, seconds: float) -> None:
        if self.measuring:
            self.heartbeat_latencies.append(seconds)

    def sent_trajectory(self) -> None:
        if self.measuring:
            self.trajectories += 1

    def _command(self) -> None:
        while self.pipe.poll():
            try:
                command, *args = self.pipe.recv()
            except EOFError:  # the launcher is gone
                self.done.set()
                return
            if command == "start":
                self.waiting.append(args[0])
                if self.go:
                    asyncio.ensure_future(self._start_waiting())
            elif command == "signal" and args[1] == signal.SIGKILL:
                self._kill(args[0])

    def _kill(self, name: str) -> None:
        if name in self.actors:
            self.tasks.pop(name).cancel()
            self.actors.pop(name).kill()
            self.pipe.send((name, -signal.SIGKILL))

    async def _start_waiting(self) -> None:
        specs, self.waiting = self.waiting, []
        for spec in specs:
            actor = self.actors[spec.name] = SimulatedActor(spec, self.ctx)
            task = self.tasks[spec.name] = asyncio.ensure_future(actor.drive(self))
            task.add_done_callback(lambda t, name=spec.name: self._ended(name, t))
            # Its set-up runs now, between the others' messages: set-ups back to back would
            # hold the loop for seconds, and the first actors would take their controller for gone.
            await asyncio.sleep(0)

    def _ended(self, name: str, task: asyncio.Task) -> None:
        if task.cancelled() or self.tasks.get(name) is not task:
            return
        code = 0
        if task.exception() is not None:
            code = 1
            self.errors.append(f"{name}: {task.exception()!r}"[:300])
        del self.tasks[name], self.actors[name]
        self.pipe.send((name, code))

    async def _phases(self) -> None:
        while not self.done.is_set():
            if not self.go and (self.flags / GO).exists():
                self.go = True
                await self._start_waiting()
            self.measuring = (self.flags / MEASURE).exists() and not self.draining
            for victim in self.flags.glob(f"{KILL}*"):  # the harness kills one of ours as SIGKILL would
                name = victim.name.removeprefix(KILL)
                if name in self.actors:
                    self._kill(name)
                    victim.unlink()
            if not self.draining and (self.flags / DRAIN).exists():
                self.draining, self.measuring = True, False
                await self._drain()
            await asyncio.sleep(0.2)

    async def _lag(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(0.05)
            if self.measuring:
                self.loop_lags.append(time.monotonic() - asked - 0.05)

    async def _drain(self) -> None:
        """Ask nothing more; wait until every request sent is answered (or `DRAIN_S`), then report."""
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and any(a.remote.pending for a in self.actors.values()):
            await asyncio.sleep(0.1)
        for actor in self.actors.values():
            actor.samples.poll(0)  # take the credits that came back
        report = {"pid": os.getpid(), "actors": len(self.actors), "requests": self.requests,
                  "lost_requests": sum(len(a.remote.pending) for a in self.actors.values()),
                  "lost_trajectories": sum(a.samples.in_flight for a in self.actors.values()),
                  "trajectories": self.trajectories, "errors": self.errors,
                  "latencies": self.latencies, "heartbeat_latencies": self.heartbeat_latencies,
                  "loop_lags": self.loop_lags}
        (self.flags / f"clients-{os.getpid()}.json").write_text(json.dumps(report))

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.pipe.fileno(), self._command)
        loop.add_signal_handler(signal.SIGTERM, self.done.set)
        background = [asyncio.ensure_future(self._phases()), asyncio.ensure_future(self._lag())]
        await self.done.wait()
        for task in background:
            task.cancel()


def serve_clients(pipe: Any, context: ContextSpec, run_dir: str) -> None:
    """A client process's entry (forked by the launcher's fork server). It runs at nice 0, unlike
    the actors it stands for (docs/fanin.md: at nice 10, 10,000 did not start in 150 s)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller alone decides how to stop
    asyncio.run(Clients(pipe, context, run_dir).serve())


class FanInLauncher(LocalLauncher):
    """The local launcher, except that the simulated actors share `procs` client processes."""

    def __init__(self, procs: int) -> None:
        super().__init__()
        self.procs = procs
        self.pipes: list[Any] = []
        #: Simulated actor -> its client process; and its exit code (None: running).
        self.sims: dict[str, int] = {}
        self.exits: dict[str, int | None] = {}
        self._collected = 0.0

    def start(self, spec: WorkerSpec, context: ContextSpec) -> int:
        if spec.group != SIM_GROUP:
            return super().start(spec, context)
        if not self.pipes:
            for k in range(self.procs):
                ours, theirs = self._mp.Pipe()
                process = self._mp.Process(target=serve_clients, args=(theirs, context, spec.run_dir),
                                           name=f"clients.{k}")
                process.start()
                theirs.close()
                self.processes[f"clients.{k}"] = process
                self.pipes.append(ours)
        k = self.sims[spec.name] = spec.index % self.procs
        self.exits[spec.name] = None
        self.pipes[k].send(("start", spec))
        return self.processes[f"clients.{k}"].pid or 0

    def _collect(self) -> None:
        if time.monotonic() - self._collected < 0.01:  # the supervisor asks once per worker
            return
        self._collected = time.monotonic()
        for pipe in self.pipes:
            while pipe.poll():
                name, code = pipe.recv()
                self.exits[name] = code

    def exitcode(self, worker: str) -> int | None:
        if worker not in self.sims:
            return super().exitcode(worker)
        self._collect()
        code = self.exits[worker]
        return code if code is not None else super().exitcode(f"clients.{self.sims[worker]}")

    def signal(self, worker: str, sig: int) -> None:
        if worker not in self.sims:
            return super().signal(worker, sig)
        if self.exitcode(worker) is None:
            self.pipes[self.sims[worker]].send(("signal", worker, sig))

    def join(self, worker: str, timeout: float) -> None:
        if worker not in self.sims:
            return super().join(worker, timeout)
        deadline = time.monotonic() + timeout
        while self.exitcode(worker) is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def started(self) -> list[str]:
        return [*self.sims, *self.processes]

    def close(self) -> None:
        super().close()
        for pipe in self.pipes:
            pipe.close()


# ---------------------------------------------------------------------------------------- harness
def overrides(args: argparse.Namespace, clients: int) -> list[str]:
    return [f"actors.count={clients}", "actors.inference=remote", "actors.ring_size=1",
            f"actors.envs_per_slot={args.envs}", f"actors.trajectory_length={args.trajectory}",
            f"policy_workers.count={args.policy_workers}", f"trainers.batch_steps={args.envs * args.trajectory}",
            "env={type: fake, args: {episode_length: 200}}", "policy={type: random}", "algorithm={type: noop}",
            "stop.episode_return=null", "stop.env_steps=null", "stop.time_s=3600",
            "log.progress=false", "log.tensorboard=false", f"workers.actor.kind={KIND}",
            f"workers.actor.settings.step_ms={args.step_ms}", *args.override]


def run_controller(args: argparse.Namespace) -> None:
    """The controller's process: the real `Controller`, with `FanInLauncher`."""
    from srl.api.config import load
    from srl.launch.controller import Controller
    from srl.prepare import resolve_graph

    run_dir = Path(args.run_dir)
    config = load("cartpole-ppo", overrides(args, args.clients[0]))
    controller = Controller(config, resolve_graph(config), run_dir, launcher=FanInLauncher(args.client_procs))
    (run_dir / "fanin" / "rss_before").write_text(str(psutil.Process().memory_info().rss))
    controller.run()


def _status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _servers(status: dict[str, Any]) -> dict[str, int]:
    return {w["name"]: w["pid"] for w in status.get("workers", []) if w["group"] != SIM_GROUP and w["pid"]}


def _rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    p50, p99 = np.percentile(np.asarray(values) * 1000, [50, 99])
    return {"p50_ms": round(float(p50), 2), "p99_ms": round(float(p99), 2)}


def run_point(args: argparse.Namespace, clients: int) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="srl-fanin-"))
    flags = run_dir / "fanin"
    command = [sys.executable, "-m", "benchmarks.fanin", "--controller", "--run-dir", str(run_dir),
               "--clients", str(clients), "--client-procs", str(args.client_procs),
               *(f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                 ("policy_workers", "envs", "trajectory", "step_ms")),
               *(f"--override={o}" for o in args.override)]
    started = time.monotonic()
    flags.mkdir(parents=True)
    log = open(flags / "controller.log", "w")
    controller = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    broke: list[str] = []
    result: dict[str, Any] = {"clients": clients, "client_procs": args.client_procs,
                              "policy_workers": args.policy_workers, "step_ms": args.step_ms, "envs": args.envs,
                              "trajectory": args.trajectory}

    def wait_for(predicate, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and controller.poll() is None:
            if value := predicate():
                return value
            time.sleep(0.5)
        return None

    stderr = ""
    try:
        servers = wait_for(lambda: (s := _status(run_dir)) and all(
            w["state"] == "running" for w in s["workers"] if w["group"] != SIM_GROUP) and _servers(s), 120)
        if not servers:
            raise RuntimeError("the servers did not start")
        pids = {"controller": controller.pid, **servers}
        before = {name: _rss(pid) for name, pid in pids.items()}
        before["controller"] = int((flags / "rss_before").read_text())
        (flags / GO).touch()
        running = wait_for(lambda: sum(w["state"] == "running" for w in _status(run_dir).get("workers", [])
                                       if w["group"] == SIM_GROUP) >= clients or None, args.start_timeout)
        result["start_s"] = round(time.monotonic() - started, 1)
        if not running:
            s = _status(run_dir)
            up = sum(w["state"] == "running" for w in s.get("workers", []) if w["group"] == SIM_GROUP)
            broke.append(f"only {up} of {clients} clients running after {args.start_timeout:.0f} s")
        time.sleep(args.warmup)
        victim = None
        if args.kill:
            sims = [w for w in _status(run_dir)["workers"] if w["group"] == SIM_GROUP and w["state"] == "running"]
            victim = sims[len(sims) // 2]["name"]
        (flags / MEASURE).touch()
        sims = {w["pid"] for w in _status(run_dir)["workers"] if w["group"] == SIM_GROUP and w["pid"]}
        processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        processes.update({f"clients.{k}": psutil.Process(pid) for k, pid in enumerate(sorted(sims))})
        cpu0 = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
        t0 = time.monotonic()
        if victim:
            (flags / f"{KILL}{victim}").touch()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        cpu = {name: round((sum(p.cpu_times()[:2]) - cpu0[name]) / wall, 3) for name, p in processes.items()}
        after = {name: _rss(pid) for name, pid in pids.items()}
        fds = {name: p.num_fds() for name, p in processes.items() if name in pids}
        (flags / DRAIN).touch()
        reports = wait_for(lambda: (r := list(flags.glob("clients-*.json"))) and len(r) >= args.client_procs and r,
                           DRAIN_S + 30) or []
        reports = [json.loads(p.read_text()) for p in reports]
        status = _status(run_dir)
        result.update({
            "cpu_cores": cpu, "controller_cpu": cpu["controller"], "fds": fds,
            "rss_mb": {name: round(after[name] / 2**20, 1) for name in pids},
            "rss_per_client_kb": {name: round((after[name] - before[name]) / clients / 1024, 1) for name in pids},
            "inference": _percentiles([x for r in reports for x in r["latencies"]]),
            "heartbeat_answer": _percentiles([x for r in reports for x in r["heartbeat_latencies"]]),
            "client_loop_lag": _percentiles([x for r in reports for x in r["loop_lags"]]),
            "requests_per_s": round(sum(len(r["latencies"]) for r in reports) / wall, 1),
            "ingest_trajectories_per_s": round(sum(r["trajectories"] for r in reports) / wall, 1),
            "ingest_env_steps_per_s": round(sum(r["trajectories"] for r in reports) / wall
                                            * args.envs * args.trajectory, 1),
            "lost_requests": sum(r["lost_requests"] for r in reports),
            "lost_trajectories": sum(r["lost_trajectories"] for r in reports),
            "client_errors": [e for r in reports for e in r["errors"]][:5],
            "restarts": sum(w["restarts"] for w in status.get("workers", [])),
            "rejected": sum(sum((w.get("rejected") or {}).values()) for w in status.get("workers", [])),
        })
        if victim:
            row = next(w for w in status["workers"] if w["name"] == victim)
            result["killed"] = {"name": victim, "restarts": row["restarts"], "state": row["state"]}
        if len(reports) < args.client_procs:
            broke.append(f"{args.client_procs - len(reports)} client processes did not report after draining")
    except Exception as exc:  # what broke is the measurement
        broke.append(f"{type(exc).__name__}: {exc}")
    finally:
        stop_started = time.monotonic()
        if controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
        try:
            controller.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait()
            broke.append("the controller did not stop within 120 s")
        result["stop_s"] = round(time.monotonic() - stop_started, 1)
        log.close()
        stderr = (flags / "controller.log").read_text()
        restarted = [line.split("restarting ", 1)[1] for line in stderr.splitlines() if "restarting " in line]
        if restarted and not args.kill:
            broke.append(f"{len(restarted)} workers restarted, first: {restarted[0]}")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        result["stop_reason"] = summary["stop_reason"]
        if summary["stop_reason"] != "interrupted":
            broke.append(f"the run stopped by itself: {summary['stop_reason']}")
        if summary.get("errors"):
            broke.append(f"errors: {str(summary['errors'])[:300]}")
    except (OSError, ValueError, KeyError):
        broke.append(f"no summary; the controller said: {stderr[-500:]}")
    run_id = _status(run_dir).get("run_id", "?")
    left = list(Path("/dev/shm").glob(f"srl_{run_id}_*"))
    if left:
        broke.append(f"{len(left)} shared-memory segments left")
    if result.get("lost_requests"):
        broke.append(f"{result['lost_requests']} requests lost")
    result["broke"] = broke
    result["run_dir"] = str(run_dir)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| clients | client procs | fds: controller / policy / trainer | RSS per client, KB: controller / "
             "policy / trainer | inference p50 / p99, ms | heartbeat answer p50 / p99, ms | "
             "client loop lag p50 / p99, ms | "
             "requests/s | "
             "trainer ingest, traj/s (env steps/s) | controller CPU, cores | lost requests | broke |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "fds" not in r:
            lines.append(f"| {r['clients']:,} | {r['client_procs']} | | | | | | | | | | {'; '.join(r['broke'])} |")
            continue
        policy = [n for n in r["fds"] if n.startswith("policy")]
        trainer = [n for n in r["fds"] if n.startswith("trainer")]

        def trio(values: dict[str, Any]) -> str:
            return " / ".join(str(values[n]) for n in ["controller", policy[0], trainer[0]])

        lines.append(f"| {r['clients']:,} | {r['client_procs']} | {trio(r['fds'])} | {trio(r['rss_per_client_kb'])} | "
                     f"{r['inference']['p50_ms']} / {r['inference']['p99_ms']} | {r['heartbeat_answer']['p50_ms']} / "
                     f"{r['heartbeat_answer']['p99_ms']} | {r['client_loop_lag']['p50_ms']} / "
                     f"{r['client_loop_lag']['p99_ms']} | {r['requests_per_s']:,.0f} | "
                     f"{r['ingest_trajectories_per_s']:,.0f} ({r['ingest_env_steps_per_s']:,.0f}) | "
                     f"{r['controller_cpu']:.2f} | {r['lost_requests']} | {'; '.join(r['broke']) or 'nothing'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--client-procs", type=int, default=0, help="0: one per 2,000 clients, at least one")
    parser.add_argument("--policy-workers", type=int, default=2)
    parser.add_argument("--envs", type=int, default=4, help="envs per simulated actor (one request a step for all)")
    parser.add_argument("--trajectory", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=5000.0, help="wall time of one env step")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--start-timeout", type=float, default=150.0)
    parser.add_argument("--kill", type=int, default=0, help="kill one simulated actor mid-window (1) or not (0)")
    parser.add_argument("--override", action="append", default=[], help="a config override, key=value")
    parser.add_argument("--json")
    parser.add_argument("--controller", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.controller:
        run_controller(args)
        return
    results = []
    for clients in args.clients:
        point = argparse.Namespace(**vars(args))
        point.client_procs = args.client_procs or max(1, -(-clients // 2000))
        result = run_point(point, clients)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "cpu_cores"}), flush=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    # Run as the module `benchmarks.fanin`, so the fork server finds `serve_clients` by that name.
    from benchmarks import fanin

    fanin.main()
