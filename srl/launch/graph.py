"""Wiring: from a resolved graph and the launcher's placement to every worker's spec.

This is the one place that decides which stream end each worker holds and over which
transport. It names no worker kind: groups become workers (`<group>.<i>`), and each
stream is wired by its kind (`srl.api.graph.STREAM_KINDS`):

* sharded (samples, inference): consumer k of n holds endpoint `<stream>/<k>`; producer i
  connects to consumer i mod n. The transport of each shard follows the hosts of its ends.
* broadcast (parameters): the producing group holds `<stream>`; readers on its host read
  that shared memory. Each other host with readers gets ONE copy over TCP into a relay
  worker there, which re-publishes it into the host's shared memory. Without relays (workers
  that may move between hosts), each reader elsewhere subscribes to the TCP copy itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from srl.api.graph import STREAM_KINDS, ResolvedGraph
from srl.api.worker import StreamEnd, Transport, WorkerSpec

RELAY_GROUP = "relay"


def choose_transport(forced: str, hosts: set[str]) -> Transport:
    """Shared memory when every end is on one host, ZeroMQ otherwise, unless the config forces one."""
    if forced != "auto":
        return forced  # type: ignore[return-value]
    return "shm" if len(hosts) <= 1 else "zmq"


def worker_names(resolved: ResolvedGraph) -> dict[str, list[str]]:
    """The workers of each group, in start order."""
    return {group: [f"{group}.{i}" for i in range(g.count)] for group, g in resolved.graph.groups.items()}


def wire(resolved: ResolvedGraph, forced_transport: str, host_of: Callable[[str], str], *, seed: int,
         run_dir: str, control: StreamEnd, resume: bool = False, relays: bool = True) -> list[WorkerSpec]:
    """Every worker's spec; `host_of(worker_name)` is the launcher's placement; `relays`: whether
    parameters reach other hosts through a relay there."""
    members = worker_names(resolved)
    ends: dict[str, dict[str, StreamEnd]] = {name: {} for names in members.values() for name in names}
    relay_ends: list[tuple[str, StreamEnd, StreamEnd]] = []  # (reader it sits beside, source, sink)
    for stream, spec in resolved.streams.items():
        producers = [(name, port) for group, port in spec["produce"] for name in members[group]]
        consumers = [(name, port) for group, port in spec["consume"] for name in members[group]]
        if STREAM_KINDS[spec["kind"]] == "sharded":
            _shard(stream, producers, consumers, ends, forced_transport, host_of)
        else:
            relay_ends += _broadcast(stream, producers, consumers, ends, forced_transport, host_of, relays)

    specs = []
    for group, names in members.items():
        g = resolved.graph.groups[group]
        # A group with a home of its own (a population member's) keeps its checkpoints and logs there.
        where = str(Path(run_dir) / g.home) if g.home else run_dir
        for i, name in enumerate(names):
            specs.append(WorkerSpec(name, g.kind, group, i, len(names), seed, settings=g.settings, streams=ends[name],
                                    control=control, run_dir=where, placement=g.placement.model_dump(),
                                    resume=resume))
    for k, (near, source, sink) in enumerate(relay_ends):
        specs.append(WorkerSpec(f"{RELAY_GROUP}.{k}", "relay", RELAY_GROUP, k, len(relay_ends), seed, settings={},
                                streams={"source": source, "sink": sink}, control=control, run_dir=run_dir,
                                placement={"near": near, "num_cpus": 0.1}))
    return specs


def _shard(stream: str, producers: list[tuple[str, str]], consumers: list[tuple[str, str]],
           ends: dict[str, dict[str, StreamEnd]], forced: str, host_of: Callable[[str], str]) -> None:
    for k, (consumer, port) in enumerate(consumers):
        mine = [(name, p) for i, (name, p) in enumerate(producers) if i % len(consumers) == k]
        end = StreamEnd(f"{stream}/{k}", choose_transport(forced, {host_of(n) for n in [consumer, *(n for n, _ in mine)]}))
        ends[consumer][port] = end
        for name, p in mine:
            ends[name][p] = end


def _broadcast(stream: str, producers: list[tuple[str, str]], readers: list[tuple[str, str]],
               ends: dict[str, dict[str, StreamEnd]], forced: str, host_of: Callable[[str], str], relays: bool = True
               ) -> list[tuple[str, StreamEnd, StreamEnd]]:
    """Wire one parameter stream; returns the relays it needs (one per other host with readers)."""
    if forced != "auto":
        end = StreamEnd(stream, forced)  # type: ignore[arg-type]
        for name, port in [*producers, *readers]:
            ends[name][port] = end
        return []
    home = host_of(producers[0][0])  # rank 0 publishes; data-parallel peers hold the same end
    published = StreamEnd(stream, "shm")
    net = StreamEnd(f"{stream}/net", "zmq")
    node_ends: dict[str, tuple[str, StreamEnd]] = {}  # host -> (a reader there, its shared-memory end)
    direct = False  # a reader elsewhere subscribes to the TCP copy itself
    for name, port in readers:
        host = host_of(name)
        if host == home:
            ends[name][port] = published
        elif not relays:
            ends[name][port], direct = net, True
        else:
            near, end = node_ends.setdefault(host, (name, StreamEnd(f"{stream}/node{len(node_ends)}", "shm")))
            ends[name][port] = end
    if node_ends or direct:
        published.copies.append(net)
    for name, port in producers:
        ends[name][port] = published
    return [(near, net, end) for near, end in node_ends.values()]
