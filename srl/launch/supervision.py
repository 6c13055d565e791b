"""Supervision: start workers, notice the dead and the hung, replace them within a budget.

How a worker is replaced is its kind's declaration (`Worker.supervision`): alone or with
its whole group, fresh or from the last checkpoint. Nothing here names a kind.

A worker is hung when it sends no heartbeat, or when its progress stat (its kind's
`Worker.progress`) stands still for the progress window while it waits on no other worker.
Heartbeats alone miss a trainer stuck inside its algorithm (a helper thread beats for it),
and a worker that waits is not to blame: an actor without credits waits on a trainer that
trains slowly or not at all, and it is the trainer that makes no progress while waiting on
nothing. When every watched worker waits and none moves (a lost message, a cycle), nobody
can be blamed: the run stops with who waits on what.
"""

from __future__ import annotations

import collections
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from srl.api.config import SupervisionConfig
from srl.api.worker import HUNG_SIGNAL, Supervision, WorkerSpec
from srl.launch.launcher import Launcher, NoRoom
from srl.streams.context import ContextSpec

log = logging.getLogger(__name__)

#: Seconds a hung worker gets to write its stacks to its log before it is killed, ...
STACK_DUMP_S = 0.5
#: ... or, where its log is still growing then (or has not grown yet: a busy box may run the
#: worker late, or be read halfway through its stacks), up to this many, until it stops.
STACK_DUMP_MAX_S = 3.0
#: Seconds between a worker's heartbeats in a run of `SMALL_RUN` workers at most (400 heartbeats
#: a second at most): the run's numbers, so its metrics rows and its stop rule, are this fresh,
#: and a run of seconds still draws a curve.
FAST_HEARTBEAT_S = 0.1
SMALL_RUN = 40
#: Seconds between a worker's heartbeats in a larger run.
HEARTBEAT_S = 0.25
#: Heartbeats a second the controller is sent at most, all workers together: past
#: `MAX_HEARTBEATS_PER_S * HEARTBEAT_S` workers (500) each beats less often instead.
MAX_HEARTBEATS_PER_S = 2000
#: A worker is silent (hung) only after missing this many heartbeats in a row, whatever the
#: configured timeout: a paced heartbeat can be seconds apart.
SILENT_BEATS = 4


def heartbeat_period(workers: int) -> float:
    """Seconds between each worker's heartbeats in a run of `workers`: the controller reads
    one message at a time, so the run's total rate is capped rather than each worker's."""
    if workers <= SMALL_RUN:
        return FAST_HEARTBEAT_S
    return max(HEARTBEAT_S, workers / MAX_HEARTBEATS_PER_S)


def silence_timeout(configured_s: float, period_s: float) -> float:
    """Seconds without a heartbeat after which a worker counts as hung (or its controller as gone)."""
    return max(configured_s, SILENT_BEATS * period_s)


@dataclass
class WorkerState:
    """What the controller knows of one worker."""

    spec: WorkerSpec
    supervision: Supervision
    #: Stats of this worker that add up to the run's totals (its kind's `counters`).
    counters: tuple[str, ...] = ()
    pid: int | None = None
    host: str = ""
    #: starting, running, hung, exited, failed, stopped; or dropped: its node died and no node
    #: left had room for it (an elastic run's actor).
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
    #: The stat that shows it doing its job (its kind's `progress`; None: not watched), its
    #: last value, and when it last moved on or said it waits on another worker.
    progress_stat: str | None = None
    progress: Any = None
    moved_at: float = 0.0
    #: The port it waits on, as its last heartbeat said ("": working).
    waiting: str = ""
    #: Why it was found hung, where it was stuck and what it last logged, and when (it is
    #: killed shortly after).
    hung: str = ""
    hung_log: str = ""
    hung_at: float = 0.0
    #: Its log's tail when last looked at since it was asked for its stacks, and whether it has
    #: grown since (the stacks are on their way).
    hung_tail: str = ""
    hung_dumping: bool = False


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
        #: Seconds between each worker's heartbeats (`pace`), and silence that counts as hung.
        self.heartbeat_s = HEARTBEAT_S
        self.silence_s = silence_timeout(budget.heartbeat_timeout_s, self.heartbeat_s)
        #: When a worker last moved on (or started): the run stalls when none has for a window.
        self.run_moved_at = time.monotonic()

    @property
    def start_s(self) -> float:
        """Seconds a (re)started worker has to send its first heartbeat."""
        return max(self.budget.start_timeout_s, self.silence_s)

    def pace(self, workers: int) -> float:
        """Set the heartbeat period for a run of `workers` (the answer to every heartbeat tells it)."""
        self.heartbeat_s = heartbeat_period(workers)
        self.silence_s = silence_timeout(self.budget.heartbeat_timeout_s, self.heartbeat_s)
        return self.heartbeat_s

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
        worker.waiting = str(meta.get("waiting") or "")
        progress = worker.stats.get(worker.progress_stat) if worker.progress_stat else None
        if worker.state == "starting" or progress != worker.progress:  # a start counts as moving on
            worker.progress, worker.moved_at = progress, now
            self.run_moved_at = now
        elif worker.waiting:
            worker.moved_at = now
        if worker.state == "starting" and worker.restarts:
            worker.restart_latency_s = round(now - worker.started_at, 3)
        if worker.state == "starting":
            worker.state = "running"

    def check(self, now: float) -> tuple[str, str] | None:
        """Restart the dead, kill the hung; (why the run must stop, details to print), if it must."""
        for name, worker in self.workers.items():
            code = self.launcher.exitcode(name)
            reason = None
            if code is not None and worker.state not in ("exited", "failed", "dropped"):
                last = worker.error.strip().splitlines()[-1] if worker.error.strip() else ""
                if worker.state == "starting" and worker.restarts == 0 and worker.error:
                    # It failed while setting up, before ever running: a missing package or a bad
                    # setting, which a restart cannot fix. Stop now, with the reason.
                    worker.state = "failed"
                    return f"worker {name} failed to start: {last}", ""
                why = worker.hung or f"died with exit code {code}" + (f" ({last})" if last else "")
                reason = self._restart(worker, why, now)
            elif worker.state == "running" and self.launcher.hangs_possible and (why := self._stalled(worker, now)):
                self._hang(worker, why, now)
            elif worker.state == "hung" and now - worker.hung_at > STACK_DUMP_S:
                tail = self.log_tail(name)
                grew, worker.hung_tail = tail != worker.hung_tail, tail
                if (grew or not worker.hung_dumping) and now - worker.hung_at < STACK_DUMP_MAX_S:
                    worker.hung_dumping = worker.hung_dumping or grew
                    continue  # its stacks are not all in its log yet
                worker.hung_log = worker.hung_log or last_words(tail)
                self.launcher.signal(name, signal.SIGKILL)
            elif worker.state == "starting" and now - worker.started_at > self.start_s:
                reason = (f"worker {name} did not start within {self.start_s:.0f} s "
                          "(supervision.start_timeout_s)"), ""
            if reason:
                return reason
        return self._run_stalled()

    def _window(self, worker: WorkerState) -> float | None:
        """Its progress window (None: its progress is not watched)."""
        return self.budget.progress_timeout(worker.spec.group) if worker.progress_stat else None

    def _stalled(self, worker: WorkerState, now: float) -> str:
        """Why a running worker counts as hung ("" if it does not)."""
        if now - worker.last_heartbeat > self.silence_s:
            return f"sent no heartbeat for {now - worker.last_heartbeat:.0f} s"
        # Judged from what its heartbeats said, up to the last one: a worker silent meanwhile (or a
        # controller that read nothing for a while) is the heartbeat timeout's business.
        window, still = self._window(worker), worker.last_heartbeat - worker.moved_at
        if window is not None and still > window:
            return (f"made no progress for {still:.0f} s ({worker.progress_stat} stayed at "
                    f"{worker.progress}) while waiting on no other worker")
        return ""

    def _hang(self, worker: WorkerState, why: str, now: float) -> None:
        """Ask a hung worker for its stacks (into its log); a check once they are in it kills it."""
        log.warning("%s %s; killing it", worker.spec.name, why)
        worker.state, worker.hung, worker.hung_at, worker.hung_log = "hung", why, now, ""
        worker.hung_tail, worker.hung_dumping = self.log_tail(worker.spec.name), False
        self.launcher.signal(worker.spec.name, HUNG_SIGNAL)

    def _run_stalled(self) -> tuple[str, str] | None:
        """Every watched worker waits on another and none has moved on for a window: nobody to blame."""
        if not self.launcher.hangs_possible:
            return None
        watched = [w for w in self.workers.values() if self._window(w) is not None and w.state != "dropped"]
        if not watched or not all(w.state == "running" and w.waiting for w in watched):
            return None
        still = max(w.last_heartbeat for w in watched) - self.run_moved_at
        if still <= max(self._window(w) for w in watched):
            return None
        waits = ", ".join(f"{w.spec.name} on {w.waiting}" for w in watched)
        return f"no worker made progress for {still:.0f} s, each waiting on another ({waits})", ""

    def _restart(self, worker: WorkerState, why: str, now: float) -> tuple[str, str] | None:
        """Replace a dead or hung worker (with its group, if its kind says so), within budget."""
        while worker.restart_times and now - worker.restart_times[0] > self.budget.restart_window_s:
            worker.restart_times.popleft()
        if len(worker.restart_times) >= self.budget.max_restarts:
            worker.state = "failed"
            tail = "\n".join(self.log_tail(worker.spec.name).splitlines()[-15:])
            worker.error = worker.error or tail
            words = f"; {worker.hung_log}" if worker.hung_log else ""
            reason = (f"worker {worker.spec.name} {why}; {len(worker.restart_times)} restarts within "
                      f"{self.budget.restart_window_s:.0f} s used up the restart budget{words}")
            return reason, f"Last lines of its log:\n{tail}"
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
            member.hung, member.hung_log, member.waiting = "", "", ""
            member.restarts += 1
            member.restart_times.append(now)
            member.restart_latency_s = None
            try:
                self.start(member)
            except NoRoom as exc:  # its node died and no node left has room for it
                if not exc.droppable:
                    member.state, member.error = "failed", str(exc)
                    return str(exc), ""
                print(f"srl: {exc}", file=sys.stderr)
                member.state = "dropped"
        return None


def last_words(log_tail: str) -> str:
    """One line from a hung worker's log: where its main thread was stuck, what it last said.

    The log ends with the stacks it wrote when asked (`HUNG_SIGNAL`); faulthandler lists the
    main thread last, innermost frame first.
    """
    lines = log_tail.splitlines()
    headers = [i for i, line in enumerate(lines) if line.endswith("(most recent call first):")]
    where = lines[headers[-1] + 1].strip() if headers and headers[-1] + 1 < len(lines) else ""
    said = [line.strip() for line in lines
            if line.strip() and not line.startswith(("  File ", "Thread 0x", "Current thread 0x"))]
    parts = ([f"stuck at {where}"] if where else []) + ([f"its last log lines: {' | '.join(said[-2:])}"] if said else [])
    return "; ".join(parts)[-600:]
