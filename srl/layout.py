"""The worker layout chosen from measurements: `auto` in a config's layout fields.

`srl train cartpole-ppo actors.count=auto` (or `auto` in any of `AUTO_FIELDS`: envs per slot,
ring size, inline or remote inference, policy workers, trainer threads) measures, on the
cores the run has, the three rates `srl bench` isolates (srl/measure.py), each per core:

* e: env steps/s one core steps the env alone (E / N);
* i(b): samples/s one core's forward passes reach at batch b (I / N), at powers of two;
* l(t): env steps/s one learner process of t torch threads absorbs while every core also steps
  the env at the samplers' priority, as in a run.

`choose` (pure: unit-tested without a process) predicts, for each candidate layout, the env
steps/s the trainers learn from. The samplers cost c_actor CPU seconds per env step on the
actors (1/e + 1/i(b) inline; 1/e plus their side of a request, `REQUEST_COST_S` / b, with
remote inference, and with a ring of one slot the wait for the reply, which a ring of two or
more hides) and c_policy on the policy workers (1/i(B) + `REQUEST_COST_S` / b, B the batch a
worker drains: every slot of its share of the actors). On k cores they reach
S(k) = min(min(A, k) / c_actor, min(P, k) / c_policy, k / (c_actor + c_policy)): each process
runs on one core at most. A training step takes batch_steps / l(t) on t cores; meanwhile the
samplers, on the other N - t cores, fill the actors' sample slots (at most
A · (sample_slots + ring) trajectories); what the batch still lacks when the step ends they
sample on all N cores, S(N), while the trainer waits. So

    trained env steps/s = batch / (batch / l(t) + max(0, batch - made) / S(N)),
    made = min(S(N - t) · batch / l(t), A · (sample_slots + ring) · b · T, batch).

The best prediction wins; predictions within `TIE` of it count as equal (the measurements'
noise). Among those, the ones whose samplers can make the least during a training step
(`headroom`: min(S(N - t) · batch / l(t), the slots' capacity), in batches) go last when it is
`HEADROOM_TIE` below the most: the samplers, at nice 10, are the first to lose their share when
the machine is busy. Then the fewest processes, inline inference, the largest slots, the
shortest ring and the fewest trainer threads win, in that order. One rule keeps the learning
the config was tuned for: every env in flight fits in one training batch (actors · ring · envs
per slot · trajectory length ≤ batch_steps, and a trajectory divides it), so the samples are
no staler than a batch and `trajectory_length` and `batch_steps` are never changed.

Measurements are cached per (what they depend on, cores, host) under ~/.cache/srl/layout/, so a
restarted or resumed run starts at once; a resumed run's config.yaml holds plain numbers anyway.

On a Ray cluster the run is laid out on the one node its groups are pinned to, with that node's
CPUs, measured there by a Ray task (`ray_node`, `measure_on_ray_node`; docs/layout.md).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from srl.api.config import AUTO_FIELDS, SAMPLER_NICE, ConfigError, ExperimentConfig, validate_structure
from srl.measure import (Failed, MeasurementError, Rates, env_rate, gather, inference_rate, learner_rate, parallel,
                         replay_settings, reporting)

#: CPU seconds one inference request costs each side (actor; policy worker) beyond the forward
#: pass: encoding, shared memory, ZeroMQ and process wake-ups. The actor's side measures close
#: to this (docs/benchmarks.md, "Env ring sweep"); the policy worker's is taken as alike.
REQUEST_COST_S = 100e-6
#: Predictions this close to the best are taken as equal.
TIE = 0.03
#: Among equal predictions, headroom this close to the most is taken as equal.
HEADROOM_TIE = 0.1
#: Seconds each rate is measured for (the learner: at least one training step after a warm-up one).
PART_SECONDS = 1.0
#: Seconds a Ray task has to measure a node (its measurements take about a minute).
RAY_MEASURE_TIMEOUT_S = 900.0
#: Bump when what is measured or how changes: older cached measurements are then ignored.
#: (3: feed-forward policies act in NumPy, so the forward pass measures faster.)
MEASURE_VERSION = 3


# ------------------------------------------------------------------------ the model (pure)
@dataclass(frozen=True)
class Measured:
    """Per-core rates measured on this machine (see the module docstring)."""

    cores: int
    #: e: env steps/s of one core stepping the env alone.
    env: float
    #: i(b): samples/s of one core's forward passes, by batch size b.
    inference: dict[int, float]
    #: l(t): env steps/s one learner process absorbs, by torch threads t.
    learner: dict[int, float]

    def inference_at(self, batch: float) -> float:
        """i(batch), interpolated between measured sizes on log scales (held flat past the ends)."""
        sizes = sorted(self.inference)
        if batch <= sizes[0]:
            return self.inference[sizes[0]]
        if batch >= sizes[-1]:
            return self.inference[sizes[-1]]
        hi = next(s for s in sizes if s >= batch)
        lo = max(s for s in sizes if s < batch)
        w = (math.log(batch) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return math.exp((1 - w) * math.log(self.inference[lo]) + w * math.log(self.inference[hi]))


@dataclass(frozen=True)
class Shape:
    """What a layout must respect: the config's learning settings and the layout fields it fixes."""

    trajectory_length: int
    batch_steps: int
    trainers: int = 1
    #: Trajectories each actor may have sent and not yet taken by the trainer (`streams.sample_slots`).
    sample_slots: int = 1
    #: Layout fields given a value (not `auto`), by their `AUTO_FIELDS` name.
    fixed: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    actors: int
    envs_per_slot: int
    ring_size: int
    inference: str
    policy_workers: int
    trainer_threads: int

    def fields(self) -> dict[str, Any]:
        """The layout as config fields (`AUTO_FIELDS` order)."""
        return dict(zip(AUTO_FIELDS, (self.actors, self.envs_per_slot, self.ring_size, self.inference,
                                      self.policy_workers, self.trainer_threads)))

    @property
    def processes(self) -> int:
        return self.actors + (self.policy_workers if self.inference == "remote" else 0)


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    #: Env steps/s the trainers learn from.
    trained: float
    #: What holds it there: `learner`, or what the trainer waits for (`actors`, `cores`,
    #: `policy workers`: the sampling; `sample slots`: the actors' slots are full).
    bound: str
    #: The parts' own rates (env steps/s): the learner, and the sampling on every core.
    limits: dict[str, float]
    #: What the samplers can make during a training step, in batches (below 1: the trainer waits).
    headroom: float


@dataclass(frozen=True)
class Choice:
    best: Prediction
    #: Every candidate, best first.
    ranked: list[Prediction]
    reason: str


def predict(m: Measured, layout: Layout, shape: Shape) -> Prediction:
    """The env steps/s the trainers would learn from with `layout` (module docstring)."""
    a, b, r, p, t = layout.actors, layout.envs_per_slot, layout.ring_size, layout.policy_workers, layout.trainer_threads
    learner = shape.trainers * m.learner[t]
    if layout.inference == "inline":
        cpu_actor, cpu_policy, wait = 1 / m.env + 1 / m.inference_at(b), 0.0, 0.0
    else:
        batch = a * r / p * b  # a policy worker drains every slot of its share of the actors
        cpu_policy = 1 / m.inference_at(batch) + REQUEST_COST_S / b
        cpu_actor = 1 / m.env + REQUEST_COST_S / b
        # A ring of one slot idles while its forward pass runs; two or more step meanwhile.
        wait = (batch / m.inference_at(batch) + REQUEST_COST_S) / b if r == 1 else 0.0

    def sampling(cores: float) -> dict[str, float]:
        """What the samplers reach on `cores` cores: each process on one core at most."""
        limits = {"actors": min(a, cores) / (cpu_actor + wait), "cores": cores / (cpu_actor + cpu_policy)}
        if layout.inference == "remote":
            limits["policy workers"] = min(p, cores) / cpu_policy
        return limits

    # A training step takes batch / l(t) on t cores; meanwhile the samplers, on the others, fill
    # the sample slots, up to `ready` env steps. What the batch still lacks when the step ends
    # they sample on every core while the trainer waits.
    steps = shape.batch_steps
    busy, idle = sampling(max(m.cores - shape.trainers * t, 0)), sampling(m.cores)
    ready = a * (shape.sample_slots + r) * b * shape.trajectory_length
    can = min(ready, min(busy.values()) * steps / learner)
    made = min(can, steps)
    waited = (steps - made) / min(idle.values())
    if not waited:
        bound = "learner"
    else:
        bound = "sample slots" if made == ready else min(idle, key=idle.__getitem__)
    return Prediction(layout, steps / (steps / learner + waited), bound, {"learner": learner, **idle}, can / steps)


def candidates(m: Measured, shape: Shape) -> list[Layout]:
    """Every layout the model weighs: the fixed fields as given, the rules of the module docstring."""
    fixed = shape.fixed
    envs_max = shape.batch_steps // shape.trajectory_length

    def options(name: str, free: list[Any]) -> list[Any]:
        return [fixed[name]] if name in fixed else free

    slots = options("actors.envs_per_slot", [2**k for k in range(int(math.log2(max(envs_max, 1))) + 1)
                                             if shape.batch_steps % (2**k * shape.trajectory_length) == 0])
    out = []
    for inference in options("actors.inference", ["inline", "remote"]):
        remote = inference == "remote"
        rings = options("actors.ring_size", [1, 2, 4] if remote else [1])  # inline: one slot, one batch
        workers = options("policy_workers.count", list(range(1, m.cores + 1)) if remote else [1])
        actors = options("actors.count", list(range(max(1, shape.trainers), 2 * m.cores + 1)))
        threads = options("trainers.placement.threads", sorted(t for t in m.learner if t <= m.cores))
        for a, b, r, p, t in itertools.product(actors, slots, rings, workers, threads):
            if remote and p > a:
                continue
            out.append(Layout(a, b, r, inference, p, t))
    fits = [c for c in out if c.actors * c.ring_size * c.envs_per_slot <= max(envs_max, 1)]
    return fits or out  # relax the rule only when the fixed fields leave nothing that keeps it


def choose(m: Measured, shape: Shape) -> Choice:
    """The layout predicted to train fastest (ties: the simplest), and why."""
    predictions = [predict(m, c, shape) for c in candidates(m, shape)]
    if not predictions:
        raise ValueError("no layout fits the fixed fields")
    top = max(p.trained for p in predictions)
    tied = [p for p in predictions if p.trained >= (1 - TIE) * top]
    roomiest = max(p.headroom for p in tied)

    def preference(p: Prediction) -> tuple:
        c = p.layout
        # Among equal predictions, those with less headroom go last: samplers at nice 10 are the
        # first to lose their share when the machine is busy, and a trainer that waits for
        # samples wastes its core.
        return (p.trained < (1 - TIE) * top, p.headroom < (1 - HEADROOM_TIE) * roomiest, c.processes,
                c.inference != "inline", -c.envs_per_slot, c.ring_size, c.trainer_threads, -p.trained)

    ranked = sorted(predictions, key=preference)
    return Choice(ranked[0], ranked, _reason(m, shape, ranked))


def _reason(m: Measured, shape: Shape, ranked: list[Prediction]) -> str:
    best = ranked[0]
    c = best.layout
    parts = [f"predicted {best.trained:,.0f} trained env steps/s, bound by the {best.bound}",
             f"measured per core: env {m.env:,.0f} steps/s, forward pass {m.inference_at(c.envs_per_slot):,.0f} "
             f"samples/s at batch {c.envs_per_slot}, learner " +
             ", ".join(f"{v:,.0f} ({t} thread{'s' if t > 1 else ''})" for t, v in sorted(m.learner.items()))]
    # The best of each other kind of layout, with what holds it back.
    for label, other in (("remote inference", lambda p: p.layout.inference != c.inference),
                         ("more trainer threads", lambda p: p.layout.trainer_threads > c.trainer_threads),
                         ("fewer trainer threads", lambda p: p.layout.trainer_threads < c.trainer_threads),
                         ("more actors", lambda p: p.layout.actors > c.actors)):
        rival = next((p for p in ranked[1:] if other(p)), None)
        if rival is not None:
            name = label if label != "remote inference" else f"{rival.layout.inference} inference"
            parts.append(f"{name}: {rival.trained:,.0f} (bound by the {rival.bound})")
    cap = shape.batch_steps // shape.trajectory_length
    parts.append(f"at most {cap} envs in flight (batch_steps / trajectory_length)")
    return "; ".join(parts)


# ------------------------------------------------------------------------ measuring
def cores_available() -> int:
    """The cores this process may run on: its CPU affinity, and its cgroup's CPU quota if lower."""
    quota = cgroup_cpu_quota()
    cores = len(os.sched_getaffinity(0))
    return cores if quota is None else min(cores, max(1, math.ceil(quota)))


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> float | None:
    """Cores' worth of CPU time this process's cgroup may use (None: no quota), v2 or v1."""
    for line in _read(membership).splitlines():
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        # The group's own directory; in a container without a cgroup namespace, the mount's root.
        if controllers == "":  # v2: one hierarchy, `cpu.max` is "QUOTA PERIOD" or "max PERIOD"
            for group in (root / path.lstrip("/"), root):
                fields = _read(group / "cpu.max").split()
                if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
                    return int(fields[0]) / int(fields[1])
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy, -1 for none
            for group in (root / controllers / path.lstrip("/"), root / controllers):
                quota, period = _read(group / "cpu.cfs_quota_us").strip(), _read(group / "cpu.cfs_period_us").strip()
                if quota.isdigit() and int(quota) > 0 and period.isdigit():
                    return int(quota) / int(period)
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _inference_rates(config_data: dict[str, Any], batches: list[int], seconds: float, queue: Any) -> None:
    """The forward-pass rate (`srl.measure.inference_rate`) at each batch size, in one process
    (one start-up for all)."""

    rates = Rates()
    for batch in batches:
        inference_rate(config_data, batch, seconds, rates)
    queue.put(dict(zip(batches, rates)))


def _niced(nice: int, target: Callable[..., None], *args: Any) -> None:
    os.nice(nice)
    target(*args)


def _learner_beside_samplers(data: dict[str, Any], cores: int, threads: int, seconds: float) -> float:
    """l(t): one learner process of `threads` threads, while every core also steps the env at the
    samplers' priority, as in a run (a trainer's threads lose more to them than one thread does)."""
    import multiprocessing as mp
    from queue import Empty


    ctx = mp.get_context("spawn")
    sink = ctx.Queue()
    samplers = [ctx.Process(target=reporting, args=(functools.partial(_niced, SAMPLER_NICE, env_rate),
                                                     (data["env"], 16, 600.0, i), sink))
                for i in range(cores)]
    for p in samplers:
        p.start()
    try:
        learner = parallel(functools.partial(learner_rate, threads=threads), lambda i: (data, seconds), 1)
        # A sampler that failed meanwhile (it would step for ten minutes) left the learner alone on a core.
        try:
            failed = sink.get(timeout=0.01)
        except Empty:
            failed = None
        if isinstance(failed, Failed):
            raise MeasurementError(f"the samplers beside the learner: {failed.error}")
        return learner
    finally:
        for p in samplers:  # stopped as soon as the learner is timed
            p.terminate()
            p.join()


def measure(config: ExperimentConfig, cores: int, threads: list[int], seconds: float = PART_SECONDS) -> Measured:
    """e, i(b) and l(t) on `cores` cores, with the isolated measurements of srl/measure.py."""

    data = config.model_dump(mode="json")
    envs_max = max(1, config.trainers.batch_steps // config.actors.trajectory_length)
    batches = [2**k for k in range(int(math.log2(envs_max)) + 1)]
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="srl-layout-cwd-") as scratch:
        os.chdir(scratch)  # simulators may write files into the working directory
        try:
            env = parallel(env_rate, lambda i: (data["env"], 16, seconds, config.seed + i), cores) / cores
            per_process = gather(_inference_rates, lambda i: (data, batches, seconds / 2), cores)
            inference = {b: sum(r[b] for r in per_process) / cores for b in batches}
            learner = {t: _learner_beside_samplers(data, cores, t, seconds) for t in threads}
        finally:
            os.chdir(here)
    return Measured(cores, env, inference, learner)


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "srl" / "layout"


def _cache_key(config: ExperimentConfig, cores: int, threads: list[int]) -> dict[str, Any]:
    """What the measurements depend on: the env, policy and algorithm, the batch's shape, the machine."""
    return {"version": MEASURE_VERSION, "name": config.name, "env": config.env.model_dump(mode="json"),
            "policy": config.policy.model_dump(mode="json"), "algorithm": config.algorithm.model_dump(mode="json"),
            "trajectory_length": config.actors.trajectory_length, "batch_steps": config.trainers.batch_steps,
            "seed": config.seed, "cores": cores, "threads": threads, "host": platform.node(),
            "machine": platform.machine(), "cpu_count": os.cpu_count()}


def cached_measure(config: ExperimentConfig, cores: int, threads: list[int],
                   say: Callable[[str], None] = lambda line: None) -> tuple[Measured, Path, bool]:
    """`measure`, or the measurements of an earlier run with the same key. Returns (them, file, from cache)."""
    key = _cache_key(config, cores, threads)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"{config.name}-{digest}.json"
    try:
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            m = saved["measured"]
            return Measured(m["cores"], m["env"], {int(k): v for k, v in m["inference"].items()},
                            {int(k): v for k, v in m["learner"].items()}), path, True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    say(f"measuring the env, forward pass and learner rates on {cores} cores for the layout (once: kept in {path})")
    measured = measure(config, cores, threads)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "measured": asdict(measured), "time": time.time()}, indent=1))
        partial.replace(path)  # atomic: two runs measuring at once leave one whole file
    except OSError:
        pass  # no cache (a read-only home): the next run measures again
    return measured, path, False


# ------------------------------------------------------------------------ on a Ray cluster
#: The worker groups `auto` lays out, by their config section.
LAID_OUT = ("actors", "policy_workers", "trainers")


def ray_node(config: ExperimentConfig, auto: list[str], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The one alive node of the cluster (`ray.nodes()`) that every laid-out group is pinned to.

    The model describes one machine's cores shared by the samplers and the trainer, so a cluster
    run is laid out on one node: the groups must name the same `placement.resources` (policy
    workers only where inference may be remote), and those must match exactly one alive node (a
    label only that node has). Raises ConfigError.
    """
    # Policy workers run only with remote inference: an inline run need not place them.
    inline = "actors.inference" not in auto and config.actors.inference == "inline"
    sections = [section for section in LAID_OUT if not (inline and section == "policy_workers")]
    wanted = {section: getattr(config, section).placement.resources for section in sections}
    if any(resources != wanted["actors"] for resources in wanted.values()):
        given = ", ".join(f"{section}: {resources}" for section, resources in wanted.items())
        raise ConfigError(f"{auto[0]}: `auto` on a Ray cluster lays out one node, so {', '.join(sections)} "
                          f"must name the same placement.resources ({given})")
    resources = wanted["actors"]
    alive = [n for n in nodes if n.get("Alive")]
    matching = [n for n in alive if all(name in n.get("Resources", {}) for name in resources)]
    if len(matching) != 1:
        label = f"placement.resources {resources}" if resources else "no placement.resources"
        raise ConfigError(f"{auto[0]}: `auto` on a Ray cluster lays out one node, and {label} matches "
                          f"{len(matching)} of the cluster's {len(alive)} alive nodes: pin the groups to one node "
                          f"with a resource only that node has (docs/cluster.md)")
    node = matching[0]
    if node["Resources"].get("CPU", 0) < 1:
        raise ConfigError(f"{auto[0]}: node {node.get('NodeManagerAddress')} offers Ray no whole CPU to lay out")
    return node


def measure_on_ray_node(config: ExperimentConfig, auto: list[str], threads_on: Callable[[int], list[int]],
                        say: Callable[[str], None]) -> tuple[Measured, Path, bool, dict[str, Any]]:
    """`cached_measure` run on the run's node as a Ray task, on the CPUs Ray gives that node.

    Returns (the measurements, their cache file on that node, from cache, the node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from srl.launch.ray_launcher import connect

    connect(config.ray.address)
    try:
        node = ray_node(config, auto, ray.nodes())
        cores = int(node["Resources"]["CPU"])
        where = {"ip": node["NodeManagerAddress"], "id": node["NodeID"], "cpus": cores}
        say(f"the layout's rates come from node {where['ip']} ({cores} CPUs): measured there by a Ray task, "
            f"once, then read from that node's cache")
        # No CPU reserved: the task's processes measure the node's CPUs themselves, and no run is there yet.
        task = ray.remote(num_cpus=0, max_retries=0)(cached_measure).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
        ref = task.remote(config, cores, threads_on(cores))
        try:
            measured, path, from_cache = ray.get(ref, timeout=RAY_MEASURE_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            if isinstance(exc, ray.exceptions.GetTimeoutError):
                _cancel(ray, ref)
                raise MeasurementError(f"measuring on node {where['ip']} gave no answer in "
                                       f"{RAY_MEASURE_TIMEOUT_S:.0f} s") from None
            # The task ended in an error, wrapped in its remote traceback: its cause says it in a line.
            cause = getattr(exc, "cause", None) or exc
            lines = str(cause).strip().splitlines() or [""]
            why = lines[0] if isinstance(cause, MeasurementError) else f"{type(cause).__name__}: {lines[0]}"
            raise MeasurementError(f"measuring on node {where['ip']} failed: {why}") from None
        except BaseException:
            _cancel(ray, ref)  # Ctrl-C
            raise
        return measured, path, from_cache, where
    finally:
        ray.shutdown()


def _cancel(ray: Any, ref: Any) -> None:
    """Interrupt a measuring task still running; its measuring stops the processes it started."""
    ray.cancel(ref)
    ray.wait([ref], timeout=30)


def refuse(config: ExperimentConfig, auto: list[str]) -> None:
    """A ConfigError naming the first `auto` field, where the model does not describe the run."""

    why = None
    if config.policies or config.population is not None:
        why = "is measured for one policy trained once; set the layout by hand with `policies:` or `population:`"
    elif config.policy_workers.device != "cpu" or config.trainers.device != "cpu":
        why = "measures CPU workers; with a GPU device set the layout by hand"
    elif config.env.backend != "python":
        why = "measures Python envs; with env.backend=envpool set the layout by hand"
    elif config.actors.synchronous:
        why = "has nothing to choose with actors.synchronous (one inline actor)"
    elif replay_settings(config) is not None:
        why = "models on-policy graphs (actors -> trainers); with replay buffers set the layout by hand"
    if why:
        raise ConfigError(f"{auto[0]}: `auto` {why}")


def resolve(config: ExperimentConfig, auto: list[str], cores: int | None = None,
            say: Callable[[str], None] = lambda line: None) -> tuple[ExperimentConfig, dict[str, Any]]:
    """The config with its `auto` fields chosen, and the record of the choice (for layout.json).

    `config` was validated with the `auto` fields left out (`take_auto`). Raises ConfigError.
    """
    refuse(config, auto)
    data = config.model_dump(mode="json")
    fixed = {name: _get(data, name) for name in AUTO_FIELDS if name not in auto}

    def threads_on(cores: int) -> list[int]:
        # Powers of two up to the cores (and a fixed count): one cache entry serves every run of the config.
        return sorted({2**k for k in range(int(math.log2(cores)) + 1)} | {fixed.get("trainers.placement.threads", 1)})

    node = None
    if config.launcher == "ray" and config.ray.address is not None:
        measured, path, from_cache, node = measure_on_ray_node(config, auto, threads_on, say)
        cores = measured.cores
    else:  # this machine (a private Ray cluster, `ray.address` unset, runs here too)
        cores = cores or cores_available()
        measured, path, from_cache = cached_measure(config, cores, threads_on(cores), say)
    shape = Shape(config.actors.trajectory_length, config.trainers.batch_steps, config.trainers.count,
                  config.streams.sample_slots, fixed)
    choice = choose(measured, shape)
    for name, value in choice.best.layout.fields().items():
        _set(data, name, value)
    if node is not None:
        # Ray reserves `placement.num_cpus` for each worker: the chosen processes must fit the node.
        share = round(cores / (choice.best.layout.processes + config.trainers.count), 4)
        for section in LAID_OUT:
            data[section]["placement"]["num_cpus"] = min(data[section]["placement"]["num_cpus"], share)
    resolved = validate_structure(data)
    record = {"auto": auto, "cores": cores, "node": node, "chosen": choice.best.layout.fields(),
              "predicted_trained_steps_per_s": round(choice.best.trained, 1), "bound": choice.best.bound,
              "limits": {k: round(v, 1) for k, v in choice.best.limits.items()}, "reason": choice.reason,
              "measured": asdict(measured), "measurements": str(path), "from_cache": from_cache,
              "alternatives": [{**p.layout.fields(), "predicted": round(p.trained, 1), "bound": p.bound}
                               for p in choice.ranked[1:6]]}
    return resolved, record


def describe(record: dict[str, Any]) -> str:
    """One line: the chosen fields and why."""
    chosen = " ".join(f"{k}={v}" for k, v in record["chosen"].items() if k in record["auto"])
    kept = " ".join(f"{k}={v}" for k, v in record["chosen"].items() if k not in record["auto"])
    where = f"{record['cores']} cores" + (f" of node {record['node']['ip']}" if record.get("node") else "")
    return f"layout {chosen}{f' (kept {kept})' if kept else ''} on {where}: {record['reason']}"


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *sections, leaf = dotted.split(".")
    for part in sections:
        data = data[part]
    data[leaf] = value
