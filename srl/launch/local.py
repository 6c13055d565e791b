"""The local launcher: every worker a process on this machine, no external service.

Workers are forked from a fork server that has already imported torch and srl, so a
worker (or a restarted one) starts in milliseconds instead of re-importing everything.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess

from srl.api.worker import WorkerSpec
from srl.launch.launcher import Launcher
from srl.streams.context import ContextSpec

_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Hide the parent's `__main__` from multiprocessing while a process starts.

    A worker runs srl's own entry point and never needs it, but multiprocessing would import
    the parent's script again in every child: a user's script without a `__main__` guard would
    start its run again there, and `python -` or a notebook's kernel has no file to import.
    """
    main = sys.modules["__main__"]
    with _MAIN_LOCK:
        saved = {name: getattr(main, name) for name in ("__file__", "__spec__") if hasattr(main, name)}
        main.__spec__ = None
        if "__file__" in saved:
            del main.__file__
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(main, name, value)


def _run_worker(spec: WorkerSpec, context: ContextSpec) -> None:
    # Imported here, in the worker: the launcher itself never loads torch.
    from srl.workers.entry import run_worker

    sys.exit(run_worker(spec, context))


class LocalLauncher(Launcher):
    name = "local"
    control_transport = "shm"

    #: Imported once by the fork server: every worker forked from it starts with them loaded.
    PRELOAD = ["srl.workers.entry", "srl.workers.actor", "srl.workers.policy_worker", "srl.workers.trainer",
               "srl.workers.relay"]

    def __init__(self) -> None:
        self._mp = mp.get_context("forkserver")
        self._mp.set_forkserver_preload(self.PRELOAD)
        self.processes: dict[str, BaseProcess] = {}
        self.host = socket.gethostname()

    @classmethod
    def prepare(cls) -> None:
        """Start the fork server (and its imports) ahead of the first worker."""
        mp.get_context("forkserver").set_forkserver_preload(cls.PRELOAD)
        with _main_module_hidden():
            forkserver.ensure_running()

    def place(self, specs: list[WorkerSpec]) -> None:
        """Every worker runs here; nothing to decide."""

    def host_of(self, worker: str) -> str:
        return self.host

    def start(self, spec: WorkerSpec, context: ContextSpec) -> int:
        process = self._mp.Process(target=_run_worker, args=(spec, context), name=spec.name, daemon=False)
        with _main_module_hidden():
            process.start()
        self.processes[spec.name] = process
        return process.pid or 0

    def exitcode(self, worker: str) -> int | None:
        return self.processes[worker].exitcode

    def signal(self, worker: str, sig: int) -> None:
        process = self.processes[worker]
        if process.exitcode is None and process.pid:
            try:
                os.kill(process.pid, sig)
            except ProcessLookupError:
                pass

    def join(self, worker: str, timeout: float) -> None:
        self.processes[worker].join(timeout)

    def started(self) -> list[str]:
        return list(self.processes)

    def stop_all(self, grace_s: float) -> None:
        """Wait `grace_s` for every worker to exit, then SIGTERM, then SIGKILL what is left (by PID)."""
        for sig, wait in ((None, grace_s), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            alive = [n for n, p in self.processes.items() if p.exitcode is None]
            if not alive:
                break
            if sig is not None:
                for name in alive:
                    self.signal(name, sig)
            deadline = time.monotonic() + wait
            for name in alive:
                self.processes[name].join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop the workers, then the fork server itself (we started it, we stop it).

        Left alone it exits only once it notices our exit, and its interpreter (with torch
        loaded) takes most of a second to wind down after we are gone.
        """
        self.stop_all(0.0)
        self.stop_fork_server()

    @staticmethod
    def stop_fork_server() -> None:
        server = getattr(forkserver, "_forkserver", None)
        if server is not None and hasattr(server, "_stop"):  # CPython's own way to stop it and reap it
            server._stop()
