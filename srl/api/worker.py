"""The worker contract: what a worker kind declares and what a launcher hands each worker.

Both sides import it: `srl.workers` (the shell and the kinds) and `srl.launch` (the controller,
the wiring, the launchers). A worker kind declares its `ports` (each a `Port`) and how it is
replaced (`Supervision`); a launcher gives each worker a `WorkerSpec` holding its stream ends
(`StreamEnd`) and its settings.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Literal

#: How a stream's messages travel: shared memory on one host, ZeroMQ over TCP between hosts,
#: in-process queues when every worker shares the process (`launcher: inline`).
Transport = Literal["shm", "zmq", "inproc"]
StreamKind = Literal["inference", "samples", "parameters"]

#: The name-service key of the controller's control link.
CONTROL_KEY = "control"
#: Sent to a hung worker just before it is killed: it writes every thread's stack to its log.
HUNG_SIGNAL = signal.SIGUSR1


@dataclass(frozen=True)
class Port:
    """One stream end a worker kind has: which kind of stream, and which side of it."""

    stream: StreamKind
    role: Literal["produce", "consume"]
    #: An optional port may be left unconnected (an actor reads parameters only with inline inference).
    optional: bool = False
    #: A keyed port may also be joined once per key, as `<port>/<key>` (an actor's streams of
    #: each of several policies: `samples/seeker`, `samples/hider`).
    keyed: bool = False


@dataclass(frozen=True)
class Supervision:
    """How the controller replaces a worker of this kind that died or hung."""

    #: `worker`: only the failed worker; `group`: its whole group (peers that wait on each other).
    scope: Literal["worker", "group"] = "worker"
    #: The replacement starts from the run's last checkpoint instead of fresh.
    from_checkpoint: bool = False


@dataclass
class StreamEnd:
    """One end of a named stream: the name-service key and the transport to use."""

    key: str
    transport: Transport
    #: More ends a producer writes the same messages to (a broadcast's network end, which
    #: relays on other hosts read).
    copies: list[StreamEnd] = field(default_factory=list)


@dataclass
class WorkerSpec:
    """Everything a worker needs, and nothing more: its own sections of the config."""

    name: str
    #: The kind as the graph names it (a short name or an import path).
    kind: str
    #: Its place in its group: the group's name, its index there (rank), the group's size.
    group: str
    index: int
    group_size: int
    seed: int
    #: Its kind's settings: an instance of the kind's `Config` (`srl.api.settings` for the built-in
    #: kinds), or a plain dict for a kind that declares none.
    settings: Any
    streams: dict[str, StreamEnd]
    control: StreamEnd
    run_dir: str
    heartbeat_s: float = 0.25
    orphan_timeout_s: float = 20.0
    #: The controller's PID when it runs on this worker's host: its death stops the worker at once.
    controller_pid: int | None = None
    placement: dict[str, Any] = field(default_factory=dict)
    #: Start from the run's last checkpoint (a resumed run, or a restart that asks for it).
    resume: bool = False
    #: How many times its group has been restarted as a whole (fresh rendezvous keys for each).
    generation: int = 0
