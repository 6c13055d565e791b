"""The worker shell: a loop, a control link to the controller, heartbeats, a clean exit.

A worker kind implements `setup()`, `poll()` (one short unit of work that returns
without blocking for long) and `teardown()`, and reports numbers from `stats()`. It
declares, as class attributes, the stream ends it has (`ports`), how the controller
replaces it (`supervision`), which of its stats add up to the run's totals (`counters`),
which stat grows as it does its job (`progress`) and, optionally, a pydantic `Config` for
its group's settings. While a poll finds nothing to do it names in `waiting_on` the port
it waits on: the controller's progress watchdog blames a stalled worker only if it waits
on no other. A graph names the kind by import path (`mypkg.workers:MyWorker`); nothing
registers it.
The shell sends a heartbeat with those stats every `heartbeat_s`; the controller's
answer says whether to keep going, and how often to beat (a large run beats less often).
No answer for `orphan_timeout_s` (or four periods, if longer) means the controller is
gone, and the worker exits on its own rather than linger as an orphan.

    worker = ActorWorker(spec, ctx)
    worker.run()      # setup(); while not stopped: poll(); heartbeat; teardown()
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from srl.api.run_paths import RunPaths
from srl.api.worker import Port, Supervision, WorkerSpec
from srl.streams import shm
from srl.streams.link import LinkClient, StreamContext
from srl.streams.parameters import ParameterSubscriber, open_subscriber

log = logging.getLogger(__name__)


class ShippedLog(logging.Handler):
    """Keeps the newest formatted log lines until the next heartbeat carries them away."""

    def __init__(self, capacity: int = 500) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def drain(self) -> list[str]:
        lines = list(self.lines)
        self.lines.clear()
        return lines


#: Installed as the logging handler by workers whose logs must travel to the controller.
SHIPPED_LOG = ShippedLog()

#: Seconds between looks at the control socket. The run loop asks after every poll (thousands
#: of times a second for a fast env); a stop command waits at most this long.
CONTROL_CHECK_S = 0.02
#: Heartbeats in a row left unanswered after which the controller counts as gone (at least
#: `orphan_timeout_s`): a large run's heartbeats are seconds apart.
ORPHAN_BEATS = 4


class FatalError(RuntimeError):
    """An error a restart cannot fix: the run stops with its message instead of replacing the worker."""


class Worker(ABC):
    #: The stream ends this kind has, by port name; a graph joins each to a named stream.
    ports: ClassVar[dict[str, Port]] = {}
    #: How the controller replaces a worker of this kind that died or hung.
    supervision: ClassVar[Supervision] = Supervision()
    #: Stats that add up to the run's totals (`env_steps`, `trained_steps`, `episode_returns`).
    counters: ClassVar[tuple[str, ...]] = ()
    #: A stat that grows while the worker does its job (a counter); None: its progress is not watched.
    progress: ClassVar[str | None] = None
    #: Whether it carries out commands other workers address to its population member (`command`).
    takes_commands: ClassVar[bool] = False

    def __init__(self, spec: WorkerSpec, ctx: StreamContext) -> None:
        self.spec = spec
        #: The group's settings: an instance of the kind's `Config` (a dict for a kind without one).
        self.settings = spec.settings
        self.ctx = ctx
        self.name = spec.name
        self._stopping = False
        self._control: LinkClient | None = None
        self._last_heartbeat = 0.0
        self._last_check = 0.0
        self._beater: threading.Thread | None = None
        self._busy = threading.Event()
        self._control_lock = threading.Lock()
        self._last_ack = time.monotonic()
        #: Seconds between heartbeats: the spec's, then whatever the controller's answers say.
        self.heartbeat_s = spec.heartbeat_s
        #: When the oldest heartbeat still unanswered was sent: a worker busy in one long
        #: `poll()` (a CNN training step) sent nothing, so the controller owed it no answer.
        self._unanswered_since: float | None = None
        #: What the controller last told us beyond "keep going" (e.g. the run's env-step count).
        self.controller_info: dict[str, Any] = {}
        #: When this worker found its controller gone (None: it has not).
        self._orphaned_at: float | None = None
        #: The port this worker waits on (no input, no credit), "" while it works: a worker that
        #: makes no progress is hung only if it waits on nothing (see `progress`).
        self.waiting_on = ""
        #: Commands the controller delivered, not yet carried out; and the outcome of the last
        #: ones carried out, by id ("ok" or the error), reported with the stats.
        self._commands: collections.deque[dict[str, Any]] = collections.deque()
        self._command_results: dict[str, str] = {}
        #: 0 until it fails (1); what `end` returns.
        self.exit_code = 0

    # ------------------------------------------------------------ to implement
    @abstractmethod
    def setup(self) -> None: ...

    @abstractmethod
    def poll(self) -> None:
        """Do one short unit of work (block at most ~100 ms)."""

    def teardown(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        """Numbers for the controller (sent with each heartbeat)."""
        return {}

    def endpoints(self) -> list[str]:
        """Addresses this worker listens on (reported in status)."""
        return []

    def command(self, command: dict[str, Any]) -> None:
        """Carry out one command (a dict with an `id`) that another worker addressed to this
        worker's population member, delivered by the controller between polls. Kinds that
        declare `takes_commands` implement it; raising reports the error to the sender."""
        raise NotImplementedError(f"{type(self).__name__} takes no commands")

    # ------------------------------------------------------------ for a kind's own use
    @property
    def paths(self) -> RunPaths:
        """Where the run's files are (`checkpoints()`, `log(name)`, `config`, ...): on the
        controller's host, so a kind that reads them runs there or on a shared filesystem."""
        return RunPaths(self.spec.run_dir)

    def subscribe(self, port: str = "parameters") -> ParameterSubscriber:
        """The newest versions published on a `parameters` port this kind consumes: the
        subscriber's `poll()` gives `(version, weights, info)` once per new version, else None;
        `policy.set_params(weights, version)` loads them. Close it in `teardown`."""
        end = self.spec.streams[port]
        return open_subscriber(self.ctx, end.key, end.transport)

    # ------------------------------------------------------------ the shell
    def _stats(self) -> dict[str, Any]:
        """The kind's stats, and what the shell adds: messages its links rejected, by reason, and
        the outcome of the commands it carried out."""
        done = {"commands_done": dict(self._command_results)} if self._command_results else {}
        return {**self.stats(), "rejected": dict(self.ctx.rejected), **done}

    def _carry_out_commands(self) -> None:
        while self._commands:
            command = self._commands.popleft()
            try:
                self.command(command)
                outcome = "ok"
            except Exception as exc:  # the sender learns why; the worker goes on
                log.exception("command %s failed", command.get("id"))
                outcome = f"{type(exc).__name__}: {exc}"[:300]
            self._command_results[str(command.get("id"))] = outcome
            while len(self._command_results) > 32:
                del self._command_results[next(iter(self._command_results))]

    def wait_ms(self, ms: int) -> int:
        """How long a poll with nothing to do may wait for input: `ms`, or 0 inline (see `pause`)."""
        return 0 if self.ctx.inline else ms

    def pause(self, seconds: float) -> None:
        """Sleep a little in a poll that found nothing to do; inline, return at once (the one loop
        must get to the other workers, which are what this one waits for)."""
        if not self.ctx.inline:
            time.sleep(seconds)

    @property
    def orphan_timeout_s(self) -> float:
        """Seconds without an answer after which the controller counts as gone."""
        return max(self.spec.orphan_timeout_s, ORPHAN_BEATS * self.heartbeat_s)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def request_stop(self) -> None:
        self._stopping = True

    def heartbeat(self, force: bool = False) -> bool:
        """Send a heartbeat if one is due and read the controller's answers. False once stopping."""
        now = time.monotonic()
        if not force and now - self._last_check < CONTROL_CHECK_S:
            return not self._stopping
        self._last_check = now
        self._read_answers(now)
        if force or now - self._last_heartbeat >= self.heartbeat_s:
            self._last_heartbeat = now
            if self._unanswered_since is None:
                self._unanswered_since = now
            self._control.send(0, {"worker": self.name, "event": "heartbeat", "pid": os.getpid(),
                                   "log": SHIPPED_LOG.drain(),
                                   "host": socket.gethostname(), "endpoints": self.endpoints(), "stats": self._stats(),
                                   "waiting": self.waiting_on})
        silent = now - self._unanswered_since if self._unanswered_since is not None else 0.0
        # Inline, the controller shares this process and loop: it cannot be gone, only paused with us.
        if self._orphaned_at is None and not self.ctx.inline and (silent > self.orphan_timeout_s
                                                                  or not self._controller_alive()):
            log.error("the controller is gone (no answer for %.0f s); exiting", now - self._last_ack)
            self._orphaned_at = now
            self._stopping = True
        return not self._stopping

    def _read_answers(self, now: float, wait_ms: int = 0) -> None:
        """Take every answer the controller has sent (waiting up to `wait_ms` for the first)."""
        assert self._control is not None
        while (answer := self._control.recv(wait_ms)) is not None:
            wait_ms = 0
            self._last_ack = now
            self._unanswered_since = None
            if answer.meta.get("command") == "stop":
                self._stopping = True
            info = dict(answer.meta.get("info") or {})
            period = info.pop("heartbeat_s", None)
            if isinstance(period, (int, float)) and period > 0:
                self.heartbeat_s = float(period)
            self._commands.extend(c for c in info.pop("commands", []) if isinstance(c, dict))
            self.controller_info.update(info)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Keep heartbeating from a helper thread while the body runs one long computation.

        The control socket changes hands for the duration: the body must not touch it (a
        training step doesn't), and the helper touches it only under the lock that ends the
        body, so the two threads never use it at the same time. The helper lives as long as
        the worker (a trainer enters `busy` for every step, tens of times a second).
        Those heartbeats say the worker is alive, not that the body moves: the stats they
        carry show no progress and no wait, so a body stuck for good is caught by the
        controller's progress watchdog instead.
        """
        self.waiting_on = ""
        if self.ctx.inline:  # the one loop waits for the body anyway; nobody can beat meanwhile
            yield
            return
        if self._beater is None:
            self._beater = threading.Thread(target=self._beat_while_busy, name="heartbeat", daemon=True)
            self._beater.start()
        self._busy.set()
        try:
            yield
        finally:
            with self._control_lock:
                self._busy.clear()

    def _beat_while_busy(self) -> None:
        while True:
            self._busy.wait()
            time.sleep(self.heartbeat_s)
            with self._control_lock:
                if self._busy.is_set():
                    self.heartbeat(force=True)
            if self._orphaned_at is not None and time.monotonic() - self._orphaned_at > self.orphan_timeout_s:
                # Still inside one computation long after the controller went: no one else will
                # end this process. Its run is over, so its shared memory goes with it.
                log.error("still busy %.0f s after the controller went; exiting without teardown",
                          time.monotonic() - self._orphaned_at)
                shm.sweep(self.ctx.shm_prefix)
                os._exit(1)

    def _controller_alive(self) -> bool:
        if self.spec.controller_pid is None:
            return True
        try:
            os.kill(self.spec.controller_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def connect(self) -> None:
        """Open the control link to the controller (before `setup`)."""
        self._control = LinkClient(self.ctx, self.spec.control.key, self.spec.control.transport, self.name)

    def run(self) -> int:
        """The worker's whole life in its own process (or a cluster launcher's actor)."""
        self.connect()
        if self.begin():
            while self.step():
                pass
        return self.end()

    # The three parts of `run`, which the inline launcher calls itself (every worker of a run in
    # one process, stepped in turn by one loop): each returns, and a failure is reported, not raised.
    def begin(self) -> bool:
        """Set up and send the first heartbeat (after `connect`). False: it failed (`end` says so)."""
        return self._guarded(self._begin)

    def step(self) -> bool:
        """One turn of the loop: a heartbeat, the commands delivered, one `poll`. False once the
        worker is done: told to stop, orphaned, or failed."""
        return self._guarded(self._turn)

    def end(self) -> int:
        """Tear down, say goodbye (or report the failure), close the control link; the exit status."""
        try:
            self.say_goodbye(self.exit_code)
        finally:
            if not self.ctx.inline:
                time.sleep(0.05)  # let the last message leave before the socket closes
            self.close_control()
        return self.exit_code

    def close_control(self) -> None:
        if self._control is not None:
            self._control.close()

    def _begin(self) -> None:
        self.setup()
        self.heartbeat(force=True)

    def _turn(self) -> bool:
        if not self.heartbeat():
            return False
        self.ctx.check_gates()
        self._carry_out_commands()
        self.poll()
        return True

    def _guarded(self, body: Callable[[], bool | None]) -> bool:
        """Run `body`; an exception ends the worker with status 1 and its traceback sent to the controller."""
        try:
            return body() is not False
        except Exception as exc:
            text = traceback.format_exc()
            # A peer that stopped first can break a collective call mid-way (data-parallel
            # trainers): on the way out that is expected, not a failure. The controller's stop,
            # sent to every worker at once, may still be unread here.
            if not self._stopping:
                self._read_answers(time.monotonic(), wait_ms=200)
            if self._stopping:
                log.warning("worker %s: error while stopping, ignored:\n%s", self.name, text)
            else:
                self.exit_code = 1
                log.error("worker %s failed:\n%s", self.name, text)
                self._control.send(0, {"worker": self.name, "event": "error", "pid": os.getpid(), "error": text[-4000:],
                                       "fatal": str(exc) if isinstance(exc, FatalError) else "",
                                       "log": SHIPPED_LOG.drain()})
            return False

    def say_goodbye(self, code: int) -> None:
        """Tear down; after a clean run (`code` 0) send the controller the last stats (an `exit` event)."""
        assert self._control is not None
        try:
            self.teardown()
        except Exception:
            log.exception("teardown of %s failed", self.name)
        if code == 0:
            self._control.send(0, {"worker": self.name, "event": "exit", "pid": os.getpid(), "stats": self._stats(),
                                   "log": SHIPPED_LOG.drain()})
