"""Supervision: start workers, notice the dead and the hung, replace them within a budget.

How a worker is replaced is its kind's declaration (`Worker.supervision`): alone or with
its whole group, fresh or from the last checkpoint. Nothing here names a kind.
"""

from __future__ import annotations

import collections
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from srl.api.config import SupervisionConfig
from srl.api.graph import Supervision
from srl.launch.launcher import Launcher
from srl.workers.base import ContextSpec, WorkerSpec

log = logging.getLogger(__name__)

#: A worker that has not sent its first heartbeat this long after its start stops the run.
STARTUP_GRACE_S = 120.0


@dataclass
class WorkerState:
    """What the controller knows of one worker."""

    spec: WorkerSpec
    supervision: Supervision
    #: Stats of this worker that add up to the run's totals (its kind's `counters`).
    counters: tuple[str, ...] = ()
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


class Supervisor:
    """Owns the workers' lifecycle; `check()` returns why the run must stop, if it must."""

    def __init__(self, launcher: Launcher, context: ContextSpec, budget: SupervisionConfig,
                 log_tail: Callable[[str], str], on_replaced: Callable[[WorkerState], None]) -> None:
        self.launcher = launcher
        self.context = context
        self.budget = budget
        self.log_tail = log_tail
        #: Called with a worker's last state just before a replacement takes its place.
        self.on_replaced = on_replaced
        self.workers: dict[str, WorkerState] = {}

    def start(self, worker: WorkerState) -> None:
        self.workers[worker.spec.name] = worker
        worker.state = "starting"
        worker.started_at = time.monotonic()
        worker.pid = self.launcher.start(worker.spec, self.context)

    def heard_from(self, worker: WorkerState, meta: dict[str, Any], client: bytes, now: float) -> None:
        """A heartbeat arrived: the worker is alive and running."""
        worker.last_heartbeat = now
        worker.client = client
        worker.pid = meta.get("pid", worker.pid)
        worker.host = self.launcher.host_of(worker.spec.name) or meta.get("host", worker.host)
        worker.endpoints = list(meta.get("endpoints") or [])
        if worker.state == "starting" and worker.restarts:
            worker.restart_latency_s = round(now - worker.started_at, 3)
        if worker.state == "starting":
            worker.state = "running"

    def check(self, now: float) -> tuple[str, str] | None:
        """Restart the dead, kill the hung; (why the run must stop, details to print), if it must."""
        for name, worker in self.workers.items():
            code = self.launcher.exitcode(name)
            reason = None
            if code is not None and worker.state not in ("exited", "failed"):
                last = worker.error.strip().splitlines()[-1] if worker.error.strip() else ""
                if worker.state == "starting" and worker.restarts == 0 and worker.error:
                    # It failed while setting up, before ever running: a missing package or a bad
                    # setting, which a restart cannot fix. Stop now, with the reason.
                    worker.state = "failed"
                    return f"worker {name} failed to start: {last}", ""
                reason = self._restart(worker, f"died with exit code {code}" + (f" ({last})" if last else ""), now)
            elif worker.state == "running" and now - worker.last_heartbeat > self.budget.heartbeat_timeout_s:
                worker.state = "hung"
                log.warning("%s sent no heartbeat for %.0f s; killing it", name, now - worker.last_heartbeat)
                self.launcher.signal(name, signal.SIGKILL)
            elif worker.state == "starting" and now - worker.started_at > STARTUP_GRACE_S:
                reason = f"worker {name} did not start within {STARTUP_GRACE_S:.0f} s", ""
            if reason:
                return reason
        return None

    def _restart(self, worker: WorkerState, why: str, now: float) -> tuple[str, str] | None:
        """Replace a dead or hung worker (with its group, if its kind says so), within budget."""
        while worker.restart_times and now - worker.restart_times[0] > self.budget.restart_window_s:
            worker.restart_times.popleft()
        if len(worker.restart_times) >= self.budget.max_restarts:
            worker.state = "failed"
            tail = self.log_tail(worker.spec.name)
            worker.error = worker.error or tail
            return (f"worker {worker.spec.name} {why}; {len(worker.restart_times)} restarts within "
                    f"{self.budget.restart_window_s:.0f} s used up the restart budget", f"Last lines of its log:\n{tail}")
        log.warning("restarting %s (%s)", worker.spec.name, why)
        group = [worker]
        if worker.supervision.scope == "group":
            group = [w for w in self.workers.values() if w.spec.group == worker.spec.group]
            for other in group:
                if other is not worker and self.launcher.exitcode(other.spec.name) is None:
                    self.launcher.signal(other.spec.name, signal.SIGKILL)
                    self.launcher.join(other.spec.name, 5.0)
        for member in group:
            self.on_replaced(member)
            if member.supervision.from_checkpoint:
                member.spec.resume = True
            member.spec.generation += 1
            member.stats, member.client, member.error = {}, b"", ""
            member.restarts += 1
            member.restart_times.append(now)
            member.restart_latency_s = None
            self.start(member)
        return None
