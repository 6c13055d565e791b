"""The worker graph as data: groups of workers joined by named streams.

An experiment is a graph. A *group* is `count` workers of one *kind* (a class found by
import path, like envs, policies and algorithms); each worker kind declares its *ports*,
the stream ends it has. A group joins a port to a named *stream*; every group whose port
names the same stream is on it, as a producer or a consumer according to the port.

    Graph({
        "trainer": Group(kind="trainer", streams={"samples": "samples", "parameters": "parameters"}),
        "actor":   Group(kind="actor", count=4, streams={"samples": "samples", "parameters": "parameters"}),
    })

How a stream's ends connect follows from its kind (`STREAM_KINDS`): samples and inference
are *sharded* (each consumer owns an endpoint; producer i talks to consumer i mod n),
parameters are *broadcast* (one group publishes; every consumer reads the newest). An
algorithm brings its default graph (`Algorithm.graph`, built in `srl.graphs`), run modes add
to it (`srl.launch.modes`), and the config's `workers:` section overrides a group's count, placement
and settings, or adds groups of any kind (`srl.prepare` puts them together). Which transport
each stream uses is decided later, from where the launcher put its ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, PositiveInt

from srl.api.config import ConfigError, GroupOverride, Placement
from srl.api.registry import WORKERS, RegistryError
from srl.api.worker import Port

#: How the ends of each stream kind connect.
STREAM_KINDS: dict[str, Literal["sharded", "broadcast"]] = {
    "inference": "sharded",   # producer: an actor asking; consumer: a policy worker answering
    "samples": "sharded",     # producer: pushes trajectories (with backpressure); consumer: pulls them
    "parameters": "broadcast",  # producer: one publisher (rank 0 of its group); consumers: subscribers
}


class GraphError(ValueError):
    """A graph that cannot be wired: one line naming the group, port or stream."""


class Group(BaseModel):
    """`count` workers of one kind, where they run, what they are told, which streams they join."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    #: A short name (`actor`, `policy`, `trainer`, `relay`) or `package.module:Class` of a worker kind.
    kind: str
    count: PositiveInt = 1
    placement: Placement = Placement()
    #: The kind's own settings: an instance of its `Config` (the built-in kinds' are in
    #: `srl.api.settings`), or a mapping that `resolve` validates against it.
    settings: Any = {}
    #: Port name -> stream name.
    streams: dict[str, str] = {}
    #: Where, under the run directory, its workers keep their checkpoints and logs ("": the run's own;
    #: a population member's groups: `members/<member>`).
    home: str = ""


class Graph(BaseModel):
    """Groups by name, in start order (consumers before their producers keeps start-up quick)."""

    model_config = ConfigDict(extra="forbid")

    groups: dict[str, Group]

    def stream_ends(self, ports_of: Mapping[str, Mapping[str, Port]]) -> dict[str, dict[str, list[tuple[str, str]]]]:
        """{stream: {"kind": ..., "produce": [(group, port)], "consume": [(group, port)]}}, checked.

        `ports_of` maps each group's kind to the ports it declares. Raises `GraphError`.
        """
        streams: dict[str, dict[str, Any]] = {}
        for name, group in self.groups.items():
            ports = ports_of[group.kind]
            for port, stream in group.streams.items():
                base, keyed, _ = port.partition("/")
                if base not in ports or (keyed and not ports[base].keyed):
                    raise GraphError(f"workers.{name}.streams: kind {group.kind!r} has no port {port!r} "
                                     f"(its ports: {', '.join(ports) or 'none'})")
                declared = ports[base]
                entry = streams.setdefault(stream, {"kind": declared.stream, "produce": [], "consume": []})
                if entry["kind"] != declared.stream:
                    raise GraphError(f"workers.{name}.streams.{port}: stream {stream!r} is a {entry['kind']} stream; "
                                     f"this port takes a {declared.stream} stream")
                entry[declared.role].append((name, port))
            for port, declared in ports.items():
                joined = port in group.streams or any(p.startswith(f"{port}/") for p in group.streams)
                if not declared.optional and not joined:
                    raise GraphError(f"workers.{name}.streams: port {port!r} ({declared.stream}) is not connected")
        for stream, entry in streams.items():
            for role in ("produce", "consume"):
                if not entry[role]:
                    side = "produces" if role == "produce" else "consumes"
                    raise GraphError(f"stream {stream!r}: no group {side} it "
                                     f"(on it: {', '.join(g for g, _ in entry['produce'] + entry['consume'])})")
            if STREAM_KINDS[entry["kind"]] == "broadcast" and len(entry["produce"]) > 1:
                raise GraphError(f"stream {stream!r}: a parameters stream has one publishing group, not "
                                 f"{', '.join(g for g, _ in entry['produce'])}")
        return streams


def apply_overrides(graph: Graph, overrides: Mapping[str, GroupOverride]) -> Graph:
    """The graph with the config's `workers:` entries applied (settings merge key by key, nested too)."""
    groups = dict(graph.groups)
    for name, change in overrides.items():
        given = change.model_dump(exclude_none=True)
        if name not in groups:
            if "kind" not in given:
                raise GraphError(f"workers.{name}.kind: required for a new group (the graph has "
                                 f"{', '.join(groups)})")
            groups[name] = Group(**given)
            continue
        if "settings" in given:
            given["settings"] = _merged(_plain(groups[name].settings), given["settings"])
        if change.placement is not None:  # only the fields the override names
            given["placement"] = groups[name].placement.model_copy(
                update=change.placement.model_dump(exclude_unset=True))
        groups[name] = groups[name].model_copy(update=given)
    return Graph(groups=groups)


def _plain(settings: Any) -> dict[str, Any]:
    return settings.model_dump() if isinstance(settings, BaseModel) else dict(settings)


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` applied key by key, nested mappings merged rather than replaced."""
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass
class ResolvedGraph:
    """A checked graph: its groups, the class of every kind, and each stream's ends."""

    graph: Graph
    kinds: dict[str, Any]
    streams: dict[str, dict[str, Any]]

    def with_count(self, group: str, count: int) -> ResolvedGraph:
        """The same graph with `count` workers in `group` (a cluster's nodes joined)."""
        groups = {**self.graph.groups, group: self.graph.groups[group].model_copy(update={"count": count})}
        return dataclasses.replace(self, graph=self.graph.model_copy(update={"groups": groups}))

    def describe(self) -> dict[str, Any]:
        """The graph as plain data, for the run directory and `srl status`."""
        return {"groups": {name: {"kind": g.kind, "count": g.count, "streams": g.streams,
                                  "placement": g.placement.model_dump(exclude_defaults=True),
                                  **({"home": g.home} if g.home else {})}
                           for name, g in self.graph.groups.items()},
                "streams": {name: {"kind": s["kind"], "producers": sorted({g for g, _ in s["produce"]}),
                                   "consumers": sorted({g for g, _ in s["consume"]})}
                            for name, s in self.streams.items()}}


def resolve(graph: Graph) -> ResolvedGraph:
    """The graph checked: every kind resolved, its settings validated into the kind's `Config`,
    every stream's ends checked. Raises `ConfigError`. (`srl.prepare` builds the graph of a config.)"""
    kinds: dict[str, Any] = {}
    for name, group in graph.groups.items():
        try:
            kind = kinds.setdefault(group.kind, WORKERS.resolve(group.kind))
        except RegistryError as exc:
            raise ConfigError(f"workers.{name}.kind: {exc}") from None
        if not isinstance(getattr(kind, "ports", None), Mapping):
            raise ConfigError(f"workers.{name}.kind: {group.kind!r} is not a worker kind (no `ports`; subclass "
                              "srl.workers.base.Worker)")
        model = getattr(kind, "Config", None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            if not isinstance(group.settings, model):
                try:
                    group.settings = model.model_validate(_plain(group.settings))
                except pydantic.ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in ("workers", name, "settings", *first["loc"]))
                    raise ConfigError(f"{where}: {first['msg']}") from None
        elif isinstance(group.settings, BaseModel):  # a kind of the user's in place of a built-in one
            group.settings = _plain(group.settings)
    try:
        streams = graph.stream_ends({k: cls.ports for k, cls in kinds.items()})
    except GraphError as exc:
        raise ConfigError(str(exc)) from None
    for stream, ends in streams.items():
        if STREAM_KINDS[ends["kind"]] == "sharded":
            consumers = sum(graph.groups[g].count for g, _ in ends["consume"])
            producers = sum(graph.groups[g].count for g, _ in ends["produce"])
            if consumers > producers:
                raise ConfigError(f"stream {stream!r}: {consumers} consumers cannot share {producers} producers "
                                  "(each consumer serves at least one producer)")
    return ResolvedGraph(graph, kinds, streams)
