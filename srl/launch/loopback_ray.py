"""A two-node Ray cluster on loopback (127.0.0.2 and 127.0.0.3), for tests and benchmarks.

It gets a temp dir of its own and is stopped by PID: exactly the processes that carry that dir
on their command line or hold a file in it, and their descendants (never `ray stop`, which
would stop every Ray process on the machine). The head has the custom resource `node1`, the
second node `node2`, so a config can place a group on either.

It runs in Ray's token mode, with a token of its own in its temp dir: both nodes and every
driver that joins (`cluster.env`) use that token, whatever `~/.ray/auth_token` holds, so the
cluster behaves the same on a machine that has a default token and on one that has none, and
tests exercise the secure path users run (docs/cluster.md).
"""

from __future__ import annotations

import contextlib
import os
import secrets
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


AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass(frozen=True)
class LoopbackCluster:
    address: str
    temp_dir: str

    @property
    def token_path(self) -> str:
        return os.path.join(self.temp_dir, "auth_token")

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to join the cluster: token mode and its token."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": self.token_path}

    @contextlib.contextmanager
    def driver_environment(self) -> Iterator[None]:
        """Set `env` in this process's environment (for drivers it starts), as it was afterwards."""
        saved = {name: os.environ.get(name) for name in AUTH_VARIABLES}
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the path
        os.environ.update(self.env)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

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


def _ray_start(command: list[str], env: dict[str, str]) -> None:
    """Run `ray start ...`; a failure says what Ray printed, not only its exit status."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    if result.returncode != 0:
        printed = (result.stderr + result.stdout).strip().splitlines()
        raise RuntimeError(f"{' '.join(command[1:3])} failed ({result.returncode}): " + " | ".join(printed[-8:]))


@contextlib.contextmanager
def loopback_ray_cluster(cpus: int = 2, env: dict[str, str] | None = None) -> Iterator[LoopbackCluster]:
    """Start the two nodes, yield the cluster, stop its processes; RuntimeError if any outlive that.

    `env`: variables set for the nodes' processes (and so their workers) beyond this process's own."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    cluster = LoopbackCluster(f"{HEAD}:{_free_port(HEAD)}", tempfile.mkdtemp(prefix="srl-ray-"))
    inherited = {name: value for name, value in os.environ.items() if name not in AUTH_VARIABLES}
    env = {**inherited, **(env or {}), **cluster.env, "RAY_USAGE_STATS_ENABLED": "0"}
    common = [f"--num-cpus={cpus}", f"--temp-dir={cluster.temp_dir}", "--disable-usage-stats"]
    try:
        with open(os.open(cluster.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as token:
            token.write(secrets.token_hex(32))
        _ray_start([ray_cli, "start", "--head", f"--node-ip-address={HEAD}", f"--port={cluster.address.split(':')[1]}",
                    "--include-dashboard=false", '--resources={"node1": 1}', *common], env)
        # A small object store keeps the second node within a small machine's memory.
        _ray_start([ray_cli, "start", f"--address={cluster.address}", f"--node-ip-address={SECOND}",
                    '--resources={"node2": 1}', "--object-store-memory=300000000", common[0],
                    "--disable-usage-stats"], env)
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
