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
algorithm brings its default graph (`Algorithm.graph`); the config's `workers:` section
overrides a group's count, placement and settings, or adds groups of any kind. Which
transport each stream uses is decided later, from where the launcher put its ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, PositiveInt

from srl.api.agents import AgentRouter, route
from srl.api.config import (
    SAMPLER_NICE,
    ConfigError,
    ExperimentConfig,
    GroupOverride,
    Placement,
)
from srl.api.registry import ALGORITHMS, WORKERS, RegistryError
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

    model_config = ConfigDict(extra="forbid")

    #: A short name (`actor`, `policy`, `trainer`, `relay`) or `package.module:Class` of a worker kind.
    kind: str
    count: PositiveInt = 1
    placement: Placement = Placement()
    #: The kind's own settings (validated against the kind's `Config` when it declares one).
    settings: dict[str, Any] = {}
    #: Port name -> stream name.
    streams: dict[str, str] = {}


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
            given["settings"] = _merged(groups[name].settings, given["settings"])
        if change.placement is not None:  # only the fields the override names
            given["placement"] = groups[name].placement.model_copy(
                update=change.placement.model_dump(exclude_unset=True))
        groups[name] = groups[name].model_copy(update=given)
    return Graph(groups=groups)


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` applied key by key, nested mappings merged rather than replaced."""
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def on_policy_graph(config: ExperimentConfig) -> Graph:
    """Actors -> trainers, parameters back: to policy workers (remote inference) or to the actors.

    Each group is told only its own sections of the config. Samplers (actors, policy
    workers) yield the CPU to trainers unless their placement sets `nice`.
    """
    return Graph(groups={"trainer": _trainer_group(config), **_sampler_groups(config)})


def replay_graph(config: ExperimentConfig, unit: Literal["transition", "sequence"] = "transition",
                 n_step: int = 1, gamma: float = 0.99, joint: bool = False) -> Graph:
    """Actors -> replay buffers -> trainers; parameters back to the actors (or policy workers);
    the trainers' new priorities back to the buffer that sent each batch.

    The buffers (the config's `replay:` section) store `unit`s: transitions with `n_step`
    returns discounted by `gamma`, or whole sequences; `joint`: one transition holds all the
    agents of an env (VDN, QMIX).
    """
    c = config
    buffer = Group(
        kind="buffer", count=c.replay.count, placement=_niced(c.replay.placement, 0),
        settings={"env": c.env.model_dump(), "replay": c.replay.model_dump(exclude={"count", "placement"}),
                  "trajectory_length": c.actors.trajectory_length, "unit": unit, "n_step": n_step, "gamma": gamma,
                  "joint": joint, "checkpoint": c.checkpoint.model_dump()},
        streams={"samples": "samples", "replay": "replay"})
    return Graph(groups={"trainer": _trainer_group(config, samples="replay"), "buffer": buffer,
                         **_sampler_groups(config)})


def _trainer_group(c: ExperimentConfig, samples: str = "samples") -> Group:
    return Group(
        kind="trainer", count=c.trainers.count, placement=_niced(c.trainers.placement, 0),
        settings={"env": c.env.model_dump(), "policy": c.policy.model_dump(), "algorithm": c.algorithm.model_dump(),
                  "trainers": c.trainers.model_dump(), "checkpoint": c.checkpoint.model_dump(),
                  "streams": c.streams.model_dump(include={"when_full", "trainer_queue"})},
        streams={"samples": samples, "parameters": "parameters"})


def _sampler_groups(c: ExperimentConfig) -> dict[str, Group]:
    """Actors, and policy workers when inference is remote."""
    remote = c.actors.inference == "remote"
    env, policy = c.env.model_dump(), c.policy.model_dump()
    groups = {}
    if remote:
        groups["policy"] = Group(
            kind="policy", count=c.policy_workers.count, placement=_niced(c.policy_workers.placement, SAMPLER_NICE),
            settings={"env": env, "policy": policy, **c.policy_workers.model_dump(include={"max_wait_ms", "device"})},
            streams={"inference": "inference", "parameters": "parameters"})
    groups["actor"] = Group(
        kind="actor", count=c.actors.count, placement=_niced(c.actors.placement, SAMPLER_NICE),
        # `batch_steps`: a synchronous actor waits for a new version once the trainer has a batch.
        settings={"env": env, "policy": policy, "actors": c.actors.model_dump(), "sample_slots": c.streams.sample_slots,
                  "batch_steps": c.trainers.batch_steps},
        streams={"samples": "samples", **({"inference": "inference"} if remote else {"parameters": "parameters"})})
    return groups


def multi_policy_graph(config: ExperimentConfig, router: AgentRouter) -> Graph:
    """One trainer group per policy, each on streams of its own (`samples-<policy>`,
    `parameters-<policy>`, `inference-<policy>`), and one actor group joined to all of them
    (its port `samples/<policy>` to `samples-<policy>`, ...). With remote inference, one
    policy group serves every policy the same way (`policy_workers.shared`), or each policy
    has a policy group of its own.

    Each policy's groups are its one-policy graph's (`Algorithm.graph` of `config.policy_view`),
    renamed `<group>-<policy>`, and told its name and agents. Raises `ConfigError`.
    """
    joined_kinds = {"actor", "policy"} if config.policy_workers.shared else {"actor"}
    groups: dict[str, Group] = {}
    joined: dict[str, Group] = {}  # one group for all policies, its ports keyed by policy
    for name in config.policies:
        view = config.policy_view(name)
        algorithm = ALGORITHMS.resolve(view.algorithm.type)
        graph = algorithm.graph(view) if hasattr(algorithm, "graph") else on_policy_graph(view)
        extra = [g for g, group in graph.groups.items() if group.kind not in ("trainer", "policy", "actor")]
        if extra:
            raise ConfigError(f"policies.{name}.algorithm.type: {view.algorithm.type!r} trains in a graph with "
                              f"{', '.join(extra)} workers; several policies work with on-policy algorithms "
                              "(ppo, appo) for now")
        agents = list(router.agents_of(name))
        for group_name, group in graph.groups.items():
            streams = {port: f"{stream}-{name}" for port, stream in group.streams.items()}
            if group.kind in joined_kinds:
                if group_name not in joined:
                    settings = {k: v for k, v in group.settings.items() if k != "policy"}
                    joined[group_name] = group.model_copy(update={"streams": {}, "settings": {
                        **settings, "policies": {}, "agents": {}}})
                one = joined[group_name]
                one.streams.update({f"{port}/{name}": stream for port, stream in streams.items()})
                one.settings["policies"][name] = view.policy.model_dump()
                one.settings["agents"][name] = agents
            else:
                groups[f"{group_name}-{name}"] = group.model_copy(update={
                    "streams": streams, "settings": {**group.settings, "policy_name": name, "agents": agents}})
    return Graph(groups={**groups, **joined})


def with_evaluation(graph: Graph, config: ExperimentConfig) -> Graph:
    """The graph with an `eval` group reading its `parameters` stream, when the config's
    `evaluation:` section asks for one (whatever the algorithm's graph)."""
    c = config.evaluation
    if not c.count:
        return graph
    if not any(g.streams.get("parameters") == "parameters" for g in graph.groups.values()):
        raise ConfigError("evaluation.count: the algorithm's graph has no `parameters` stream to evaluate")
    group = Group(kind="eval", count=c.count, placement=_niced(c.placement, SAMPLER_NICE),
                  settings={"env": config.env.model_dump(), "policy": config.policy.model_dump(),
                            "evaluation": c.model_dump(exclude={"count", "placement"})},
                  streams={"parameters": "parameters"})
    return Graph(groups={**graph.groups, "eval": group})


def with_self_play(graph: Graph, config: ExperimentConfig) -> Graph:
    """The graph with self-play, when the config's `self_play:` section asks for it: the actors
    are told which agents learn (their opponents come from the pool), and a `league` group reads
    the `parameters` stream to fill the pool and rate the newest version (docs/selfplay.md)."""
    c = config.self_play
    if c is None:
        return graph
    if "actor" not in graph.groups or not any(g.streams.get("parameters") == "parameters"
                                              for g in graph.groups.values()):
        raise ConfigError("self_play: the algorithm's graph has no `actor` group or no `parameters` stream")
    settings = c.model_dump(exclude={"placement"})
    actor = graph.groups["actor"]
    league = Group(kind="league", count=1, placement=_niced(c.placement, SAMPLER_NICE),
                   settings={"env": config.env.model_dump(), "policy": config.policy.model_dump(),
                             "self_play": settings},
                   streams={"parameters": "parameters"})
    return Graph(groups={**graph.groups, "actor": actor.model_copy(update={"settings": {**actor.settings,
                                                                                         "self_play": settings}}),
                         "league": league})


def _niced(placement: Placement, default_nice: int) -> Placement:
    """The placement with `nice` resolved (unset: the group's default)."""
    return placement if placement.nice is not None else placement.model_copy(update={"nice": default_nice})


@dataclass
class ResolvedGraph:
    """A checked graph: its groups, the class of every kind, and each stream's ends."""

    graph: Graph
    kinds: dict[str, Any]
    streams: dict[str, dict[str, Any]]
    #: A population's member groups: group -> member (`m0`, ...). Empty: not a population.
    members: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The graph as plain data, for the run directory and `srl status`."""
        return {"groups": {name: {"kind": g.kind, "count": g.count, "streams": g.streams,
                                  "placement": g.placement.model_dump(exclude_defaults=True)}
                           for name, g in self.graph.groups.items()},
                "streams": {name: {"kind": s["kind"], "producers": sorted({g for g, _ in s["produce"]}),
                                   "consumers": sorted({g for g, _ in s["consume"]})}
                            for name, s in self.streams.items()},
                **({"members": sorted(set(self.members.values()))} if self.members else {})}


def experiment_graph(config: ExperimentConfig) -> Graph:
    """One experiment's graph: the algorithm's default (or several policies' graph), evaluation,
    self-play, the config's `workers:`."""
    if config.policies:
        default = multi_policy_graph(config, route(config))
    else:
        algorithm = ALGORITHMS.resolve(config.algorithm.type)
        default = algorithm.graph(config) if hasattr(algorithm, "graph") else on_policy_graph(config)
    try:
        return apply_overrides(with_self_play(with_evaluation(default, config), config), config.workers)
    except (GraphError, pydantic.ValidationError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


#: The group of the population manager, beside the members' groups.
POPULATION_GROUP = "population"


def member_name(index: int) -> str:
    """Member `index` of a population: its groups, streams and directory carry this name."""
    return f"m{index}"


def member_dir(run_dir: str | Path, member: str) -> Path:
    """A member's own run directory (its checkpoints, logs and metrics) inside the run's."""
    return Path(run_dir) / "members" / member


def member_config(config: ExperimentConfig, index: int) -> ExperimentConfig:
    """The experiment as member `index` of its population runs it: its own starting values of
    the varied hyper-parameters (validated as the algorithm's `args`), no population."""
    assert config.population is not None
    values = {name: hp.values[index] for name, hp in config.population.hyperparameters.items()
              if hp.values is not None}
    args = {**config.algorithm.args, **values}
    model = getattr(ALGORITHMS.resolve(config.algorithm.type), "Config", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        try:
            args = model.model_validate(args).model_dump()
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "?"
            raise ConfigError(f"population.hyperparameters.{name}.values: member {index}: {first['msg']}") from None
    return config.model_copy(update={"algorithm": config.algorithm.model_copy(update={"args": args}),
                                     "population": None})


def population_graph(config: ExperimentConfig) -> tuple[Graph, dict[str, str]]:
    """The experiment's graph once per member (groups and streams named `<member>.<name>`),
    and, when members exploit, the population manager. Returns the graph and each member
    group's member."""
    population = config.population
    assert population is not None
    groups: dict[str, Group] = {}
    members: dict[str, str] = {}
    for index in range(population.size):
        member = member_name(index)
        for name, group in experiment_graph(member_config(config, index)).groups.items():
            renamed = {port: f"{member}.{stream}" for port, stream in group.streams.items()}
            groups[f"{member}.{name}"] = group.model_copy(update={"streams": renamed})
            members[f"{member}.{name}"] = member
    if population.exploit:
        groups[POPULATION_GROUP] = Group(
            kind="population", placement=population.placement,
            settings={"population": population.model_dump(exclude={"placement"}),
                      "members": [member_name(i) for i in range(population.size)]})
    return Graph(groups=groups), members


def resolve(config: ExperimentConfig) -> ResolvedGraph:
    """The experiment's graph (or its population's): the algorithm's default with the config's
    `workers:` applied, every kind resolved, its settings validated, every stream checked.
    Raises `ConfigError`."""
    members: dict[str, str] = {}
    if config.population is not None:
        graph, members = population_graph(config)
    else:
        graph = experiment_graph(config)
    for name in config.supervision.progress_timeout_by_group:
        if name not in graph.groups:
            raise ConfigError(f"supervision.progress_timeout_by_group: no group {name!r} in the graph "
                              f"(its groups: {', '.join(graph.groups)})")
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
            try:
                group.settings = model.model_validate(group.settings).model_dump()
            except pydantic.ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in ("workers", name, "settings", *first["loc"]))
                raise ConfigError(f"{where}: {first['msg']}") from None
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
    return ResolvedGraph(graph, kinds, streams, members)
