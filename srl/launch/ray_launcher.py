"""The Ray launcher: the same worker graph, each worker a Ray actor on a cluster.

Ray places and supervises processes; data still moves over SRL's own streams (shared
memory between workers on one node, ZeroMQ over TCP between nodes), because a Ray call
costs about a millisecond and the data path needs microseconds. Endpoints find each
other through the cluster's key-value store. Worker groups are pinned to nodes with Ray
resources (`actors.resources: {node2: 0.01}`).

Placement happens before wiring: every worker's actor is created first, reports the node
it landed on, and only then does the graph choose each stream's transport.

With `ray.elastic`, the launcher follows the cluster's nodes: it places each worker on a
node it chooses (spreading the actors), has every stream wired over TCP (`workers_move`: each
worker a host of its own, no relays), places a worker whose node died on a node left that has room,
and asks for actors on a node that joins (`growth`).

Clusters of Ray 2.60 and later may require a token from every process that joins them
(`RAY_AUTH_MODE=token`); `connect` checks that before joining, so a driver without the
cluster's token gets one line saying what to set instead of Ray's retries and a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from srl.api.config import ConfigError, ElasticConfig
from srl.api.worker import CONTROL_KEY, WorkerSpec
from srl.launch.launcher import Launcher, NoRoom
from srl.streams import shm
from srl.streams.context import ContextSpec

AUTH_DOCS = "docs/cluster.md, \"Token authentication\""
#: The group `ray.elastic` grows and shrinks with the nodes.
ELASTIC_GROUP = "actor"
#: Seconds between two looks at the cluster's nodes (an elastic run's).
NODE_POLL_S = 1.0


def connect(address: str | None, namespace: str | None = None) -> None:
    """Join the Ray cluster at `address` (`HOST:PORT`; None: RAY_ADDRESS where the environment sets
    it, as under `ray job submit`), or else start a private one on this machine.

    ConfigError in one line where the cluster refuses this process's token (or its lack of one).
    A private cluster runs in token mode with a token of its own in a private temp dir, unless
    the environment sets Ray's token variables: Ray would otherwise write `~/.ray/auth_token`,
    after which every `ray start --head` on this machine demands that token of nodes joining it."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        _private_token()
        address = "local"
    elif ":" in address and "://" not in address:
        _check_admitted(address)
    ray.init(address=address, namespace=namespace, log_to_driver=False, configure_logging=False)


def _private_token() -> None:
    """A fresh token for the private cluster this process starts (and any later one). Ray turns on
    token mode for a cluster `ray.init` starts and reads the token from RAY_AUTH_TOKEN_PATH; it writes
    `~/.ray/auth_token` only where no token is found."""
    if any(os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return  # the user's own choice
    directory = tempfile.mkdtemp(prefix="srl-ray-token-")  # 0700
    atexit.register(shutil.rmtree, directory, ignore_errors=True)  # the cluster ends with this process
    path = os.path.join(directory, "auth_token")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as token:
        token.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = path


def _check_admitted(address: str) -> None:
    """ConfigError if the cluster's GCS at `address` refuses this process's authentication."""
    from ray._raylet import GcsClient

    try:
        with _quiet_stderr():  # Ray's client logs each refusal itself, besides raising
            GcsClient(address=address)
    except ray.exceptions.AuthenticationError:
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            raise ConfigError(
                f"ray.address={address}: the cluster requires Ray's token authentication and this process "
                f"sends no token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to a file holding the cluster's "
                f"token (or RAY_AUTH_TOKEN to the token itself); {AUTH_DOCS}") from None
        source = ("RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else
                  f"RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})" if os.environ.get("RAY_AUTH_TOKEN_PATH")
                  else "~/.ray/auth_token (neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set)")
        raise ConfigError(f"ray.address={address}: the cluster refuses the token from {source}: set "
                          f"RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN) to the cluster's own token; {AUTH_DOCS}") from None
    except ray.exceptions.RayError as exc:  # no GCS there, or it did not answer
        raise ConfigError(f"ray.address={address}: cannot reach the cluster's GCS there: {exc}") from None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for the block: Ray's C++ client writes there directly."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@ray.remote(max_restarts=0, max_concurrency=2)
class _WorkerActor:
    """Hosts one worker. `run` blocks for the worker's life; `where` answers meanwhile."""

    def where(self) -> tuple[str, int, str]:
        return ray.util.get_node_ip_address(), os.getpid(), ray.get_runtime_context().get_node_id()

    def run(self, spec: WorkerSpec, context: ContextSpec) -> int:
        from srl.workers.entry import run_worker

        return run_worker(spec, context, own_process=False)


@ray.remote(num_cpus=0)
def _clean_node(run_id: str) -> list[str]:
    """Remove what a run left on this node: shared memory and its private socket directory."""
    removed = shm.sweep(f"{shm.PREFIX}{run_id}_")
    for entry in os.listdir(tempfile.gettempdir()):
        if entry.startswith(f"srl-{run_id}-"):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), entry), ignore_errors=True)
    return removed


def _asks(options: dict[str, Any]) -> dict[str, float]:
    """What one worker's actor asks of a node, as Ray names the resources."""
    asks = {"CPU": options["num_cpus"], "GPU": options["num_gpus"], **options["resources"]}
    return {name: float(amount) for name, amount in asks.items() if amount > 0}


def unplaceable(asks: dict[str, dict[str, float]], nodes: list[dict[str, Any]]) -> str | None:
    """Why workers asking `asks` (worker -> resource -> amount) could never all be placed on
    the alive nodes of `ray.nodes()`, judged by the nodes' total resources; None if they might.

    Ray waits for resources that are only busy, and for ones no node will ever have, alike;
    this catches the second kind before a run waits on it. Two checks, both necessary: each
    worker fits some node on its own, and the workers that fit only on some set of nodes ask
    no more of each resource than those nodes hold in all. (Packing whole workers onto nodes
    may fail even so; Ray's own wait covers that.)"""
    alive = {n["NodeID"]: n for n in nodes if n.get("Alive")}
    where = lambda ids: ", ".join(sorted(alive[i].get("NodeManagerAddress", i) for i in ids))  # noqa: E731
    fits: dict[str, frozenset[str]] = {}
    for worker, ask in asks.items():
        fits[worker] = frozenset(i for i, n in alive.items()
                                 if all(n.get("Resources", {}).get(r, 0.0) >= amount for r, amount in ask.items()))
        if not fits[worker]:
            have = "; ".join(f"{n.get('NodeManagerAddress', i)}: {_public(n.get('Resources', {}))}"
                             for i, n in alive.items())
            return (f"worker {worker} asks for {_public(ask)}, which none of the cluster's {len(alive)} alive nodes "
                    f"has ({have}); lower its group's placement or add such a node")
    # The narrowest node sets first, so that the reason names the fewest nodes (and the same on every run).
    for nodes_set in sorted(set(fits.values()), key=lambda ids: (len(ids), where(ids))):
        confined = [w for w, f in fits.items() if f <= nodes_set]
        demand: dict[str, float] = defaultdict(float)
        for worker in confined:
            for r, amount in asks[worker].items():
                demand[r] += amount
        for r, amount in demand.items():
            supply = sum(alive[i].get("Resources", {}).get(r, 0.0) for i in nodes_set)
            if amount > supply + 1e-9:
                groups = sorted({w.rsplit(".", 1)[0] for w in confined})
                return (f"the {len(confined)} workers that fit only on node(s) {where(nodes_set)} (groups "
                        f"{', '.join(groups)}) ask for {amount:g} {r} in all, and those nodes have {supply:g}; "
                        f"lower the groups' placement.num_cpus (or num_gpus, resources) or add nodes")
    return None


def _public(resources: dict[str, float]) -> str:
    """A node's resources without Ray's internal ones (memory, node:IP labels)."""
    shown = {r: v for r, v in resources.items()
             if r not in ("memory", "object_store_memory") and not r.startswith("node:")}
    return ", ".join(f"{r} {v:g}" for r, v in sorted(shown.items())) or "nothing"


@dataclasses.dataclass
class Occupancy:
    """What an elastic run's placement counts on: each alive node's free resources, and its live
    workers by (group, node)."""

    free: dict[str, dict[str, float]]
    peers: Counter[tuple[str, str]]


def _fits(ask: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(r, 0.0) >= amount - 1e-9 for r, amount in ask.items())


class RayLauncher(Launcher):
    name = "ray"
    control_transport = "zmq"

    def __init__(self, address: str | None, run_id: str, elastic: ElasticConfig | None = None) -> None:
        self.run_id = run_id
        self.elastic = elastic
        self.workers_move = elastic is not None
        self.namespace = f"srl-{run_id}"
        connect(address, self.namespace)
        self.driver_host = ray.util.get_node_ip_address()
        self.actors: dict[str, Any] = {}
        self.refs: dict[str, Any] = {}
        self.hosts: dict[str, str] = {}
        self.pids: dict[str, int] = {}
        self.nodes: dict[str, str] = {}
        self.options: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, str] = {}
        #: Alive nodes (id -> IP) as last seen, nodes that joined or left since the start, and the
        #: joined node of each actor to add: asked of the controller (`growth`), then placed there.
        self.alive: dict[str, str] = self._alive_nodes() if elastic else {}
        self.events: list[dict[str, Any]] = []
        self.to_grow: list[str] = []
        self.growing: list[str] = []
        self.began = time.monotonic()
        self.next_poll = 0.0

    # ------------------------------------------------------------------ following the nodes
    @staticmethod
    def _alive_nodes() -> dict[str, str]:
        return {n["NodeID"]: n.get("NodeManagerAddress", n["NodeID"]) for n in ray.nodes() if n.get("Alive")}

    def _live(self, group: str | None = None) -> list[str]:
        """Workers started and not ended (of `group`)."""
        return [name for name in self.refs if (group is None or self.groups.get(name) == group)
                and self.exitcode(name) is None]

    def _occupancy(self) -> Occupancy:
        """Each alive node's free resources (what Ray says is free, and never more than its total
        less what this run's live workers ask: Ray's own count lags behind a placement), and how
        many live workers of each group it holds. One pass over the workers."""
        from ray._private.state import available_resources_per_node, total_resources_per_node

        available, total = available_resources_per_node(), total_resources_per_node()
        used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        peers: Counter[tuple[str, str]] = Counter()
        for name in self._live():
            node = self.nodes.get(name, "")
            peers[self.groups[name], node] += 1
            for r, amount in _asks(self.options[name]).items():
                used[node][r] += amount
        free = {node: {r: min(available.get(node, {}).get(r, 0.0), amount - used[node][r])
                       for r, amount in total[node].items()} for node in total if node in self.alive}
        return Occupancy(free, peers)

    def _choose_node(self, name: str, occupancy: Occupancy, exclude: Collection[str] = ()) -> str | None:
        """The alive node (not in `exclude`) with room for `name` and the fewest workers of its group,
        then the most free CPU; the worker is counted there in `occupancy`. None: no node has room."""
        ask, group, free = _asks(self.options[name]), self.groups[name], occupancy.free
        fitting = [node for node, room in free.items() if node not in exclude and _fits(ask, room)]
        if not fitting:
            return None
        node = min(fitting, key=lambda n: (occupancy.peers[group, n], -free[n].get("CPU", 0.0), self.alive[n]))
        occupancy.peers[group, node] += 1
        for r, amount in ask.items():
            free[node][r] = free[node].get(r, 0.0) - amount
        return node

    def _poll_nodes(self) -> None:
        """Note nodes that left or joined; ask for actors on each joined node, up to `max_actors`."""
        alive = self._alive_nodes()
        at = round(time.monotonic() - self.began, 1)
        for node in self.alive.keys() - alive.keys():
            self.events.append({"event": "left", "node": self.alive[node], "at_s": at})
        joined = alive.keys() - self.alive.keys()
        self.alive = alive
        actors = [n for n in self.options if self.groups.get(n) == ELASTIC_GROUP]
        for node in sorted(joined, key=alive.get):
            room = 0
            if actors:  # how many of the group's asks the node's free resources hold
                free, ask = self._occupancy().free.get(node, {}), _asks(self.options[actors[0]])
                room = min(int((free.get(r, 0.0) + 1e-9) // amount) for r, amount in ask.items())
            wanted = self.elastic.max_actors - len(self._live(ELASTIC_GROUP)) - len(self.to_grow)
            added = max(0, min(room, wanted))
            self.to_grow += [node] * added
            self.events.append({"event": "joined", "node": alive[node], "at_s": at, "actors_added": added})

    def idle(self) -> None:
        if self.elastic and time.monotonic() >= self.next_poll:
            self.next_poll = time.monotonic() + NODE_POLL_S
            self._poll_nodes()

    def growth(self) -> dict[str, int]:
        self.growing, self.to_grow = self.to_grow, []
        return {ELASTIC_GROUP: len(self.growing)} if self.growing else {}

    def node_events(self) -> list[dict[str, Any]]:
        return list(self.events)

    def worker_context(self, context: ContextSpec) -> ContextSpec:
        return dataclasses.replace(context, names=f"ray:{self.namespace}", ipc_dir="node", host="node")

    def place(self, specs: list[WorkerSpec]) -> None:
        """Create every worker's actor where its group's resources put it; learn the nodes."""
        for spec in specs:
            placement = spec.placement or {}
            options = {"num_cpus": placement.get("num_cpus", 0.5), "num_gpus": placement.get("num_gpus", 0),
                       "resources": dict(placement.get("resources") or {})}
            if placement.get("near"):  # on the same node as another worker (a relay beside its readers)
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.nodes[placement["near"]], soft=False)
            self.options[spec.name] = options
            self.groups[spec.name] = spec.group
        if self.elastic:
            self._choose_nodes(specs)
        why = unplaceable({s.name: _asks(self.options[s.name]) for s in specs if not (s.placement or {}).get("near")},
                          ray.nodes())
        if why:
            raise ConfigError(f"placement: {why}")
        for spec in specs:
            self.actors[spec.name] = _WorkerActor.options(**self.options[spec.name]).remote()
        where = ray.get([self.actors[s.name].where.remote() for s in specs], timeout=300)
        for spec, (host, pid, node) in zip(specs, where):
            self.hosts[spec.name], self.pids[spec.name], self.nodes[spec.name] = host, pid, node

    def _choose_nodes(self, specs: list[WorkerSpec]) -> None:
        """Every worker on a node of our choosing (where none has room yet, Ray's choice); actors
        added for a node that joined go there while it has room."""
        occupancy = self._occupancy()
        for spec in specs:
            if (spec.placement or {}).get("near"):
                continue
            joined = self.growing.pop(0) if spec.group == ELASTIC_GROUP and self.growing else None
            others = set(occupancy.free) - {joined}
            node = ((joined and self._choose_node(spec.name, occupancy, exclude=others))
                    or self._choose_node(spec.name, occupancy))
            if node is not None:
                self.options[spec.name]["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)

    def _place_again(self, spec: WorkerSpec) -> tuple[str, int, str]:
        """A new actor for a worker that died: on another node where one has room (its own may be
        dying: Ray takes seconds to say so), else on its own; a node where the new actor dies before
        it runs is given up. NoRoom if no node is left."""
        previous, failed = self.nodes.get(spec.name), set()
        for _ in range(3):
            occupancy = self._occupancy()
            node = (self._choose_node(spec.name, occupancy, exclude={previous, *failed})
                    or self._choose_node(spec.name, occupancy, exclude=failed))
            if node is None:
                break
            self.options[spec.name]["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            self.actors[spec.name] = _WorkerActor.options(**self.options[spec.name]).remote()
            try:
                return ray.get(self.actors[spec.name].where.remote(), timeout=300)
            except ray.exceptions.RayActorError:  # that node died meanwhile
                failed.add(node)
        raise self._no_room(spec)

    def _no_room(self, spec: WorkerSpec) -> NoRoom:
        """Why `spec` cannot be started again: actors above `min_actors` are dropped, others stop the run."""
        asks = _public(_asks(self.options[spec.name]))
        why = f"worker {spec.name} fits on no node left (it asks for {asks})"
        if spec.group != ELASTIC_GROUP:
            return NoRoom(f"{why}: nowhere to restart it", droppable=False)
        left = len([n for n in self._live(ELASTIC_GROUP) if n != spec.name])
        if left < self.elastic.min_actors:
            return NoRoom(f"{why}, and {left} actors are below ray.elastic.min_actors "
                          f"({self.elastic.min_actors})", droppable=False)
        return NoRoom(f"{why}: dropped, {left} actors go on", droppable=True)

    def host_of(self, worker: str) -> str:
        return self.driver_host if worker == CONTROL_KEY else self.hosts.get(worker, self.driver_host)

    def start(self, spec: WorkerSpec, context: ContextSpec) -> int:
        if spec.name in self.refs and self.elastic:
            self.hosts[spec.name], self.pids[spec.name], self.nodes[spec.name] = self._place_again(spec)
        elif spec.name in self.refs:  # a restart: the old actor is gone, place a new one where it was
            follow = "ray.elastic lets workers follow the cluster's nodes (docs/cluster.md)"
            if (why := unplaceable({spec.name: _asks(self.options[spec.name])}, ray.nodes())) is not None:
                raise NoRoom(f"worker {spec.name} cannot start again: {why}; {follow}", droppable=False)
            self.actors[spec.name] = _WorkerActor.options(**self.options[spec.name]).remote()
            try:
                where = ray.get(self.actors[spec.name].where.remote(), timeout=300)
            except ray.exceptions.RayActorError:  # Ray placed it on a node it had not yet seen die
                raise NoRoom(f"worker {spec.name} cannot start again: its new Ray actor died before it ran (its "
                             f"node may have died); {follow}", droppable=False) from None
            except ray.exceptions.GetTimeoutError:
                raise NoRoom(f"worker {spec.name} cannot start again: Ray placed it nowhere within 300 s; {follow}",
                             droppable=False) from None
            self.hosts[spec.name], self.pids[spec.name], self.nodes[spec.name] = where
        self.refs[spec.name] = self.actors[spec.name].run.remote(spec, context)
        return self.pids[spec.name]

    def exitcode(self, worker: str) -> int | None:
        ref = self.refs.get(worker)
        if ref is None:
            return None
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            return None
        try:
            return int(ray.get(ref))
        except ray.exceptions.RayActorError:
            return -signal.SIGKILL
        except Exception:
            return 1

    def signal(self, worker: str, sig: int) -> None:
        # Ray offers no signals to an actor busy in a method; any stop request is a kill.
        if worker in self.actors and self.exitcode(worker) is None:
            ray.kill(self.actors[worker], no_restart=True)

    def join(self, worker: str, timeout: float) -> None:
        if worker in self.refs:
            ray.wait([self.refs[worker]], timeout=timeout)

    def started(self) -> list[str]:
        return list(self.refs)

    def stop_all(self, grace_s: float) -> None:
        pending = [ref for name, ref in self.refs.items() if self.exitcode(name) is None]
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=grace_s)
        for name in self.refs:
            self.signal(name, signal.SIGKILL)

    def close(self) -> None:
        """Sweep every node's leftovers for this run, then leave the cluster."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        tasks = [_clean_node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                 .remote(self.run_id) for n in nodes]
        try:
            for task in tasks:
                with contextlib.suppress(ray.exceptions.TaskUnschedulableError, ray.exceptions.NodeDiedError):
                    ray.get(task, timeout=30)  # a node that died meanwhile has nothing left to sweep
        finally:
            ray.shutdown()
