"""A scaling model: an experiment's throughput and first bottleneck at any size, from measured component costs.

Every part of a run draws on resources: actor cores, trainer processes, policy-worker GPUs, a
host's network card, the controller's core. Each resource r has a capacity c_r (cores, GPUs,
NICs: seconds of work it gives per second), a demand per env step d_r (seconds of it one env
step takes, summed over every component that uses it) and a fixed demand f_r (seconds per
second that do not grow with throughput: heartbeats). The throughput r allows is

    X_r = (c_r - f_r) / d_r            (0 when f_r >= c_r: the resource is swamped by itself)

and the run's is X = min_r X_r; the resource that sets it is the first bottleneck. `predict`
is that minimum and nothing else; a layout (`Host`: one machine, `Cluster`: many) turns the
measured `Costs` into the resources. Everything here is pure: no process, no clock.

    python benchmarks/scaling_model.py measure --json costs.json        # the component costs here (~4 min)
    python benchmarks/scaling_model.py predict costs.json               # 1k / 10k / 15k cores, every config
    python benchmarks/scaling_model.py check-cores costs.json           # 1 vs 2 cores, predicted and measured
    python benchmarks/scaling_model.py check-nodes costs.json           # one vs two loopback Ray nodes
    python benchmarks/scaling_model.py fanin costs.json                 # the controller at 100 / 1k / 10k clients
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from srl.launch.controller import CHECK_EVERY_S
from srl.launch.supervision import heartbeat_period

#: Controller heartbeats per worker per second before pacing (every worker every 0.25 s, whatever the run's size).
HEARTBEAT_HZ = 4.0


# ------------------------------------------------------------------------ measured costs
@dataclass(frozen=True)
class Transport:
    """CPU seconds one end of a link spends on a message: a fixed part and a part per byte."""

    message_s: float
    byte_s: float

    def cost(self, nbytes: float) -> float:
        return self.message_s + self.byte_s * nbytes


@dataclass(frozen=True)
class Experiment:
    """One config's component costs (seconds of one core, or one GPU, per unit) and shapes."""

    name: str
    #: One core's seconds per env step (the env with random actions: 1 / E per core).
    env_s: float
    #: Seconds per observation of the policy's forward pass, by batch size (one thread, or one GPU).
    inference_s: dict[int, float]
    #: One learner process's seconds per env step learned (one thread, or one GPU).
    learner_s: float
    #: Bytes per env step of a trajectory message, of an inference request, and of the parameters.
    sample_bytes: float
    obs_bytes: float
    param_bytes: float
    envs_per_slot: int
    trajectory_length: int
    batch_steps: int
    #: Gradient steps per training batch (PPO: epochs x minibatches): all-reduces per batch.
    updates_per_batch: int
    actors: int = 2
    trainer_threads: int = 1
    inference: Literal["inline", "remote"] = "inline"
    ring_size: int = 1
    policy_workers: int = 1
    device: str = "cpu"
    #: Rows one env step sends the policy: its agents (1 for a single-agent env). As measured, the
    #: forward pass, the learner, the bytes and `batch_steps` are per row (a trainer counts rows);
    #: `per_env_step` turns them into the env steps every demand of the model is in.
    agents: int = 1

    def per_env_step(self) -> Experiment:
        """The same costs per env step of `agents` rows; the forward pass keyed by env steps a batch."""
        a = self.agents
        if a == 1:
            return self
        keyed = {b // a: t * a for b, t in self.inference_s.items() if b >= a}
        smallest = min(self.inference_s)
        return replace(self, agents=1, learner_s=self.learner_s * a, sample_bytes=self.sample_bytes * a,
                       obs_bytes=self.obs_bytes * a, batch_steps=max(1, self.batch_steps // a),
                       inference_s=keyed or {1: self.inference_s[smallest] * a})

    def inference_at(self, batch: int) -> float:
        """Seconds per observation at `batch` rows: the measured size nearest below it (or the smallest)."""
        sizes = sorted(self.inference_s)
        below = [b for b in sizes if b <= batch]
        return self.inference_s[below[-1] if below else sizes[0]]

    @property
    def reached_batch(self) -> int:
        """Env steps (rows, with one agent) per forward pass of a policy worker with remote
        inference: every slot but one per actor waits while that one steps (an assumption; a
        policy worker reports what it reached)."""
        waiting = self.actors * max(1, self.ring_size - 1) * self.envs_per_slot
        return max(1, waiting // max(1, self.policy_workers))

    @property
    def steps_per_trajectory(self) -> int:
        return self.trajectory_length * self.envs_per_slot


@dataclass(frozen=True)
class Costs:
    """Everything `predict` reads, as `measure` writes it (see `costs_from_json`)."""

    experiments: dict[str, Experiment]
    #: One end of the sample stream, by transport (the consumer's CPU; the producer's taken as equal).
    samples: dict[str, Transport]
    #: One end of an inference request, by transport (the server's CPU; the client's taken as equal).
    requests: dict[str, Transport]
    #: Controller CPU per heartbeat (`heartbeat_s`), and per worker of one look over every worker
    #: (`heartbeat_per_worker_s`: supervision's check, the run's totals; measured when a look
    #: followed every heartbeat, so a heartbeat then cost `heartbeat(W)`).
    heartbeat_s: float
    heartbeat_per_worker_s: float
    #: Measured GPU figures, when a GPU run provided them (`Experiment.device == "cuda"`).
    gpu: dict[str, Experiment] = field(default_factory=dict)

    def heartbeat(self, workers: int) -> float:
        return self.heartbeat_s + self.heartbeat_per_worker_s * workers


#: How the controller supervises W workers. "paced" (today): the run's heartbeats are paced
#: (`heartbeat_period`) and the controller looks over every worker every `CHECK_EVERY_S`, not
#: after each message. "flat" (before pacing): 4 heartbeats a second each, a look after each.
Pacing = Literal["paced", "flat"]


def controller_cores(costs: Costs, workers: int, pacing: Pacing = "paced") -> float:
    """Cores' worth of the controller's CPU that supervising `workers` workers takes."""
    if pacing == "flat":
        return HEARTBEAT_HZ * workers * costs.heartbeat(workers)
    heartbeats_per_s = workers / heartbeat_period(workers)
    return heartbeats_per_s * costs.heartbeat_s + workers * costs.heartbeat_per_worker_s / CHECK_EVERY_S


# ------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class Resource:
    name: str
    capacity: float
    per_step: float
    fixed: float = 0.0
    #: What the resource is and what draws on it, for the table.
    note: str = ""

    @property
    def limit(self) -> float:
        if self.per_step <= 0:
            return math.inf if self.fixed < self.capacity else 0.0
        return max(0.0, self.capacity - self.fixed) / self.per_step


@dataclass(frozen=True)
class Prediction:
    throughput: float
    bottleneck: str
    #: Env steps/s each resource allows, smallest first.
    limits: dict[str, float]
    #: Each resource's load at the predicted throughput (1.0: saturated).
    loads: dict[str, float]
    notes: dict[str, str]


def predict(resources: list[Resource]) -> Prediction:
    """X = min over resources of (capacity - fixed) / per_step; the argmin is the first bottleneck."""
    if not resources:
        raise ValueError("no resources to predict from")
    ranked = sorted(resources, key=lambda r: r.limit)
    x = ranked[0].limit
    loads = {r.name: ((r.fixed + r.per_step * x) / r.capacity if r.capacity > 0 else math.inf) for r in ranked}
    return Prediction(throughput=x, bottleneck=ranked[0].name, limits={r.name: r.limit for r in ranked},
                      loads=loads, notes={r.name: r.note for r in ranked})


# ------------------------------------------------------------------------ layouts
@dataclass(frozen=True)
class Host:
    """One machine (or loopback nodes on one machine): every process shares its cores.

    `nodes=2` is two Ray nodes on the same cores: samples cross by ZeroMQ (HMAC-tagged) instead
    of shared memory, and parameters through one relay on the second node. `device="cuda"`
    puts the policy workers' forward pass and the learner on a GPU (the costs' GPU figures)."""

    #: Cores' worth of CPU (a fraction: what a run on a shared machine actually got).
    cores: float
    nodes: int = 1
    #: The trainer's group learns: False is sampling alone (a trainer that learns nothing).
    learning: bool = True
    trainers: int = 1
    device: str = "cpu"

    def resources(self, costs: Costs, exp: Experiment) -> list[Resource]:
        on_gpu = self.device != "cpu"
        gpu = costs.gpu.get(exp.name) if on_gpu else None
        if on_gpu and gpu is None:
            raise ValueError(f"no GPU costs for {exp.name}: measure them with --device cuda")
        exp, gpu = exp.per_env_step(), gpu and gpu.per_env_step()
        link = "zmq" if self.nodes > 1 else "shm"
        send = costs.samples[link].cost(exp.sample_bytes * exp.steps_per_trajectory) / exp.steps_per_trajectory
        learn = (gpu or exp).learner_s if self.learning else 0.0
        # A new version every batch: the trainer publishes it, each actor copies it in (at most once
        # a trajectory), and across nodes a relay receives and re-publishes it.
        versions_per_step = 1.0 / exp.batch_steps if self.learning else 0.0
        relay = (self.nodes - 1) * 2 * costs.samples["zmq"].byte_s * exp.param_bytes * versions_per_step
        reads = costs.samples["shm"].byte_s * exp.param_bytes * min(exp.actors * versions_per_step,
                                                                     1.0 / exp.steps_per_trajectory)
        resources = []
        if exp.inference == "inline":
            act, serving, policy_workers = exp.inference_at(exp.envs_per_slot), 0.0, 0
        else:  # one request a slot: the actor's end and the policy worker's, and the forward pass
            policy_workers = exp.policy_workers
            request = costs.requests[link].cost(exp.obs_bytes * exp.envs_per_slot) / exp.envs_per_slot
            forward = (gpu or exp).inference_at(exp.reached_batch)
            act, serving = request, request + (0.0 if on_gpu else forward)
            resources.append(Resource("policy workers", policy_workers, request + forward,
                                      note=f"{policy_workers} {'GPU' if on_gpu else 'CPU'} policy worker(s) at batch "
                                           f"{exp.reached_batch}: forward pass + requests"))
        workers = exp.actors + self.trainers + policy_workers + (self.nodes - 1)
        heartbeats = controller_cores(costs, workers)
        actor_step = exp.env_s + act + send
        trainer_step = learn + send
        cpu_learn = 0.0 if on_gpu else learn
        return resources + [
            Resource("cpu", self.cores, actor_step + serving + send + cpu_learn + relay + reads, heartbeats,
                     f"{self.cores} core(s) shared by every process: env, inference, samples at both ends"
                     + (", learner" if self.learning and not on_gpu else "")),
            Resource("actor processes", min(exp.actors, self.cores), actor_step,
                     note=f"{exp.actors} actors, one core each at most"),
            Resource("trainer processes", min(self.trainers * exp.trainer_threads, self.cores), trainer_step,
                     note=f"{self.trainers} trainer(s) x {exp.trainer_threads} thread(s): learner + sample intake"),
        ]


@dataclass(frozen=True)
class Cluster:
    """Actor hosts of `cores_per_host` cores (one actor a core), a trainer tier and a controller.

    The assumptions are fields, so a prediction names them. The trainer tier is `trainer_workers`
    learner processes (CPU cores, or GPUs when GPU costs are given) splitting each batch
    data-parallel; `dp_efficiency` is their scaling (all-reduce, stragglers), an assumption
    until a multi-GPU run measures it."""

    cores: int
    cores_per_host: int = 64
    nic_gbps: float = 25.0
    trainer_workers: int = 64
    trainer_hosts: int = 1
    dp_efficiency: float = 0.8
    #: Remote inference: policy workers (processes on GPUs, or CPU cores) and their hosts.
    policy_workers: int = 0
    policy_hosts: int = 1
    #: Env steps a policy worker's forward pass serves (times `agents` rows).
    policy_batch: int = 1024
    #: "paced" (today) and "flat" (before pacing): every worker heartbeats the controller (see
    #: `controller_cores`); "per_host": each host's workers heartbeat an agent there (costing it what
    #: a paced controller of `cores_per_host` workers spends), and the agent reports its sums once a
    #: heartbeat period (the controller supervises the agents alone, paced).
    supervision: Literal["paced", "flat", "per_host"] = "paced"
    #: Parameters cross the network once per host (a relay each), from the trainer's NIC;
    #: with a tree of relays of this fan-out the trainer sends `fanout` copies instead of one per host.
    param_fanout: int | None = None

    @property
    def actor_hosts(self) -> int:
        return max(1, math.ceil(self.cores / self.cores_per_host))

    def describe(self) -> str:
        return (f"{self.cores:,} actor cores on {self.actor_hosts} hosts of {self.cores_per_host}; "
                f"NIC {self.nic_gbps:g} Gb/s; "
                f"trainer tier {self.trainer_workers} x dp {self.dp_efficiency:g} on {self.trainer_hosts} host(s); "
                f"supervision {self.supervision}")

    def resources(self, costs: Costs, exp: Experiment) -> list[Resource]:
        exp, gpu = exp.per_env_step(), costs.gpu.get(exp.name)
        gpu = gpu and gpu.per_env_step()
        learner = gpu or exp
        nic = self.nic_gbps * 1e9 / 8
        zmq, shm = costs.samples["zmq"], costs.samples["shm"]
        hosts = self.actor_hosts
        message = exp.sample_bytes * exp.steps_per_trajectory
        send = zmq.cost(message) / exp.steps_per_trajectory  # actor hosts -> trainer hosts: ZeroMQ
        # Data-parallel trainers each learn from a batch of their own per version.
        versions_per_step = 1.0 / (exp.batch_steps * self.trainer_workers)
        if exp.inference == "inline":
            act = exp.inference_at(exp.envs_per_slot)
            reads = shm.byte_s * exp.param_bytes * min(versions_per_step * self.cores, 1.0 / exp.steps_per_trajectory)
            param_readers = hosts
        else:
            request = costs.requests["zmq"].cost(exp.obs_bytes * exp.envs_per_slot) / exp.envs_per_slot
            act, reads, param_readers = request, 0.0, self.policy_hosts
        relay = param_readers * 2 * zmq.byte_s * exp.param_bytes * versions_per_step
        copies = param_readers if self.param_fanout is None else min(self.param_fanout, param_readers)
        workers = self.cores + self.trainer_workers + self.policy_workers + param_readers
        if self.supervision != "per_host":
            controller = controller_cores(costs, workers, self.supervision)
            agents = 0.0
        else:
            reporters = hosts + self.trainer_hosts + (self.policy_hosts if self.policy_workers else 0)
            controller = controller_cores(costs, reporters)
            agents = hosts * controller_cores(costs, self.cores_per_host)
        # Data-parallel learners: every gradient step all-reduces the parameters (ring: 2 P bytes
        # in and out of each host that holds trainers, when they span hosts), a step in lockstep
        # for the whole tier: one per `trainer_workers` x `batch_steps` / `updates_per_batch` env steps.
        allreduce = (self.trainer_hosts * 2 * exp.param_bytes * exp.updates_per_batch * versions_per_step / nic
                     if self.trainer_hosts > 1 else 0.0)
        resources = [
            Resource("actor cores", self.cores, exp.env_s + act + send + reads + relay, agents,
                     f"{self.cores:,} cores: env, " + ("inline inference" if exp.inference == "inline" else "requests")
                     + ", samples out, parameter relays and reads"),
            Resource("trainer tier", self.trainer_workers * self.dp_efficiency,
                     learner.learner_s + zmq.cost(message) / exp.steps_per_trajectory
                     + zmq.byte_s * exp.param_bytes * versions_per_step,
                     note=f"{self.trainer_workers} learner {'GPUs' if gpu else 'processes'}: "
                          "learning, sample intake, publishing"),
            Resource("trainer NIC in", self.trainer_hosts, exp.sample_bytes / nic + allreduce,
                     note=f"samples into {self.trainer_hosts} trainer host(s)"),
            Resource("parameter NIC out", 1.0, copies * exp.param_bytes * versions_per_step / nic,
                     note=f"{copies} copies of {exp.param_bytes / 1e6:.2f} MB a version "
                          f"(every {1 / versions_per_step:,.0f} steps)"),
            Resource("actor NIC", hosts, (exp.sample_bytes + (exp.obs_bytes if exp.inference == "remote" else 0)) / nic
                     + hosts * exp.param_bytes * versions_per_step / nic,
                     note="samples out, requests, parameters in, per actor host"),
            Resource("controller core", 1.0, 0.0, controller,
                     note=f"{hosts} host agents reporting, paced" if self.supervision == "per_host"
                     else f"{workers:,} workers, {self.supervision}"),
        ]
        if exp.inference == "remote":
            inference = (gpu or exp).inference_at(self.policy_batch)
            resources += [
                Resource("policy workers", max(self.policy_workers, 1e-9),
                         inference + costs.requests["zmq"].cost(exp.obs_bytes * exp.envs_per_slot) / exp.envs_per_slot,
                         note=f"{self.policy_workers} {'GPU' if gpu else 'CPU'} policy workers at batch {self.policy_batch}"),
                Resource("policy NIC in", self.policy_hosts, exp.obs_bytes / nic, note="observations into policy hosts"),
            ]
        return resources


def predict_for(costs: Costs, layout: Host | Cluster, config: str, **changes: Any) -> Prediction:
    """The prediction for one config on one layout (`changes`: fields of the experiment to vary)."""
    exp = replace(costs.experiments[config], **changes)
    return predict(layout.resources(costs, exp))


# ------------------------------------------------------------------------ costs on disk
def costs_from_json(data: dict[str, Any], gpu: dict[str, Any] | None = None) -> Costs:
    def experiments(d: dict[str, Any]) -> dict[str, Experiment]:
        return {name: Experiment(**{**e, "inference_s": {int(k): v for k, v in e["inference_s"].items()}})
                for name, e in d["experiments"].items()}

    return Costs(experiments=experiments(data),
                 samples={k: Transport(**v) for k, v in data["samples"].items()},
                 requests={k: Transport(**v) for k, v in data["requests"].items()},
                 heartbeat_s=data["controller"]["heartbeat_s"],
                 heartbeat_per_worker_s=data["controller"]["heartbeat_per_worker_s"],
                 gpu=experiments(gpu) if gpu else {})


def assumed_gpu(costs: Costs, factor: float) -> Costs:
    """GPU figures assumed, not measured: one GPU learns and runs the forward pass `factor` times as
    fast as one CPU thread (for a projection before a GPU run; `measure --device cuda` replaces it)."""
    return replace(costs, gpu={name: replace(e, device=f"cpu/{factor:g}", learner_s=e.learner_s / factor,
                                              inference_s={b: t / factor for b, t in e.inference_s.items()})
                               for name, e in costs.experiments.items()})


def load_costs(path: str, gpu_path: str | None = None) -> Costs:
    gpu = json.loads(Path(gpu_path).read_text()) if gpu_path else None
    return costs_from_json(json.loads(Path(path).read_text()), gpu)


# ------------------------------------------------------------------------ the CLI
#: The sizes the prediction table covers.
SIZES = (1_000, 10_000, 15_000)
CONFIGS = ("cartpole-ppo", "halfcheetah-ppo", "pong-ppo")


def cluster_for(cores: int, **assumptions: Any) -> Cluster:
    return Cluster(cores=cores, **assumptions)


def _short(x: float) -> str:
    """12.8k, 6.82M: figures for a table."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def print_prediction(title: str, prediction: Prediction, top: int = 3) -> None:
    print(f"  {title}: {prediction.throughput:,.0f} env steps/s, first bottleneck: {prediction.bottleneck}")
    for name, limit in list(prediction.limits.items())[:top]:
        print(f"      {name:<20} limit {limit:>16,.0f}   load {prediction.loads[name]:6.2f}   {prediction.notes[name]}")


def _predict_command(args: argparse.Namespace) -> None:
    costs = load_costs(args.costs, args.gpu_costs)
    if args.gpu_factor and not args.gpu_costs:
        costs = assumed_gpu(costs, args.gpu_factor)
    assumptions = json.loads(args.assumptions) if args.assumptions else {}
    rows = []
    for config in args.configs or list(costs.experiments):
        print(f"{config}:")
        exp = costs.experiments[config]
        for cores in args.sizes:
            cluster = Cluster(cores=cores, **assumptions)
            row: dict[str, Any] = {"config": config, "cores": cores, "assumptions": cluster.describe()}
            for supervision in SUPERVISIONS:
                p = predict(replace(cluster, supervision=supervision).resources(costs, exp))
                print_prediction(f"{cores:>6,} cores, supervision {supervision:<8}", p, args.top)
                row[supervision] = {"throughput": p.throughput, "bottleneck": p.bottleneck, "limits": p.limits,
                                    "loads": p.loads}
                if supervision == "paced" and args.reach:
                    row["hours_to"] = _hours_to(args.reach, p.throughput)
                    print("      hours to " + ", ".join(
                        f"{name} ({_short(float(steps))} env steps) {row['hours_to'][name]:,.1f}"
                        for name, steps in (r.split("=") for r in args.reach)))
            rows.append(row)
    if args.markdown:
        print("\n| config | cores | today (paced supervision): env steps/s (first bottleneck) "
              "| the limits after it, in order | controller cores: today / per-host agents / before pacing "
              "| learner processes to keep up with the actors |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            today = row["paced"]
            after = " < ".join(f"{name} {_short(limit)}" for name, limit in list(today["limits"].items())[1:4])
            learner = (costs.gpu.get(row["config"]) or costs.experiments[row["config"]]).per_env_step().learner_s
            # The controller's load is its cores (capacity 1, nothing per step), swamped or not.
            controller = " / ".join(f"{row[s]['loads']['controller core']:,.2f}" for s in SUPERVISIONS)
            print(f"| {row['config']} | {row['cores']:,} | {_short(today['throughput'])} ({today['bottleneck']}) "
                  f"| {after} | {controller} | {today['limits']['actor cores'] * learner:,.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


def _hours_to(reach: list[str], throughput: float) -> dict[str, float]:
    """Hours at `throughput` env steps/s to each NAME=ENV_STEPS of `reach`."""
    return {name: float(steps) / throughput / 3600 if throughput > 0 else math.inf
            for name, steps in (r.split("=") for r in reach)}


#: The supervision columns of the prediction table: today, the option beyond it, and before pacing.
SUPERVISIONS = ("paced", "per_host", "flat")


def saturating_workers(costs: Costs, pacing: Pacing = "paced") -> float:
    """Workers W at which supervising them fills one controller core. The load grows with W in
    both pacings, so a bisection finds it (inf: it never does, the costs being zero)."""
    low, high = 0.0, 1.0
    while controller_cores(costs, int(high), pacing) < 1.0:
        low, high = high, high * 2
        if high > 1e12:
            return math.inf
    while high - low > 1:
        mid = (low + high) / 2
        low, high = (mid, high) if controller_cores(costs, int(mid), pacing) < 1.0 else (low, mid)
    return high


def _inputs_command(args: argparse.Namespace) -> None:
    """The measured costs as markdown tables (docs/scaling.md, "Inputs")."""
    costs = load_costs(args.costs)
    print("| config | E, env steps/s a core | I, observations/s a thread, by batch | L, env steps/s a learner process "
          "| bytes a step: sample / observation | parameters |")
    print("|---|---|---|---|---|---|")
    for name, e in costs.experiments.items():
        inference = ", ".join(f"{b}: {_short(1 / t)}" for b, t in sorted(e.inference_s.items()))
        print(f"| {name} | {1 / e.env_s:,.0f} | {inference} | {1 / e.learner_s:,.0f} | {e.sample_bytes:,.0f} / "
              f"{e.obs_bytes:,.0f} | {e.param_bytes / 1e6:.2f} MB |")
    print("\n| link, one end | per message | per byte |\n|---|---|---|")
    for name, links in (("samples", costs.samples), ("inference request", costs.requests)):
        for transport, t in links.items():
            print(f"| {name}, {transport} | {t.message_s * 1e6:.0f} µs | {t.byte_s * 1e9:.2f} ns |")
    print(f"\ncontroller: {costs.heartbeat_s * 1e6:.0f} µs a heartbeat, {costs.heartbeat_per_worker_s * 1e9:.0f} ns "
          f"a worker per look over every worker")


#: Simulated clients of the fan-in harness (docs/fanin.md), and the other workers its controller
#: supervises: two policy workers and a trainer.
FANIN_CLIENTS = (100, 1_000, 10_000)
FANIN_SERVERS = 3


def _fanin_command(args: argparse.Namespace) -> None:
    """The controller's predicted CPU at the fan-in harness's client counts, paced and before pacing."""
    costs = load_costs(args.costs)
    print(f"controller CPU: {costs.heartbeat_s * 1e6:.1f} µs a heartbeat, {costs.heartbeat_per_worker_s * 1e9:.0f} ns "
          f"a worker per look over every worker")
    for clients in FANIN_CLIENTS:
        workers = clients + FANIN_SERVERS
        period = heartbeat_period(workers)
        print(f"  {clients:>6,} clients ({workers:,} workers): a heartbeat every {period:g} s each, "
              f"{workers / period:,.0f}/s; controller cores {controller_cores(costs, workers):.2f} paced "
              f"(looks every {CHECK_EVERY_S:g} s), {controller_cores(costs, workers, 'flat'):,.2f} before pacing")
    print(f"one controller core is saturated at {saturating_workers(costs):,.0f} workers paced, "
          f"{saturating_workers(costs, 'flat'):,.0f} before pacing")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    measure = sub.add_parser("measure", help="measure the component costs on this machine")
    measure.add_argument("--json", required=True)
    measure.add_argument("--configs", nargs="+", default=list(CONFIGS))
    measure.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    measure.add_argument("--device", default="cpu", help="cuda: GPU policy forward pass and learner")
    measure.add_argument("--parts", nargs="+", choices=["experiments", "transports", "controller"],
                         default=["experiments", "transports", "controller"],
                         help="what to measure (the file keeps the other parts' figures)")
    measure.add_argument("--keep-best", action="store_true",
                         help="keep the lower of this and the file's earlier cost, figure by figure")
    predict_cmd = sub.add_parser("predict", help="the prediction table at 1k / 10k / 15k cores")
    predict_cmd.add_argument("costs")
    predict_cmd.add_argument("--gpu-costs", help="costs measured with --device cuda: GPU learners and policy workers")
    predict_cmd.add_argument("--gpu-factor", type=float,
                             help="no GPU costs measured: assume a GPU learns and infers this many times one thread")
    predict_cmd.add_argument("--configs", nargs="+", help="default: every config the costs hold")
    predict_cmd.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    predict_cmd.add_argument("--assumptions", help='JSON of Cluster fields, e.g. \'{"nic_gbps": 100}\'')
    predict_cmd.add_argument("--top", type=int, default=3, help="limits shown per row")
    predict_cmd.add_argument("--reach", nargs="+", metavar="NAME=ENV_STEPS", default=[],
                             help="also the hours to reach these env-step counts at the predicted throughput")
    predict_cmd.add_argument("--markdown", action="store_true", help="also one markdown table (docs/scaling.md)")
    predict_cmd.add_argument("--json")
    inputs = sub.add_parser("inputs", help="the measured costs as markdown tables")
    inputs.add_argument("costs")
    fanin = sub.add_parser("fanin", help="the controller's predicted CPU at 100 / 1k / 10k heartbeating clients")
    fanin.add_argument("costs")
    for name, help_ in (("check-cores", "1 vs 2 cores (taskset): predicted and measured"),
                        ("check-nodes", "one vs two loopback Ray nodes: predicted and measured"),
                        ("check-sweep", "an actor sweep and remote inference: predicted and measured (GPU machine)")):
        check = sub.add_parser(name, help=help_)
        check.add_argument("costs")
        check.add_argument("--configs", nargs="+", default=["cartpole-ppo"])
        check.add_argument("--seconds", type=float, default=10.0)
        check.add_argument("--json")
        check.add_argument("--gpu-costs", help="costs measured with --device cuda (check-sweep)")
        check.add_argument("--device", default="cpu", help="where Pong's policy workers and trainer run (check-sweep)")
        check.add_argument("--actors", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args(argv)
    pure = {"predict": _predict_command, "fanin": _fanin_command, "inputs": _inputs_command}
    if args.command in pure:
        pure[args.command](args)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scaling_measure  # processes and clocks live there, not in the model

    getattr(scaling_measure, args.command.replace("-", "_"))(args)


if __name__ == "__main__":
    main()
