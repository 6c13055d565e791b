"""The launcher interface: the only part of SRL that knows where a worker runs.

The controller is typed against it; `LocalLauncher` (processes on this machine) and
`RayLauncher` (actors on a Ray cluster) and `InlineLauncher` (every worker in this process,
stepped in turn) implement it. The loop it lives in::

    launcher.place(specs)                      # decide (and learn) each worker's host
    specs = wire(graph, host_of=launcher.host_of, ...)
    launcher.start(spec, context)              # and again to restart it
    while running: launcher.exitcode(name)     # None while it runs
    launcher.signal(name, SIGKILL); launcher.join(name, 5.0)
    launcher.stop_all(grace_s=1.0); launcher.close()

A cluster launcher may also follow its nodes (`ray.elastic`): a worker whose node died is
started again where it fits (`NoRoom` where it fits nowhere), and `growth()` asks for workers
on nodes that joined.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from srl.api.worker import Transport, WorkerSpec
from srl.streams.context import ContextSpec


class NoRoom(Exception):
    """A worker to (re)start fits on no alive node. `droppable`: the run may go on without it."""

    def __init__(self, why: str, droppable: bool) -> None:
        super().__init__(why)
        self.droppable = droppable


class Launcher(ABC):
    #: Shown in status (`local`, `ray`).
    name: str
    #: How workers reach the controller: shared memory on one host, ZeroMQ across hosts.
    control_transport: Transport
    #: The transport of every stream, whatever the config says (None: chosen from the hosts).
    stream_transport: Transport | None = None
    #: Whether one worker can hang while the others go on (the controller's watchdogs look for it).
    hangs_possible: bool = True
    #: Whether a worker may start again on another host than its first (`ray.elastic`): its
    #: streams are then wired as if every worker had a host of its own, with no relays.
    workers_move: bool = False

    def growth(self) -> dict[str, int]:
        """Workers to add to each group now (a cluster's nodes joined); each call says it once."""
        return {}

    def node_events(self) -> list[dict]:
        """Nodes that joined or left mid-run, in order (for status)."""
        return []

    def idle(self) -> None:
        """Called by the controller at every turn of its loop (the inline launcher steps its workers)."""

    def worker_context(self, context: ContextSpec) -> ContextSpec:
        """The run's context as workers placed by this launcher must rebuild it."""
        return context

    @abstractmethod
    def place(self, specs: list[WorkerSpec]) -> None:
        """Decide where each worker runs (a cluster launcher reserves its slot and learns its host)."""

    @abstractmethod
    def host_of(self, worker: str) -> str:
        """The host a placed worker runs on (the controller's for `CONTROL_KEY`)."""

    @abstractmethod
    def start(self, spec: WorkerSpec, context: ContextSpec) -> int:
        """Start (or restart) a placed worker; returns its PID."""

    @abstractmethod
    def exitcode(self, worker: str) -> int | None:
        """None while the worker runs; its exit status once it has ended."""

    @abstractmethod
    def signal(self, worker: str, sig: int) -> None:
        """Send a signal to a running worker (a cluster may only be able to kill it)."""

    @abstractmethod
    def join(self, worker: str, timeout: float) -> None:
        """Wait up to `timeout` seconds for the worker to end."""

    @abstractmethod
    def started(self) -> list[str]:
        """Every worker started so far, by name."""

    @abstractmethod
    def stop_all(self, grace_s: float) -> None:
        """Wait `grace_s` for every worker to end, then end the rest by force."""

    @abstractmethod
    def close(self) -> None:
        """Release what the launcher holds (a fork server, a cluster connection)."""
