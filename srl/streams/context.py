"""How a worker process rebuilds the run's `StreamContext`: what a launcher hands every worker."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from srl.streams.link import DEFAULT_HANDSHAKE_MS, DEFAULT_MAX_PENDING, StreamContext
from srl.streams.names import DirectoryNameService, NameService


@dataclass
class ContextSpec:
    """How a worker process rebuilds the run's StreamContext."""

    run_id: str
    secret: bytes
    #: A directory for `DirectoryNameService`, or `ray:<namespace>` for the cluster's key-value store.
    names: str
    #: Private directory for Unix sockets; `node` makes one per host (cluster launchers).
    ipc_dir: str
    #: Address to bind TCP sockets to; `node` means this host's own address on the cluster.
    host: str = "127.0.0.1"
    #: The largest message of each stream kind, in bytes (`streams.max_message_mb`).
    caps: dict[str, int] = field(default_factory=dict)
    #: Every worker in one process, stepped in turn (`launcher: inline`): see `StreamContext.inline`.
    inline: bool = False
    #: The gate of TCP servers (`streams.handshake_timeout_s`, `streams.max_pending_connections`).
    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_MS
    max_pending: int = DEFAULT_MAX_PENDING

    def build(self) -> StreamContext:
        host, ipc_dir = self.host, self.ipc_dir
        if self.names.startswith("ray:"):
            from srl.streams.names import RayNameService

            names: NameService = RayNameService(self.names.removeprefix("ray:"))
        else:
            names = DirectoryNameService(self.names)
        if host == "node":
            import ray

            host = ray.util.get_node_ip_address()
        if ipc_dir == "node":
            ipc_dir = os.path.join(tempfile.gettempdir(), f"srl-{self.run_id}-{host}")
            os.makedirs(ipc_dir, mode=0o700, exist_ok=True)
        return StreamContext(self.run_id, self.secret, names, ipc_dir, host, caps=self.caps, inline=self.inline,
                             handshake_timeout_ms=self.handshake_timeout_ms, max_pending=self.max_pending)
