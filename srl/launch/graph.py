"""The worker graph: which workers exist and which stream joins which. Wiring lives here only.

Every launcher places the same graph; it decides only where each worker runs, and
from that (through `choose_transport`) which transport each stream uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from srl.api.config import SAMPLER_NICE, ExperimentConfig, Placement
from srl.streams.link import Transport
from srl.workers.base import CONTROL_KEY, StreamEnd, WorkerSpec

SAMPLES = "samples/{}"
INFERENCE = "inference/{}"
PARAMETERS = "parameters"


def choose_transport(forced: str, hosts: set[str]) -> Transport:
    """Shared memory when every end is on one host, ZeroMQ otherwise, unless the config forces one."""
    if forced != "auto":
        return forced  # type: ignore[return-value]
    return "shm" if len(hosts) <= 1 else "zmq"


def build_graph(config: ExperimentConfig, run_dir: str, host_of: Callable[[str], str],
                resume: bool = False, control_transport: Transport = "shm") -> list[WorkerSpec]:
    """Worker specs for `config`; `host_of(worker_name)` is the launcher's placement."""
    c = config
    remote = c.actors.inference == "remote"
    trainers = [f"trainer.{i}" for i in range(c.trainers.count)]
    policies = [f"policy.{i}" for i in range(c.policy_workers.count)] if remote else []
    actors = [f"actor.{i}" for i in range(c.actors.count)]
    env = c.env.model_dump()
    policy = c.policy.model_dump()
    control = StreamEnd(CONTROL_KEY, control_transport)
    transport = lambda names: choose_transport(c.streams.transport, {host_of(n) for n in names})  # noqa: E731

    # Every stream's transport is decided once, from the hosts of all its ends.
    param_readers = policies if remote else actors
    parameters_of, parameters_net, relays = _parameter_routes(c.streams.transport, trainers[0], param_readers, host_of)
    for name in trainers[1:]:  # data-parallel peers hold the same end; only rank 0 publishes on it
        parameters_of[name] = parameters_of[trainers[0]]
    trainer_of = {a: i % len(trainers) for i, a in enumerate(actors)}
    server_of = {a: i % len(policies) for i, a in enumerate(actors)} if remote else {}
    samples = [StreamEnd(SAMPLES.format(i), transport([t, *(a for a in actors if trainer_of[a] == i)]))
               for i, t in enumerate(trainers)]
    inference = [StreamEnd(INFERENCE.format(i), transport([p, *(a for a in actors if server_of[a] == i)]))
                 for i, p in enumerate(policies)]

    specs = []
    for i, name in enumerate(trainers):
        specs.append(WorkerSpec(
            name, "trainer", i, c.seed,
            settings={"env": env, "policy": policy, "algorithm": c.algorithm.model_dump(),
                      "trainers": {**c.trainers.model_dump(), "rank": i}, "checkpoint": c.checkpoint.model_dump(),
                      "resume": resume,
                      "streams": c.streams.model_dump(include={"when_full", "trainer_queue"})},
            streams={"samples": samples[i], "parameters": parameters_of[name],
                     **({"parameters_net": parameters_net} if parameters_net else {})},
            control=control, run_dir=run_dir, placement=_placement(c.trainers.placement, nice=0)))
    for i, name in enumerate(policies):
        specs.append(WorkerSpec(
            name, "policy", i, c.seed,
            settings={"env": env, "policy": policy, **c.policy_workers.model_dump(include={"max_wait_ms", "device"})},
            streams={"inference": inference[i], "parameters": parameters_of[name]},
            control=control, run_dir=run_dir, placement=_placement(c.policy_workers.placement, SAMPLER_NICE)))
    for i, name in enumerate(actors):
        streams = {"samples": samples[trainer_of[name]]}
        if remote:
            streams["inference"] = inference[server_of[name]]
        else:
            streams["parameters"] = parameters_of[name]
        specs.append(WorkerSpec(
            name, "actor", i, c.seed,
            settings={"env": env, "policy": policy, "actors": c.actors.model_dump(),
                      "sample_slots": c.streams.sample_slots},
            streams=streams, control=control, run_dir=run_dir,
            placement=_placement(c.actors.placement, SAMPLER_NICE)))
    for k, (host, near) in enumerate(relays.items()):
        specs.append(WorkerSpec(
            f"relay.{k}", "relay", k, c.seed, settings={},
            streams={"source": parameters_net, "sink": parameters_of[near]},
            control=control, run_dir=run_dir, placement={"near": near, "num_cpus": 0.1}))
    return specs


def _placement(placement: Placement, nice: int) -> dict[str, Any]:
    """The group's placement with its `nice` resolved (unset: the group's default)."""
    return {**placement.model_dump(), "nice": nice if placement.nice is None else placement.nice}


def _parameter_routes(forced: str, publisher: str, readers: list[str], host_of: Callable[[str], str]
                      ) -> tuple[dict[str, StreamEnd], StreamEnd | None, dict[str, str]]:
    """How parameters reach each reader: (reader -> stream end, the trainer's network end, relays).

    Readers on the trainer's host read its shared memory. Each other host receives ONE copy
    over TCP, into a relay on that host that re-publishes it into the host's shared memory,
    so the model crosses the network once per host, not once per reader.
    """
    if forced != "auto":
        end = StreamEnd(PARAMETERS, forced)  # type: ignore[arg-type]
        return {name: end for name in [publisher, *readers]}, None, {}
    home = host_of(publisher)
    routes = {publisher: StreamEnd(PARAMETERS, "shm")}
    relays: dict[str, str] = {}  # host -> a reader there (the relay is placed beside it)
    for reader in readers:
        host = host_of(reader)
        if host == home:
            routes[reader] = routes[publisher]
        else:
            relays.setdefault(host, reader)
            routes[reader] = StreamEnd(f"{PARAMETERS}/node{list(relays).index(host)}", "shm")
    return routes, (StreamEnd(f"{PARAMETERS}/net", "zmq") if relays else None), relays
