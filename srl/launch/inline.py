"""The inline launcher: every worker of the graph in this process, stepped in turn by one loop.

No child process, no shared memory, no thread: streams run in-process (`inproc`), and the
controller's loop calls `idle()` each turn, which runs one `Worker.step()` (a heartbeat, the
commands, one `poll`) of every worker in start order. A `breakpoint()` in an env, a policy or
an algorithm therefore stops the whole run right there, and stepping on from it steps the run.
It is how a user debugs, and how tests of the control path run without starting processes.

What it needs of the workers: a `poll` never waits for another worker (the shell gives every
wait 0 ms inline: `StreamContext.inline`), and a group that serves a stream comes before the
groups that use it in the graph (the graphs' start order). Several data-parallel trainers, which
wait for each other inside a step, are refused by the config.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from typing import TextIO

from srl.api.registry import WORKERS
from srl.api.run_paths import RunPaths
from srl.api.worker import HUNG_SIGNAL, WorkerSpec
from srl.launch.launcher import Launcher
from srl.streams.context import ContextSpec
from srl.workers.base import Worker
from srl.workers.seeding import seed_process, worker_seed

log = logging.getLogger(__name__)


class _WorkerLogs(logging.Handler):
    """Each worker's log lines into `logs/<worker>.log` of its run directory, as a worker process
    writes them; lines logged outside any worker (the controller's) go to stderr from WARNING up,
    as they would without this handler."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.current: WorkerSpec | None = None
        self.files: dict[str, TextIO] = {}

    def emit(self, record: logging.LogRecord) -> None:
        spec = self.current
        if spec is None:
            if record.levelno >= logging.WARNING:
                sys.stderr.write(f"{record.getMessage()}\n")
            return
        try:
            file = self.files.get(spec.name)
            if file is None:
                paths = RunPaths(spec.run_dir)
                paths.logs.mkdir(parents=True, exist_ok=True)
                file = self.files[spec.name] = open(paths.log(spec.name), "a", buffering=1)
            when = self.formatter.formatTime(record) if self.formatter else ""
            file.write(f"{when} {spec.name} {record.levelname} {record.getMessage()}\n")
            if record.exc_info:
                file.write("".join(traceback.format_exception(*record.exc_info)))
        except OSError:
            self.handleError(record)

    def close(self) -> None:
        for file in self.files.values():
            with contextlib.suppress(OSError):
                file.close()
        self.files.clear()
        super().close()


class InlineLauncher(Launcher):
    name = "inline"
    control_transport = "inproc"
    stream_transport = "inproc"
    # One loop runs everything: a worker stuck in its poll stops the run with it (a breakpoint is
    # the point), and no other can be found hung meanwhile.
    hangs_possible = False

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self.running: dict[str, Worker] = {}
        self.specs: dict[str, WorkerSpec] = {}
        self.exitcodes: dict[str, int | None] = {}
        self._logs = _WorkerLogs()
        self._logs.setFormatter(logging.Formatter())
        self._root_level = logging.getLogger().level
        logging.getLogger().addHandler(self._logs)
        logging.getLogger().setLevel(logging.INFO)
        self._cwd: str | None = None

    def worker_context(self, context: ContextSpec) -> ContextSpec:
        return dataclasses.replace(context, inline=True)

    def place(self, specs: list[WorkerSpec]) -> None:
        """Every worker runs here; nothing to decide."""

    def host_of(self, worker: str) -> str:
        return self.host

    @contextlib.contextmanager
    def _as(self, spec: WorkerSpec) -> Iterator[None]:
        """While a worker runs: its log lines go to its log."""
        previous, self._logs.current = self._logs.current, spec
        try:
            yield
        finally:
            self._logs.current = previous

    def start(self, spec: WorkerSpec, context: ContextSpec) -> int:
        if self._cwd is None:
            # Simulators that write files into the working directory write them in the run directory.
            self._cwd = os.getcwd()
            workdir = RunPaths(spec.run_dir).workdir
            workdir.mkdir(parents=True, exist_ok=True)
            os.chdir(workdir)
        self.specs[spec.name] = spec
        with self._as(spec):
            # Before the worker builds anything random, as a worker process does.
            seed_process(worker_seed(spec.seed, spec.group, spec.index, spec.generation))
            worker = WORKERS.resolve(spec.kind)(spec, context.build())
            logging.info("starting %s (inline, pid %d)", spec.name, os.getpid())
            worker.connect()
            self.running[spec.name], self.exitcodes[spec.name] = worker, None
            if not worker.begin():
                self._end(spec.name)
        return os.getpid()

    def idle(self) -> None:
        """One step of every running worker, in start order."""
        for name, worker in list(self.running.items()):
            with self._as(self.specs[name]):
                if not worker.step():
                    self._end(name)

    def _end(self, name: str) -> None:
        worker = self.running.pop(name)
        with self._as(self.specs[name]):
            self.exitcodes[name] = worker.end()
            logging.info("%s exits with status %d", name, self.exitcodes[name])

    def exitcode(self, worker: str) -> int | None:
        return self.exitcodes.get(worker)

    def signal(self, worker: str, sig: int) -> None:
        if worker not in self.running or sig == HUNG_SIGNAL:
            return
        if sig == signal.SIGKILL:  # ended where it stands: no goodbye, its links closed
            killed = self.running.pop(worker)
            with self._as(self.specs[worker]), contextlib.suppress(Exception):
                killed.teardown()
                killed.close_control()
            self.exitcodes[worker] = -signal.SIGKILL
        else:  # asked to stop: it says goodbye at its next step
            self.running[worker].request_stop()

    def join(self, worker: str, timeout: float) -> None:
        """A worker ends within a step: nothing to wait for."""

    def started(self) -> list[str]:
        return list(self.exitcodes)

    def stop_all(self, grace_s: float) -> None:
        """Each worker still running gets a step to stop in (goodbye and teardown), then is ended."""
        for name in list(self.running):
            self.running[name].request_stop()
        self.idle()
        for name in list(self.running):
            self.signal(name, signal.SIGKILL)

    def close(self) -> None:
        self.stop_all(0.0)
        logging.getLogger().removeHandler(self._logs)
        logging.getLogger().setLevel(self._root_level)
        self._logs.close()
        if self._cwd is not None:
            os.chdir(self._cwd)
