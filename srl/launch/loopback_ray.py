"""A Ray cluster of a few nodes on loopback (127.0.0.2, 127.0.0.3, ...), for tests and benchmarks.

It gets a temp dir of its own and is stopped by PID: exactly the processes that carry that dir
on their command line or hold a file in it, and their descendants (never `ray stop`, which
would stop every Ray process on the machine). Node k has the custom resource `node<k>` (the
head `node1`), so a config can place a group on any one of them; every node but the head
may also carry resources in common (`worker_resources`, e.g. `{spot: 1}`), so that a group can
run on whichever of them is alive. A node can join mid-run (`add_node`) and die whole
(`kill_node`: its raylet and every process of it, by PID), as preemptible cloud nodes do; the
cluster can be told to notice a dead node within seconds (`quick_node_deaths`).

It runs in Ray's token mode, with a token of its own in its temp dir: both nodes and every
driver that joins (`cluster.env`) use that token, whatever `~/.ray/auth_token` holds, so the
cluster behaves the same on a machine that has a default token and on one that has none, and
tests exercise the secure path users run (docs/cluster.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import psutil

HEAD, SECOND = "127.0.0.2", "127.0.0.3"
#: Ray's defaults take about 30 s to declare a node dead. `quick_node_deaths` says so within about
#: 10 s (a raylet that misses ten health checks a second apart), still far above the pauses of a
#: loaded two-core machine.
QUICK_NODE_DEATHS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "10",
                     "RAY_health_check_timeout_ms": "2000"}


AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass
class LoopbackCluster:
    address: str
    temp_dir: str
    #: The nodes' IPs, the head's first (a killed node stays listed: IPs are not reused).
    nodes: list[str] = field(default_factory=list)
    cpus: int = 2
    worker_resources: dict[str, float] = field(default_factory=dict)
    #: The environment every node's processes start with.
    node_env: dict[str, str] = field(default_factory=dict)

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

    def add_node(self) -> str:
        """Start one more node (`node<k>` and the worker resources); its IP."""
        ip = f"127.0.0.{2 + len(self.nodes)}"
        resources = {f"node{len(self.nodes) + 1}": 1, **self.worker_resources}
        # A small object store keeps a node within a small machine's memory.
        _ray_start([_ray_cli(), "start", f"--address={self.address}", f"--node-ip-address={ip}",
                    f"--resources={json.dumps(resources)}", "--object-store-memory=300000000",
                    f"--num-cpus={self.cpus}", "--disable-usage-stats"], self.node_env)
        self.nodes.append(ip)
        return ip

    def node_processes(self, ip: str) -> list[psutil.Process]:
        """Every process of the node at `ip` (its raylet, log monitor and their children: the
        node's agents and workers), found among this cluster's processes."""
        flags = (f"--node-ip-address={ip}", f"--node_ip_address={ip}")
        found: dict[int, psutil.Process] = {}
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                if any(part in flags for part in process.cmdline()):
                    found[process.pid] = process
                    found.update((child.pid, child) for child in process.children(recursive=True))
        return list(found.values())

    def kill_node(self, ip: str) -> list[int]:
        """SIGKILL every process of the node at `ip` at once, as a node that loses power; their PIDs."""
        if ip == self.nodes[0]:
            raise ValueError("the head node holds the cluster's state: kill another node")
        processes = self.node_processes(ip)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(processes, timeout=10)
        return [p.pid for p in processes]


def _ray_cli() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


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
def loopback_ray_cluster(cpus: int = 2, env: dict[str, str] | None = None, nodes: int = 2,
                         worker_resources: dict[str, float] | None = None,
                         quick_node_deaths: bool = False) -> Iterator[LoopbackCluster]:
    """Start `nodes` nodes of `cpus` CPUs each, yield the cluster, stop its processes; RuntimeError
    if any outlive that.

    `env`: variables set for the nodes' processes (and so their workers) beyond this process's own.
    `worker_resources`: custom resources every node but the head has (on top of `node<k>`).
    `quick_node_deaths`: declare a node dead after seconds of silence, not Ray's half-minute."""
    cluster = LoopbackCluster(f"{HEAD}:{_free_port(HEAD)}", tempfile.mkdtemp(prefix="srl-ray-"), cpus=cpus,
                              worker_resources=dict(worker_resources or {}))
    inherited = {name: value for name, value in os.environ.items() if name not in AUTH_VARIABLES}
    cluster.node_env = {**inherited, **(QUICK_NODE_DEATHS if quick_node_deaths else {}), **(env or {}), **cluster.env,
                        "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        with open(os.open(cluster.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as token:
            token.write(secrets.token_hex(32))
        port = cluster.address.split(":")[1]
        _ray_start([_ray_cli(), "start", "--head", f"--node-ip-address={HEAD}", f"--port={port}",
                    "--include-dashboard=false", '--resources={"node1": 1}', f"--num-cpus={cpus}",
                    f"--temp-dir={cluster.temp_dir}", "--disable-usage-stats"], cluster.node_env)
        cluster.nodes.append(HEAD)
        for _ in range(nodes - 1):
            cluster.add_node()
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
