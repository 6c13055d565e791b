"""The controller: resolves the worker graph, launches it, watches it, stops it cleanly.

It listens on the control link; every worker heartbeats its stats there and reads the
answer ("ok" or "stop"). The parts each read on their own: `Supervisor` (start, restart,
hung workers), `RunMetrics` and `StopRules` (totals, the return window, when to stop),
`status` (the live line and status.json). The controller wires them together and owns
the run's lifecycle: on stop (or Ctrl-C, or a failed worker) it tells every worker to
stop, waits, kills stragglers by PID, and removes every shared-memory segment of the run.
A write to the run directory that fails (a full disk, a read-only or vanished directory)
stops the run with its reason; the summary is still written if anything can be.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from srl.api.config import ConfigError, ExperimentConfig, dump
from srl.api.graph import ResolvedGraph
from srl.api.registry import WORKERS
from srl.api.run_paths import RunPaths
from srl.api.worker import CONTROL_KEY, StreamEnd, WorkerSpec
from srl.launch import tracking
from srl.launch.graph import wire
from srl.launch.launcher import Launcher
from srl.launch.local import LocalLauncher
from srl.launch.metrics import RunMetrics, StopRule, StopRules, policy_version
from srl.launch.modes import active_modes
from srl.launch.run_dir import RunDir, RunLock, claim_private_dir, claimed_by_another, read_status
from srl.launch.status import Progress, status_document
from srl.launch.supervision import Supervisor, WorkerState
from srl.learn import checkpoint
from srl.streams import shm
from srl.streams.context import ContextSpec
from srl.streams.link import LinkServer, StreamContext, allow_many_connections

log = logging.getLogger(__name__)

#: Seconds the workers get to say goodbye after the stop command, before they are ended by force.
STOP_GRACE_S = 10.0
#: Messages the control loop reads per turn at most; and seconds between two looks over every
#: worker (supervision, the run's totals, the stop rules). A look costs as much as its workers,
#: so it must not follow every message: 10,000 workers' heartbeats would cost 10,000 looks.
MESSAGES_PER_TURN = 1000
CHECK_EVERY_S = 0.1


def make_launcher(config: ExperimentConfig, run_id: str) -> Launcher:
    """The launcher the config's `launcher:` names."""
    if config.launcher == "ray":
        from srl.launch.ray_launcher import RayLauncher

        return RayLauncher(config.ray.address, run_id, config.ray.elastic)
    if config.launcher == "inline":
        from srl.launch.inline import InlineLauncher

        return InlineLauncher()
    return LocalLauncher()


class Controller:
    """Runs the worker graph `graph` of `config` (both as `srl.prepare` gives them) in `run_dir`,
    to its stop rule. It resolves nothing itself."""

    def __init__(self, config: ExperimentConfig, graph: ResolvedGraph, run_dir: str | Path, resume: bool = False,
                 launcher: Launcher | None = None, stop_rules: StopRule | None = None) -> None:
        self.config = config
        self.graph = graph
        self.lock = RunLock(run_dir)  # first: a live run's directory is not touched
        self.run_dir = RunDir(run_dir, config.log.tensorboard,
                              tracking.start(config.log.wandb, run_dir, config.model_dump(mode="json")))
        self.run_dir.write_config(dump(config))
        self.run_dir.write_graph(yaml.safe_dump(self.graph.describe(), sort_keys=False))
        self.resume = resume
        self.paths = self.run_dir.paths
        self.run_id = secrets.token_hex(4)
        self.launcher: Launcher = launcher or make_launcher(config, self.run_id)
        self.private_dir = tempfile.mkdtemp(prefix=f"srl-{self.run_id}-")  # 0700: ours alone
        claim_private_dir(self.private_dir, self.run_dir.path)
        context = ContextSpec(self.run_id, secrets.token_bytes(32), os.path.join(self.private_dir, "names"),
                              self.private_dir, caps=config.streams.max_message_mb.in_bytes(),
                              handshake_timeout_ms=int(config.streams.handshake_timeout_s * 1000),
                              max_pending=config.streams.max_pending_connections)
        self.context = self.launcher.worker_context(context)
        self.metrics = RunMetrics()
        #: When the run stops: the config's `stop:` unless the caller has a rule of its own
        #: (`srl bench` measures a window that opens when the env steps flow).
        self.stop_rules: StopRule = stop_rules or StopRules(config.stop)
        #: The run modes the config asks for (evaluation, self-play, a population): their hooks.
        self.modes = [mode(config, self.graph, self.paths, resume) for mode in active_modes(config)]
        self.supervisor = Supervisor(self.launcher, self.context, config.supervision, self._log_tail,
                                     on_replaced=self._retire)
        self.stop_reason = ""
        #: Why a write to the run directory failed ("": none did); the run stops with it.
        self.write_error = ""
        #: Why a stop was asked for from outside (Ctrl-C, `srl.start`'s `stop()`); "" while none was.
        self._stop_requested = ""
        self._progress = Progress(config.log.progress)
        #: The run's env steps as of the last look over every worker (what heartbeats are answered with).
        self.env_steps_seen = 0
        self._next_status = 0.0
        #: How `wire` is called for this run (set at launch; workers added later are wired alike).
        self._wiring: dict[str, Any] = {}

    @property
    def workers(self) -> dict[str, WorkerState]:
        return self.supervisor.workers

    @property
    def env_steps(self) -> int:
        return self.metrics.total("env_steps", self.workers.values())

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> dict[str, Any]:
        # Off the main thread (`srl.start`) no handler can be set: `request_stop` ends the run there.
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM)} if on_main_thread else {}
        ctx = self.context.build()
        allow_many_connections()
        self.control = LinkServer(ctx, CONTROL_KEY, self.launcher.control_transport)
        self.started = time.monotonic()
        try:
            if self.resume:
                self._clean_after_previous_run()
                # With several policies, each has its checkpoints in a directory of its own.
                directories = [self.paths.checkpoints(p) for p in self.config.policies] or [self.paths.checkpoints()]
                paths = [checkpoint.latest(d) for d in directories]
                steps = [int(checkpoint.info(path).get("env_steps", 0)) for path in paths if path is not None]
                self.metrics.env_steps_at_start = max(steps, default=0)
            try:
                self._launch()
            except ConfigError as exc:  # found only by launching: a placement no node can hold
                self.stop_reason = f"config error: {exc}"
                raise
            self._monitor()
        finally:
            self._shutdown(ctx)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.summary

    def _launch(self) -> None:
        """Place first (a cluster launcher learns each worker's node), then wire: every stream's
        transport follows from where its ends landed; relays go beside the readers they serve."""
        control = StreamEnd(CONTROL_KEY, self.launcher.control_transport)
        common = {"seed": self.config.seed, "run_dir": str(self.run_dir.path), "control": control,
                  "resume": self.resume}
        transport = self.launcher.stream_transport or self.config.streams.transport
        self._wiring = {"forced_transport": transport, "relays": not self.launcher.workers_move, **common,
                        # Workers that may move are wired as if each had a host of its own.
                        "host_of": (lambda name: name) if self.launcher.workers_move else self.launcher.host_of}
        provisional = wire(self.graph, **{**self._wiring, "host_of": lambda name: ""})
        self.launcher.place(provisional)
        specs = wire(self.graph, **self._wiring)
        placed = {spec.name for spec in provisional}
        self.launcher.place([spec for spec in specs if spec.name not in placed])
        self.supervisor.pace(len(specs))
        self._start(specs)

    def _start(self, specs: list[WorkerSpec]) -> None:
        here = self.launcher.host_of(CONTROL_KEY)
        for spec in specs:
            spec.heartbeat_s = self.supervisor.heartbeat_s
            if self.launcher.host_of(spec.name) == here:
                spec.controller_pid = os.getpid()
            kind = self.graph.kinds.get(spec.kind) or WORKERS.resolve(spec.kind)
            self.supervisor.start(WorkerState(spec, kind.supervision, tuple(kind.counters),
                                              progress_stat=kind.progress))

    def _grow(self, group: str, added: int) -> None:
        """Add `added` workers to `group` (nodes joined): wired as the group's first ones were."""
        first = 1 + max(w.spec.index for w in self.workers.values() if w.spec.group == group)
        self.graph = self.graph.with_count(group, first + added)
        new = [spec for spec in wire(self.graph, **self._wiring)
               if spec.group == group and spec.index >= first]
        self.launcher.place(new)
        self._start(new)
        print(f"srl: group {group} grew by {added} on a node that joined ({', '.join(s.name for s in new)})",
              file=sys.stderr)

    def _clean_after_previous_run(self) -> None:
        """A run killed outright (SIGKILL) could not sweep its shared memory: do it now."""
        try:
            previous = read_status(self.run_dir.path)
        except (FileNotFoundError, ValueError):
            return
        # (A live run cannot get here: its controller holds the directory's lock.)
        run_id = str(previous.get("run_id", ""))
        if not re.fullmatch(r"[0-9a-f]{8}", run_id):  # status.json is data, not a list of paths to trust
            log.warning("status.json names no valid run id (%r); nothing of the previous run swept", run_id)
            return
        private = Path(str(previous.get("private_dir", ""))).resolve()
        # Only a directory this run would have made: srl-<its run id>-* directly in the temp dir.
        made_here = private.parent == Path(tempfile.gettempdir()).resolve() and private.name.startswith(f"srl-{run_id}-")
        if made_here and claimed_by_another(private, self.run_dir.path):
            print(f"srl: status.json names run {run_id}, which belongs to another run directory (a copy of a live "
                  "run?): its shared memory and private directory are left alone", file=sys.stderr)
            return
        removed = shm.sweep(f"{shm.PREFIX}{run_id}_")
        if made_here:
            shutil.rmtree(private, ignore_errors=True)
        if removed:
            log.info("removed %d shared-memory segments of the previous run", len(removed))

    def _retire(self, worker: WorkerState) -> None:
        # A worker is replaced once it died: what it had stepped and not delivered died with it.
        self.metrics.lost_env_steps += int(worker.stats.get("undelivered_steps", 0))
        self.metrics.retire(worker)
        for mode in self.modes:
            mode.retire(worker)

    def _log_path(self, name: str) -> Path:
        """Where a worker's log lives (in its group's home: a population member's directory)."""
        worker = self.workers.get(name)
        return (RunPaths(worker.spec.run_dir) if worker else self.paths).log(name)

    def _log_tail(self, name: str, lines: int = 80) -> str:
        path = self._log_path(name)
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.request_stop("interrupted")

    def request_stop(self, reason: str) -> None:
        """Stop the run as Ctrl-C does, with `reason` (safe from any thread or a signal handler)."""
        self._stop_requested = self._stop_requested or reason

    def _monitor(self) -> None:
        log_config = self.config.log
        interval = log_config.report_interval_s
        next_report = time.monotonic() + interval
        last = (time.monotonic(), self.env_steps)
        next_check = 0.0
        reported_version = 0
        while not self.stop_reason:
            self.launcher.idle()
            self._take_messages(50)
            self.control.ctx.check_gates()
            now = time.monotonic()
            if self._stop_requested:
                self._stop(self._stop_requested)
            if now < next_check and not self.stop_reason:
                continue
            next_check = now + CHECK_EVERY_S
            self.env_steps_seen = self.env_steps
            if not self.stop_reason and (failure := self.supervisor.check(now)):
                reason, detail = failure
                print(f"srl: {reason}" + (f". {detail}" if detail else ""), file=sys.stderr)
                self._stop(reason)
            if not self.stop_reason and (reason := self._stop_rule(now - self.started)):
                self._stop(reason)
            for group, added in ({} if self.stop_reason else self.launcher.growth()).items():
                self._grow(group, added)
            version = policy_version(self.workers.values())
            new_versions = (log_config.report_every_versions is not None
                            and version - reported_version >= log_config.report_every_versions
                            and now - last[0] >= log_config.min_report_interval_s)
            if now >= next_report or new_versions or self.stop_reason:
                last = self._report(now, last)
                next_report, reported_version = now + interval, version

    def _take_messages(self, wait_ms: int) -> None:
        """Handle what waits on the control link (`MESSAGES_PER_TURN` at most), waiting up to
        `wait_ms` for the first."""
        for _ in range(MESSAGES_PER_TURN):
            message = self.control.recv(wait_ms)
            if message is None:
                return
            self._handle(message)
            wait_ms = 0

    def _stop_rule(self, elapsed: float) -> str | None:
        reason = self.stop_rules.reason(self.metrics, self.env_steps_seen, elapsed)
        for mode in self.modes:  # a mode may have a rule of its own (a population: every member's)
            reason = mode.stop_reason(reason, list(self.workers.values()), elapsed)
        return reason

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.metrics.freeze()
        for mode in self.modes:
            mode.freeze()

    def _handle(self, message: Any) -> None:
        """One message on the control link: a heartbeat, a goodbye or an error report."""
        meta = message.meta
        worker = self.workers.get(str(meta.get("worker")))
        if worker is None or (meta.get("pid") and worker.pid and meta["pid"] != worker.pid):
            return  # unknown, or the last words of a worker already replaced
        event = meta.get("event")
        now = time.monotonic()
        lines = meta.get("log")
        if lines and isinstance(lines, list):  # from workers whose run directory is here, not on their node
            def append() -> None:
                with open(self._log_path(worker.spec.name), "a") as f:
                    f.write("".join(f"{line}\n" for line in lines if isinstance(line, str)))
            self._write(f"logs/{worker.spec.name}.log", append)
        if event in ("heartbeat", "exit"):
            stats = meta.get("stats") or {}
            for mode in self.modes:
                mode.take(worker, stats, list(self.workers.values()))
            self.metrics.take(worker, stats)
            if event == "heartbeat":
                self.supervisor.heard_from(worker, meta, message.client, now)
                command = "stop" if self.stop_reason else "ok"
                info = {"env_steps": self.env_steps_seen, "heartbeat_s": self.supervisor.heartbeat_s}
                for mode in self.modes:
                    info.update(mode.answer(worker, list(self.workers.values())))
                self.control.send(message.client, 0, {"command": command, "info": info})
            else:
                worker.last_heartbeat, worker.client = now, message.client
                if self.stop_reason:
                    worker.state = "exited"
            # else: it quit on its own mid-run; its exit code brings supervision to restart it
        elif event == "error":  # the worker exits next; supervision restarts it within budget
            worker.error = str(meta.get("error", ""))
            if meta.get("fatal") and not self.stop_reason:  # ... unless no restart can help
                worker.state = "failed"
                print(f"srl: worker {worker.spec.name}: {meta['fatal']}", file=sys.stderr)
                self._stop(f"worker {worker.spec.name}: {meta['fatal']}")

    def _resumed_nothing(self) -> bool:
        """A resume that has not stepped an env yet: what the previous run wrote stays its last word
        (a resume that fails to start leaves summary.json and metrics.jsonl as they were)."""
        return self.resume and self.env_steps <= self.metrics.env_steps_at_start

    def _report(self, now: float, last: tuple[float, int]) -> tuple[float, int]:
        steps = self.env_steps
        fps = (steps - last[1]) / max(now - last[0], 1e-9)
        record = self.metrics.record(list(self.workers.values()), now - self.started, fps)
        if not self._resumed_nothing():
            self._write("metrics.jsonl", lambda: self.run_dir.log_metrics(record))
        for mode in self.modes:
            self._write(f"the {type(mode).__name__.lower()}'s reports",
                        lambda mode=mode: mode.report(list(self.workers.values()), now - self.started))
        self._progress.show(record)
        # A worker's row changes with its heartbeats: a large run, whose workers beat seldom,
        # rewrites its status (a row per worker) as seldom.
        if now >= self._next_status or self.stop_reason:
            self._write_status("running" if not self.stop_reason else "stopping", now)
            self._next_status = now + max(self.config.log.report_interval_s, self.supervisor.heartbeat_s)
        return now, steps

    def _write_status(self, state: str, now: float) -> None:
        document = status_document(self.run_id, state, self.launcher.name, self.private_dir, self.env_steps,
                                   self.graph.describe(), list(self.workers.values()), now)
        for mode in self.modes:
            document.update(mode.status(list(self.workers.values())))
        if events := self.launcher.node_events():
            document["nodes"] = events
        self._write("status.json", lambda: self.run_dir.write_status(document))

    def _write(self, what: str, write: Callable[[], None]) -> None:
        """One write to the run directory; if it fails the run stops (once) with the reason."""
        try:
            write()
        except OSError as exc:
            if not self.write_error:
                self.write_error = f"cannot write {what} in the run directory ({exc.strerror or exc})"
                print(f"srl: {self.write_error}", file=sys.stderr)
            if not self.stop_reason:
                self._stop(self.write_error)

    def _shutdown(self, ctx: StreamContext) -> None:
        self.stop_reason = self.stop_reason or "stopped"
        self.metrics.freeze()
        wall = time.monotonic() - self.started
        self.env_steps_seen = self.env_steps
        for worker in self.workers.values():  # don't wait for their next heartbeat
            if worker.client:
                self.control.send(worker.client, 0, {"command": "stop", "info": {"env_steps": self.env_steps_seen}})
        # Answer heartbeats with "stop" until every worker has said goodbye (or the grace runs out);
        # one already silent past the heartbeat timeout is stuck: not waited for, but killed.
        deadline = time.monotonic() + STOP_GRACE_S
        started = self.launcher.started()
        silent = self.supervisor.silence_s

        def may_say_goodbye(name: str) -> bool:
            heard = self.workers[name].last_heartbeat if name in self.workers else 0.0
            return self.launcher.exitcode(name) is None and not (heard and time.monotonic() - heard > silent)

        while time.monotonic() < deadline and any(may_say_goodbye(n) for n in started):
            # One look over the workers per turn of messages: a look is as long as the run is large.
            turn_ends = time.monotonic() + CHECK_EVERY_S
            while time.monotonic() < turn_ends:
                self.launcher.idle()
                self._take_messages(50)
        for name in started:
            if self.launcher.exitcode(name) is None and not may_say_goodbye(name):
                self.launcher.signal(name, signal.SIGKILL)
        self.launcher.stop_all(grace_s=1.0)
        self.control.close()
        self.launcher.close()
        removed = shm.sweep(ctx.shm_prefix)
        if removed:
            log.info("removed %d shared-memory segments left by workers", len(removed))
        shutil.rmtree(self.private_dir, ignore_errors=True)
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.state not in ("failed", "dropped"):
                worker.state = "stopped"
        self._write_status("stopped", now)
        workers = list(self.workers.values())
        self.summary = {"env_steps": self.env_steps, "episode_return_mean": self.metrics.return_mean,
                        "wall_time_s": round(wall, 3),
                        "fps": round((self.env_steps - self.metrics.env_steps_at_start) / max(wall, 1e-9), 1),
                        "policy_version": policy_version(workers),
                        "trained_steps": self.metrics.total("trained_steps", workers),
                        "stop_reason": self.stop_reason, "episodes": len(self.metrics.returns),
                        **({"env": self.metrics.env_stats()} if self.metrics.episode_stats else {}),
                        **self.metrics.policy_return_means(), **self.metrics.reported}
        if self.metrics.lost_env_steps or self.launcher.node_events():
            self.summary["lost_env_steps"] = self.metrics.lost_env_steps
        for mode in self.modes:
            self.summary.update(mode.summary(workers))
        for mode in self.modes:
            mode.close(self.summary)
        errors = {w.spec.name: w.error[-2000:] for w in workers if w.error}
        if self.write_error:
            errors["run_dir"] = self.write_error
        if errors:
            self.summary["errors"] = errors
        if self._resumed_nothing():
            print("srl: the resumed run stopped before it stepped an env: summary.json and metrics.jsonl are "
                  "as the previous run left them", file=sys.stderr)
        else:
            self._write("summary.json", lambda: self.run_dir.write_summary(self.summary))
        self.run_dir.close()
        self.lock.release()
