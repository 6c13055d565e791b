"""The controller: builds the worker graph, launches it, watches heartbeats, stops it cleanly.

It listens on the control link; every worker heartbeats its stats there and reads the
answer ("ok" or "stop"). The controller aggregates those stats into metrics, checks the
stop conditions, and on stop (or Ctrl-C, or a failed worker) tells every worker to stop,
waits, kills stragglers by PID, and removes every shared-memory segment of the run.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from srl.api.config import ExperimentConfig, dump
from srl.launch.graph import build_graph
from srl.launch.local import LocalLauncher
from srl.launch.run_dir import RunDir, read_status
from srl.streams import shm
from srl.streams.link import LinkServer, StreamContext
from srl.workers import checkpoint
from srl.workers.base import CONTROL_KEY, ContextSpec, WorkerSpec

log = logging.getLogger(__name__)

RETURN_WINDOW = 100
STARTUP_GRACE_S = 120.0


@dataclass
class WorkerState:
    spec: WorkerSpec
    pid: int | None = None
    host: str = ""
    state: str = "starting"
    last_heartbeat: float = 0.0
    restarts: int = 0
    endpoints: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    #: The worker's identity on the control link, to send it commands unprompted.
    client: bytes = b""
    started_at: float = 0.0
    restart_times: collections.deque = field(default_factory=collections.deque)
    #: Seconds from the last restart to the replacement's first heartbeat.
    restart_latency_s: float | None = None

    def row(self, now: float) -> dict[str, Any]:
        return {"name": self.spec.name, "kind": self.spec.kind, "pid": self.pid, "host": self.host,
                "state": self.state, "fps": round(float(self.stats.get("fps", 0.0)), 1), "restarts": self.restarts,
                "heartbeat_age_s": round(now - self.last_heartbeat, 2) if self.last_heartbeat else None,
                "endpoints": self.endpoints, "dropped": self.stats.get("dropped", 0),
                "mean_batch": self.stats.get("mean_batch"), "restart_latency_s": self.restart_latency_s,
                "param_digest": self.stats.get("param_digest"), "policy_version": self.stats.get("policy_version"),
                "trained_steps": self.stats.get("trained_steps"),
                "streams": {k: v.transport for k, v in self.spec.streams.items()}}


class Progress:
    """One live line: env steps, fps, mean return, policy version, elapsed."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        from rich.console import Console

        self.console = Console(stderr=True)

    def show(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        ret = record["episode_return_mean"]
        self.console.print(
            f"env_steps {record['env_steps']:>10,}  fps {record['fps']:>9,.0f}  "
            f"return {'-' if ret is None else f'{ret:9.2f}'}  version {record['policy_version']:>5}  "
            f"{record['time_s']:7.1f} s", highlight=False)


class Controller:
    def __init__(self, config: ExperimentConfig, run_dir: str | Path, resume: bool = False,
                 launcher: LocalLauncher | None = None) -> None:
        self.config = config
        self.run_dir = RunDir(run_dir, config.log.tensorboard)
        self.run_dir.write_config(dump(config))
        self.resume = resume
        self.run_id = secrets.token_hex(4)
        if launcher is None and config.launcher == "ray":
            from srl.launch.ray_launcher import RayLauncher

            launcher = RayLauncher(config.ray.address, self.run_id)
        self.launcher = launcher or LocalLauncher()
        self.private_dir = tempfile.mkdtemp(prefix=f"srl-{self.run_id}-")  # 0700: ours alone
        self.context = ContextSpec(self.run_id, secrets.token_bytes(32), os.path.join(self.private_dir, "names"),
                                   self.private_dir)
        self.context = self.launcher.worker_context(self.context)
        self.workers: dict[str, WorkerState] = {}
        self.returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW)
        self.env_steps_at_start = 0
        self.finished_env_steps = 0  # from workers that exited or were replaced
        self.stop_reason = ""
        self._interrupted = False
        self._progress = Progress(config.log.progress)

    # ------------------------------------------------------------------ aggregates
    @property
    def env_steps(self) -> int:
        live = sum(w.stats.get("env_steps", 0) for w in self.workers.values() if w.spec.kind == "actor")
        return self.env_steps_at_start + self.finished_env_steps + live

    @property
    def trained_steps(self) -> int:
        """Env steps the trainers learned from; data-parallel trainers each count their own."""
        return sum(t.get("trained_steps", 0) for t in self._trainer_stats())

    def _trainer_stats(self) -> list[dict[str, Any]]:
        return [w.stats for w in self.workers.values() if w.spec.kind == "trainer"]

    @property
    def policy_version(self) -> int:
        return max((t.get("policy_version", 0) for t in self._trainer_stats()), default=0)

    @property
    def return_mean(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> dict[str, Any]:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        ctx = self.context.build()
        self.control = LinkServer(ctx, CONTROL_KEY, self.launcher.control_transport)
        self.started = time.monotonic()
        try:
            if self.resume:
                self._clean_after_previous_run()
                if (path := checkpoint.latest(self.run_dir.path / "checkpoints")) is not None:
                    self.env_steps_at_start = int(checkpoint.info(path).get("env_steps", 0))
            # Place first (a cluster launcher learns each worker's node), then wire: the graph
            # chooses every stream's transport from where its ends landed.
            provisional = build_graph(self.config, str(self.run_dir.path), lambda name: "", self.resume)
            self.launcher.place(provisional)
            graph = build_graph(self.config, str(self.run_dir.path), self.launcher.host_of, self.resume,
                                control_transport=self.launcher.control_transport)
            placed = {spec.name for spec in provisional}
            self.launcher.place([spec for spec in graph if spec.name not in placed])  # relays, beside their readers
            for spec in graph:
                if self.launcher.host_of(spec.name) == self.launcher.host_of(CONTROL_KEY):
                    spec.controller_pid = os.getpid()
                self.workers[spec.name] = WorkerState(spec)
                self._start(self.workers[spec.name])
            self._monitor()
        finally:
            self._shutdown(ctx)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.summary

    def _clean_after_previous_run(self) -> None:
        """A run killed outright (SIGKILL) could not sweep its shared memory: do it now."""
        try:
            previous = read_status(self.run_dir.path)
        except (FileNotFoundError, ValueError):
            return
        pid = previous.get("controller_pid")
        if pid and psutil.pid_exists(pid) and pid != os.getpid():
            try:
                if "srl" in " ".join(psutil.Process(pid).cmdline()):
                    raise RuntimeError(f"the run in {self.run_dir.path} is still going (controller pid {pid})")
            except psutil.Error:
                pass
        removed = shm.sweep(f"{shm.PREFIX}{previous.get('run_id', '')}_") if previous.get("run_id") else []
        if previous.get("private_dir", "").startswith(tempfile.gettempdir()):
            shutil.rmtree(previous["private_dir"], ignore_errors=True)
        if removed:
            log.info("removed %d shared-memory segments of the previous run", len(removed))

    def _start(self, worker: WorkerState) -> None:
        worker.state = "starting"
        worker.started_at = time.monotonic()
        worker.pid = self.launcher.start(worker.spec, self.context)

    def _restart(self, worker: WorkerState, why: str, now: float) -> None:
        """Replace a dead or hung worker in place, within its restart budget."""
        budget = self.config.supervision
        while worker.restart_times and now - worker.restart_times[0] > budget.restart_window_s:
            worker.restart_times.popleft()
        if len(worker.restart_times) >= budget.max_restarts:
            worker.state = "failed"
            tail = self._log_tail(worker.spec.name)
            worker.error = worker.error or tail
            self.stop_reason = (f"worker {worker.spec.name} {why}; {len(worker.restart_times)} restarts within "
                                f"{budget.restart_window_s:.0f} s used up the restart budget")
            print(f"srl: {self.stop_reason}. Last lines of its log:\n{tail}", file=sys.stderr)
            return
        log.warning("restarting %s (%s)", worker.spec.name, why)
        if worker.spec.kind == "actor":  # its steps happened; its successor counts from zero
            self.finished_env_steps += int(worker.stats.get("env_steps", 0))
        group = [worker]
        if worker.spec.kind == "trainer":
            # Continue from the last checkpoint. Data-parallel trainers wait on each other in
            # every gradient exchange, so the whole group restarts together.
            group = [w for w in self.workers.values() if w.spec.kind == "trainer"]
            for other in group:
                if other is not worker and self.launcher.exitcode(other.spec.name) is None:
                    self.launcher.signal(other.spec.name, signal.SIGKILL)
                    self.launcher.join(other.spec.name, 5.0)
                other.spec.settings["resume"] = True
                other.spec.settings["trainers"]["generation"] = other.spec.settings["trainers"].get("generation", 0) + 1
        for member in group:
            member.stats, member.client, member.error = {}, b"", ""
            member.restarts += 1
            member.restart_times.append(now)
            member.restart_latency_s = None
            self._start(member)

    def _log_tail(self, name: str, lines: int = 15) -> str:
        path = self.run_dir.path / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._interrupted = True

    def _monitor(self) -> None:
        interval = self.config.log.report_interval_s
        next_report = time.monotonic() + interval
        last = (time.monotonic(), self.env_steps)
        while not self.stop_reason:
            message = self.control.recv(50)
            if message is not None:
                self._handle(message)
            now = time.monotonic()
            if self._interrupted:
                self.stop_reason = "interrupted"
            self._check_workers(now)
            self._check_stop(now)
            if now >= next_report or self.stop_reason:
                last = self._report(now, last)
                next_report = now + interval

    def _handle(self, message: Any) -> None:
        meta = message.meta
        worker = self.workers.get(str(meta.get("worker")))
        if worker is None or (meta.get("pid") and worker.pid and meta["pid"] != worker.pid):
            return  # unknown, or the last words of a worker already replaced
        event = meta.get("event")
        now = time.monotonic()
        lines = meta.get("log")
        if lines and isinstance(lines, list):  # from workers whose run directory is here, not on their node
            with open(self.run_dir.path / "logs" / f"{worker.spec.name}.log", "a") as f:
                f.write("".join(f"{line}\n" for line in lines if isinstance(line, str)))
        if event in ("heartbeat", "exit"):
            stats = meta.get("stats") or {}
            returns = stats.pop("episode_returns", [])
            if not self.stop_reason:  # the summary reports the window that met the stop condition
                self.returns.extend(float(r) for r in returns)
            worker.stats = stats
            worker.last_heartbeat = now
            worker.client = message.client
            if event == "heartbeat":
                worker.pid = meta.get("pid", worker.pid)
                worker.host = self.launcher.host_of(worker.spec.name) or meta.get("host", worker.host)
                worker.endpoints = list(meta.get("endpoints") or [])
                if worker.state == "starting" and worker.restarts:
                    worker.restart_latency_s = round(now - worker.started_at, 3)
                worker.state = "running" if worker.state in ("starting", "running") else worker.state
                command = "stop" if self.stop_reason else "ok"
                self.control.send(message.client, 0, {"command": command, "info": {"env_steps": self.env_steps}})
            elif self.stop_reason:
                worker.state = "exited"
            # else: it quit on its own mid-run; its exit code brings supervision to restart it
        elif event == "error":  # the worker exits next; supervision restarts it within budget
            worker.error = str(meta.get("error", ""))

    def _check_workers(self, now: float) -> None:
        if self.stop_reason:
            return
        timeout = self.config.supervision.heartbeat_timeout_s
        for name, worker in self.workers.items():
            code = self.launcher.exitcode(name)
            if code is not None and worker.state not in ("exited", "failed"):
                last = worker.error.strip().splitlines()[-1] if worker.error.strip() else ""
                if worker.state == "starting" and worker.restarts == 0 and worker.error:
                    # It failed while setting up, before ever running: a missing package or a bad
                    # setting, which a restart cannot fix. Stop now, with the reason.
                    worker.state = "failed"
                    self.stop_reason = f"worker {name} failed to start: {last}"
                    print(f"srl: {self.stop_reason}", file=sys.stderr)
                    return
                self._restart(worker, f"died with exit code {code}" + (f" ({last})" if last else ""), now)
            elif worker.state == "running" and now - worker.last_heartbeat > timeout:
                worker.state = "hung"
                log.warning("%s sent no heartbeat for %.0f s; killing it", name, now - worker.last_heartbeat)
                self.launcher.signal(name, signal.SIGKILL)
            elif worker.state == "starting" and now - worker.started_at > STARTUP_GRACE_S:
                self.stop_reason = f"worker {name} did not start within {STARTUP_GRACE_S:.0f} s"
            if self.stop_reason:
                return

    def _report(self, now: float, last: tuple[float, int]) -> tuple[float, int]:
        steps = self.env_steps
        fps = (steps - last[1]) / max(now - last[0], 1e-9)
        trainers = self._trainer_stats()
        record = {"time_s": round(now - self.started, 3), "env_steps": steps, "fps": round(fps, 1),
                  "episode_return_mean": self.return_mean, "episodes": len(self.returns),
                  "policy_version": self.policy_version, "trained_steps": self.trained_steps,
                  "dropped_stale": sum(t.get("dropped_stale", 0) for t in trainers),
                  "train": trainers[0].get("train", {}) if trainers else {}}
        self.run_dir.log_metrics(record)
        self._progress.show(record)
        self._write_status("running" if not self.stop_reason else "stopping", now)
        return now, steps

    def _write_status(self, state: str, now: float) -> None:
        self.run_dir.write_status({"run_id": self.run_id, "state": state, "controller_pid": os.getpid(),
                                   "private_dir": self.private_dir,
                                   "launcher": self.launcher.name, "env_steps": self.env_steps,
                                   "workers": [w.row(now) for w in self.workers.values()]})

    def _check_stop(self, now: float) -> None:
        stop = self.config.stop
        if self.stop_reason:
            return
        if stop.env_steps is not None and self.env_steps >= stop.env_steps:
            self.stop_reason = f"env_steps reached {stop.env_steps}"
        elif stop.time_s is not None and now - self.started >= stop.time_s:
            self.stop_reason = f"time_s reached {stop.time_s}"
        elif (stop.episode_return is not None and len(self.returns) >= min(RETURN_WINDOW, 10)
              and self.return_mean is not None and self.return_mean >= stop.episode_return):
            self.stop_reason = f"episode_return_mean {self.return_mean:.1f} >= {stop.episode_return}"

    def _shutdown(self, ctx: StreamContext) -> None:
        self.stop_reason = self.stop_reason or "stopped"
        wall = time.monotonic() - self.started
        for worker in self.workers.values():  # don't wait for their next heartbeat
            if worker.client:
                self.control.send(worker.client, 0, {"command": "stop", "info": {"env_steps": self.env_steps}})
        # Answer heartbeats with "stop" until every worker has said goodbye (or the grace runs out).
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(
                self.launcher.exitcode(n) is None for n in self.workers if n in self.launcher.processes):
            message = self.control.recv(50)
            if message is not None:
                self._handle(message)
        self.launcher.stop_all(grace_s=1.0)
        self.control.close()
        self.launcher.close()
        removed = shm.sweep(ctx.shm_prefix)
        if removed:
            log.info("removed %d shared-memory segments left by workers", len(removed))
        shutil.rmtree(self.private_dir, ignore_errors=True)
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.state not in ("failed",):
                worker.state = "stopped"
        self._write_status("stopped", now)
        self.summary = {"env_steps": self.env_steps, "episode_return_mean": self.return_mean,
                        "wall_time_s": round(wall, 3),
                        "fps": round((self.env_steps - self.env_steps_at_start) / max(wall, 1e-9), 1),
                        "policy_version": self.policy_version, "trained_steps": self.trained_steps,
                        "stop_reason": self.stop_reason,
                        "episodes": len(self.returns)}
        failed = [w for w in self.workers.values() if w.error]
        if failed:
            self.summary["errors"] = {w.spec.name: w.error[-2000:] for w in failed}
        self.run_dir.write_summary(self.summary)
        self.run_dir.close()
