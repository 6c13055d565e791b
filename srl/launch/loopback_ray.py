"""A two-node Ray cluster on loopback (127.0.0.2 and 127.0.0.3), for tests and benchmarks.

It gets a temp dir of its own and is stopped by PID: exactly the processes that carry that dir
on their command line or hold a file in it, and their descendants (never `ray stop`, which
would stop every Ray process on the machine). The head has the custom resource `node1`, the
second node `node2`, so a config can place a group on either.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

HEAD, SECOND = "127.0.0.2", "127.0.0.3"


@dataclass(frozen=True)
class LoopbackCluster:
    address: str
    temp_dir: str

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster (Ray's agents retitle themselves, e.g. `ray::DashboardAgent`,
        so a process holding a file in the temp dir counts too), with all their descendants."""
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            if process.pid == os.getpid():
                continue
            try:
                if (any(self.temp_dir in part for part in process.info["cmdline"] or [])
                        or any(f.path.startswith(self.temp_dir) for f in process.open_files())):
                    found[process.pid] = process
                    found.update((child.pid, child) for child in process.children(recursive=True))
            except psutil.Error:
                pass
        return list(found.values())


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_ray_cluster(cpus: int = 2, env: dict[str, str] | None = None) -> Iterator[LoopbackCluster]:
    """Start the two nodes, yield the cluster, stop its processes; RuntimeError if any outlive that.

    `env`: variables set for the nodes' processes (and so their workers) beyond this process's own."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    cluster = LoopbackCluster(f"{HEAD}:{_free_port(HEAD)}", tempfile.mkdtemp(prefix="srl-ray-"))
    env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0"}
    common = [f"--num-cpus={cpus}", f"--temp-dir={cluster.temp_dir}", "--disable-usage-stats"]
    try:
        subprocess.run([ray_cli, "start", "--head", f"--node-ip-address={HEAD}", f"--port={cluster.address.split(':')[1]}",
                        "--include-dashboard=false", '--resources={"node1": 1}', *common],
                       check=True, capture_output=True, env=env, timeout=120)
        # A small object store keeps the second node within a small machine's memory.
        subprocess.run([ray_cli, "start", f"--address={cluster.address}", f"--node-ip-address={SECOND}",
                        '--resources={"node2": 1}', "--object-store-memory=300000000", common[0],
                        "--disable-usage-stats"], check=True, capture_output=True, env=env, timeout=120)
        yield cluster
    finally:
        processes = cluster.processes()
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGTERM)
        # Ray's daemons take 10 s or more to drain on SIGTERM; a throwaway cluster need not wait for that.
        _, alive = psutil.wait_procs(processes, timeout=3)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=5)
        leftover = [p.pid for p in cluster.processes() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)
        if leftover:
            raise RuntimeError(f"Ray processes of the loopback cluster left behind: {leftover}")
