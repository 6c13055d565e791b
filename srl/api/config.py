"""Experiment configuration: one YAML file, validated before anything starts.

Each component gets its own section and sees only that section. Unknown keys and bad
values fail validation with the dotted path of the field (`ConfigError`); the
component-specific `args` of the policy and algorithm are validated against the
component's own `Config` model when it declares one.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from srl.api.config_files import ConfigError, apply_overrides, read_config_file
from srl.api.run_paths import RunPaths


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @pydantic.field_validator("*", mode="before")
    @classmethod
    def _no_true_or_false_for_a_number(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        # pydantic takes true as 1 for a number; `actors.count=true` is a slip, not a count of one.
        if isinstance(value, bool) and info.field_name and _numbers_only(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, not {str(value).lower()}")
        return value


def _numbers_only(annotation: Any) -> bool:
    """Whether a field's type takes numbers and no bool (`int`, `float | None`, `int | Literal["auto"]`)."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    members = typing.get_args(annotation)
    return bool not in members and any(m in (int, float) for m in members)


class EnvConfig(Section):
    #: A registered env name (`gym`, `fake`) or an import path to an `srl.api.Env` class.
    type: str = "gym"
    #: For `type: gym`: a Gymnasium id, or `package.module:Class` of a Gymnasium env.
    id: str | None = None
    args: dict[str, Any] = {}
    #: How actors step their envs: `python` (Env objects) or `envpool` (one EnvPool batch per ring slot).
    backend: Literal["python", "envpool"] = "python"
    #: An observation or reward with NaN: `raise` stops the actor with an error naming env,
    #: agent and field; `skip_episode` ends that episode and carries on.
    on_bad_output: Literal["raise", "skip_episode"] = "raise"


class ComponentConfig(Section):
    type: str
    args: dict[str, Any] = {}


class Placement(Section):
    """Where a worker group may run (cluster launchers): CPUs and GPUs per worker, and custom
    resources or node labels that pin the group to nodes (`{node2: 0.01}`); and, with any
    launcher, the CPU priority of its processes (`nice`)."""

    num_cpus: float = Field(0.5, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    resources: dict[str, float] = {}
    #: CPU priority of the group's processes, as `nice` takes it (0 to 19; higher yields more).
    #: Unset: actors and policy workers yield (`SAMPLER_NICE`) and trainers do not. When the
    #: cores are shared, the trainer, usually the bottleneck, then runs whenever it can and the
    #: samplers fill the gaps (docs/benchmarks.md has the measurement).
    nice: int | None = Field(None, ge=0, le=19)
    #: Run the group's processes under Linux's SCHED_IDLE policy: they take a core only when no
    #: other process wants it, and a core running only such processes counts as free for a
    #: waking process. On a box of its own, `actors.placement.idle=true` keeps the trainer's core
    #: for it better than `nice`; where other users' processes share the cores, idle samplers
    #: starve (docs/benchmarks.md, "The trainer's core on a slower or busier box").
    idle: bool = False
    #: Torch intra-op threads of each of the group's processes. One by default: workers
    #: already fill the cores, so a parallel speed-up of small ops is rarely had. A trainer of
    #: large convolutions gains from more (its idle threads sleep rather than spin: srl/__init__.py).
    threads: PositiveInt = 1


#: Default `placement.nice` of actors and policy workers.
SAMPLER_NICE = 10


class ActorsConfig(Section):
    count: PositiveInt = 2
    placement: Placement = Placement()
    #: Env slots per actor: while one slot waits for its actions, the next one steps.
    ring_size: PositiveInt = 2
    #: Envs stepped together in one slot (one inference request per slot).
    envs_per_slot: PositiveInt = 8
    #: Steps per trajectory sent to the trainer.
    trajectory_length: PositiveInt = 64
    #: `remote`: policy workers answer batched requests; `inline`: each actor runs the policy itself.
    inference: Literal["remote", "inline"] = "remote"
    #: After sending the samples the trainer trains on next, wait for the version it publishes
    #: before acting on: each trajectory is acted by the version trained on all before it. With
    #: one inline actor, a run repeats exactly under the same `seed` (slower: no overlap).
    synchronous: bool = False


class PolicyWorkersConfig(Section):
    count: PositiveInt = 1
    placement: Placement = Placement()
    #: Wait up to this long for more requests before a forward pass (0: serve what is there).
    max_wait_ms: float = Field(0.0, ge=0)
    device: str = "cpu"
    #: Several policies: each policy worker serves every policy (one process holding each
    #: policy's copy); false: `count` policy workers per policy, in groups of their own.
    shared: bool = True


class TrainersConfig(Section):
    #: Data-parallel trainers (torch DDP: gloo on CPU, NCCL on GPU); actors are shared out among them.
    count: PositiveInt = 1
    placement: Placement = Placement()
    #: Env steps per training batch (a multiple of trajectory length x rows per trajectory).
    batch_steps: PositiveInt = 2048
    #: Drop samples whose policy is more than this many versions behind the trainer's.
    max_staleness: PositiveInt = 4
    #: When a training step leaves non-finite weights: `stop` the run with a clear message, or
    #: `rollback` to the last checkpoint and go on. Non-finite weights are never checkpointed.
    on_diverge: Literal["stop", "rollback"] = "stop"
    device: str = "cpu"
    #: How `count` > 1 trainers keep one model: `allreduce` (averaged gradients, every step in
    #: lockstep) or `hogwild` (one copy of the weights in shared memory, updated by every
    #: trainer without locks or waiting: one host, CPU only; suits many small replay updates).
    data_parallel: Literal["allreduce", "hogwild"] = "allreduce"

    @pydantic.model_validator(mode="after")
    def _hogwild_on_cpu(self) -> TrainersConfig:
        if self.data_parallel == "hogwild" and self.device != "cpu":
            raise ValueError(f"data_parallel=hogwild shares weights through host memory: device must be cpu, "
                             f"not {self.device!r}")
        return self


class MessageCaps(Section):
    """The largest message, in MiB, each stream kind takes. A larger one is dropped unread (ZeroMQ
    disconnects a peer that sends a larger frame) and counted as `oversized`; a sender that
    builds one fails at once, naming this setting. Generous by default: a trajectory of Atari
    frames from 64 envs is ~250 MiB, a 100M-parameter model 400 MiB."""

    #: Heartbeats with their stats and log lines, and the controller's answers.
    control: PositiveFloat = 16
    #: One ring slot's observations and recurrent states, and the actions back.
    inference: PositiveFloat = 64
    #: One trajectory (or replay batch), and the credits and priorities back.
    samples: PositiveFloat = 1024
    #: One version of the policy's parameters.
    parameters: PositiveFloat = 2048

    def in_bytes(self) -> dict[str, int]:
        return {kind: int(mib * 2**20) for kind, mib in self.model_dump().items()}


class StreamsConfig(Section):
    #: `auto`: shared memory between processes of one host, ZeroMQ between hosts.
    transport: Literal["auto", "shm", "zmq"] = "auto"
    #: Trajectories an actor may have in flight to the trainer before it blocks (backpressure).
    sample_slots: PositiveInt = 4
    #: When the trainer falls behind: `wait` (actors slow down) or `drop_oldest` (the trainer
    #: keeps draining into a queue of `trainer_queue` trajectories and drops the oldest).
    when_full: Literal["wait", "drop_oldest"] = "wait"
    trainer_queue: PositiveInt = 16
    max_message_mb: MessageCaps = MessageCaps()
    #: Over TCP only peers with the run's keys finish a handshake (`srl.streams.gate`): a peer
    #: that has not within this many seconds is dropped ...
    handshake_timeout_s: float = Field(5.0, gt=0, le=300)
    #: ... and each server keeps at most this many connections in their handshake (the oldest
    #: are shut first), so peers without the keys never take the descriptors its files need.
    max_pending_connections: int = Field(64, ge=1, le=65536)


class ReplayConfig(Section):
    """Replay buffer workers, in the graphs of algorithms that replay samples (DQN, QMIX, ...)."""

    #: Buffer workers; actors are shared out among them, and they among the trainers.
    count: PositiveInt = 1
    placement: Placement = Placement()
    #: Env steps each buffer holds (the oldest are overwritten).
    capacity: PositiveInt = 100_000
    #: Units (transitions, or sequences for recurrent replay) per gradient update.
    batch_size: PositiveInt = 64
    #: Gradient updates per message to the trainer (a larger message costs less per update).
    updates_per_batch: PositiveInt = 1
    #: Gradient updates per env step, held both ways: the trainer waits for samples and the
    #: actors wait for the trainer. None: both run as fast as they can (Ape-X).
    replay_ratio: float | None = Field(0.25, gt=0)
    #: Env steps a buffer holds before it sends its first batch.
    learning_starts: int = Field(1000, ge=0)
    #: Prioritized replay: draw units in proportion to priority ** alpha (0: uniform) ...
    alpha: float = Field(0.0, ge=0)
    #: ... and weight them by (N * P) ** -beta.
    beta: float = Field(0.4, ge=0, le=1)
    #: Batches sent and not yet taken by the trainer, at most.
    batches_in_flight: PositiveInt = 2
    #: Save the buffers' contents with the checkpoints; a replaced buffer and a --resume reload them.
    save_contents: bool = False


class StopConfig(Section):
    env_steps: PositiveInt | None = None
    time_s: float | None = Field(None, gt=0)
    #: Stop when the mean return of the last 100 episodes reaches this.
    episode_return: float | None = None
    #: Stop when an evaluation's mean return reaches this (needs `evaluation.count: 1`).
    eval_return: float | None = None


class WandbConfig(Section):
    """`log.wandb`: mirror the run to Weights & Biases (see docs/tracking.md)."""

    project: str = "srl"
    entity: str | None = None
    #: Unset: `$WANDB_MODE` if set, else `online` (a user who names a project expects to see it
    #: on wandb.ai). `offline` writes only under the run directory (`wandb sync` uploads it later).
    mode: Literal["online", "offline", "disabled"] | None = None


class LogConfig(Section):
    #: A row of metrics.jsonl at least this often ...
    report_interval_s: float = Field(1.0, gt=0)
    #: ... and as soon as the policy is this many versions past the row before (null: on the
    #: interval alone), so a run of seconds still draws a curve and a sweep can prune on it ...
    report_every_versions: PositiveInt | None = 1
    #: ... but rows never closer than this, so a long run of fast versions writes no flood.
    min_report_interval_s: float = Field(0.1, gt=0)
    tensorboard: bool = True
    progress: bool = True
    #: Absent: no W&B. `log.wandb: {}` or any `log.wandb.<key>=...` override turns it on.
    wandb: WandbConfig | None = None


class CheckpointConfig(Section):
    every_s: float = Field(30.0, gt=0)
    keep: PositiveInt = 3


class EvaluationConfig(Section):
    """An evaluation worker: plays the newest policy version now and then, trains on nothing,
    reports `eval_*` metrics and keeps the best-scoring weights as `checkpoints/best.pt`."""

    #: 0: no evaluation. 1: one worker (the one writer of the `best` checkpoint).
    count: int = Field(0, ge=0, le=1)
    placement: Placement = Placement()
    #: Evaluate a newer version when this many seconds have passed since the last evaluation ...
    every_s: float | None = Field(30.0, gt=0)
    #: ... or when the policy is this many versions past the last one evaluated (null: by time only).
    every_versions: PositiveInt | None = None
    #: Episodes per evaluation, shared out among `envs` envs stepped together.
    episodes: PositiveInt = 10
    envs: PositiveInt = 10
    #: The most likely action (argmax, or a Gaussian's mean); false: sample as the actors do.
    deterministic: bool = True

    @pydantic.model_validator(mode="after")
    def _has_a_schedule(self) -> EvaluationConfig:
        if self.every_s is None and self.every_versions is None:
            raise ValueError("evaluation: set every_s or every_versions (or both)")
        return self


class SelfPlayConfig(Section):
    """Self-play in a competitive env: the learner's agents against frozen versions of the
    policy from a pool in the run directory, and a league worker that fills the pool and rates
    the newest version against it (docs/selfplay.md)."""

    #: Agent ids of the learner's team, as fnmatch patterns (`player_0`, `red_*`); the other
    #: agents are its opponents. Only the learner's agents make samples.
    learner: list[str] = Field(min_length=1)
    #: The learner takes the opponents' seats in every other env (and in half the league's
    #: games): for games whose sides differ, such as board games where one player moves first.
    swap_sides: bool = False
    #: How actors draw the opponents' version from the pool: the newest, any alike, or
    #: prioritized by the learner's win rate against it (PFSP: the ones it loses to).
    opponent: Literal["latest", "uniform", "pfsp"] = "pfsp"
    #: PFSP's weight of an opponent the learner beats at rate w: `hard` (1 - w) ** exponent, `variance` w (1 - w).
    pfsp_weighting: Literal["hard", "variance"] = "hard"
    pfsp_exponent: PositiveFloat = 2.0
    #: The league matches per opponent (newest first) that its win rate counts.
    win_rate_matches: PositiveInt = 5
    #: Episodes each of an actor's envs plays (on average) against one opponent before the next draw.
    opponent_episodes: PositiveFloat = 1.0
    #: The share of the opponents' moves played at random among their legal ones (an env with
    #: legal-move masks, or a discrete action space): a pool of its own past versions shows the
    #: learner only the positions its own play leads to; mistakes of the opponents show it others
    #: (a weaker player's), and what to do with them. 0: the opponents play their policy only.
    opponent_random_moves: float = Field(0.0, ge=0.0, le=1.0)
    #: Freeze the newest version into the pool every this many versions.
    snapshot_every_versions: PositiveInt = 10
    #: Versions the pool keeps (the oldest go first; the initial one stays).
    pool_size: int = Field(50, ge=2)
    #: The league worker: niced like the actors, a round of games every `every_s` seconds:
    #: against `opponents_per_round` pool versions, `episodes` games each, on `envs` envs.
    placement: Placement = Placement()
    every_s: PositiveFloat = 10.0
    opponents_per_round: PositiveInt = 4
    episodes: PositiveInt = 32
    envs: PositiveInt = 16
    #: Greedy play in the league's games (false: sampled, as the actors play).
    deterministic: bool = False


class ElasticConfig(Section):
    """Actors that follow the cluster's nodes (docs/cluster.md, "Nodes that die or join").

    When a node dies, its workers are placed again on the nodes left, where they fit: actors
    that fit nowhere are dropped (never below `min_actors`: the run stops instead), and a worker
    of another group that fits nowhere stops the run with the reason. When a node joins, actors
    are added on it, up to `max_actors`. Every stream of an elastic run goes over TCP, so that any
    worker can move to any node."""

    min_actors: PositiveInt = 1
    max_actors: PositiveInt = 64

    @pydantic.model_validator(mode="after")
    def _ordered(self) -> ElasticConfig:
        if self.min_actors > self.max_actors:
            raise ValueError(f"min_actors ({self.min_actors}) is above max_actors ({self.max_actors})")
        return self


class RayConfig(Section):
    #: `HOST:PORT` of a running cluster's head (None: start a private one on this machine).
    address: str | None = None
    #: Actors that follow nodes dying and joining mid-run (None: a run's workers stay where they
    #: were placed, and a worker whose node dies is placed again on that node's resources).
    elastic: ElasticConfig | None = None


class SupervisionConfig(Section):
    #: A running worker silent for this long is considered hung: killed and restarted. A run of more
    #: than 500 workers beats less often (workers / 2000 s apart) and waits four periods at least.
    heartbeat_timeout_s: float = Field(10.0, gt=0)
    #: A worker that has not sent its first heartbeat this long after it was (re)started stops the
    #: run. It never counts less than `heartbeat_timeout_s`: a machine slow enough to need a
    #: longer heartbeat timeout starts its workers slowly too.
    start_timeout_s: float = Field(120.0, gt=0)
    #: Restarts allowed per worker within `restart_window_s`; one more stops the run cleanly.
    max_restarts: int = Field(3, ge=0)
    restart_window_s: float = Field(60.0, gt=0)
    #: A running worker whose progress (its kind's `progress` stat: a trainer's trained steps, an
    #: actor's env steps, a policy worker's answered requests) stands still this long while it
    #: waits on no other worker is hung: killed and restarted like a silent one. When every
    #: watched worker waits on another and none moves for this long, the run stops. null: off.
    progress_timeout_s: float | None = Field(300.0, gt=0)
    #: `progress_timeout_s` for some groups, by name (`trainer: 1800` for a very slow step).
    progress_timeout_by_group: dict[str, PositiveFloat] = {}

    def progress_timeout(self, group: str) -> float | None:
        """The progress window of a worker of `group` (None: its progress is not watched)."""
        return self.progress_timeout_by_group.get(group, self.progress_timeout_s)


class HyperParameter(Section):
    """One `algorithm.args` field a population varies: where each member starts, how explore
    moves it, and the bounds it never leaves."""

    #: One starting value per member (None: every member starts at the config's own value).
    values: list[float] | None = None
    #: Explore multiplies the copied value by one of these, drawn at random ...
    factors: list[PositiveFloat] = [0.8, 1.25]
    #: ... and clips the result to [min, max].
    min: float
    max: float

    @pydantic.model_validator(mode="after")
    def _ordered(self) -> HyperParameter:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        outside = [v for v in self.values or [] if not self.min <= v <= self.max]
        if outside:
            raise ValueError(f"values {outside} lie outside [min, max] = [{self.min}, {self.max}]")
        return self


class PopulationConfig(Section):
    """Population-based training: `size` members of the experiment train side by side; a
    population manager makes the worse members copy the better ones' weights (exploit) and
    perturbs the copied hyper-parameters (explore). See docs/population.md."""

    size: int = Field(ge=2)
    #: A member is ready for exploit/explore this many seconds after its start or last copy ...
    interval_s: float | None = Field(30.0, gt=0)
    #: ... or once its trainer has published this many versions since then (null: by time only).
    interval_versions: PositiveInt | None = None
    #: A ready member in the bottom `quantile` of returns copies a member of the top `quantile` ...
    quantile: float = Field(0.25, gt=0, le=0.5)
    #: ... whose return is higher by more than this (members as good as each other copy nothing).
    margin: float = Field(0.0, ge=0)
    #: Episodes a member must have finished (in its return window) before it is ranked.
    min_episodes: PositiveInt = 10
    #: false: the members train independently, each with its own starting values (the baseline).
    exploit: bool = True
    #: `algorithm.args` fields to vary, by name.
    hyperparameters: dict[str, HyperParameter] = {}
    placement: Placement = Placement(num_cpus=0.1)

    @pydantic.model_validator(mode="after")
    def _has_a_schedule(self) -> PopulationConfig:
        if self.interval_s is None and self.interval_versions is None:
            raise ValueError("set interval_s or interval_versions (or both)")
        return self


class LimitsConfig(Section):
    """Ceilings that catch a slip (an extra zero, a flag where a count belongs) before it takes the
    machine down: each is far above what a run on one machine needs. A large cluster raises
    `workers` on purpose (`limits.workers=20000`)."""

    #: Worker processes in the whole graph (every group, every population member).
    workers: PositiveInt = 4096
    #: Torch threads of one worker process (`<group>.placement.threads`).
    threads_per_worker: PositiveInt = 256
    #: Envs one actor steps (`actors.envs_per_slot` x `actors.ring_size`).
    envs_per_actor: PositiveInt = 65_536
    #: Env steps one replay buffer holds (`replay.capacity`).
    replay_capacity: PositiveInt = 100_000_000
    #: The largest message of any stream as a share of this machine's memory (`streams.max_message_mb`).
    message_share_of_memory: float = Field(0.5, gt=0, le=1)


def _machine_memory_mb() -> float:
    import psutil

    return psutil.virtual_memory().total / 2**20


class GroupOverride(Section):
    """A config's `workers.<group>` entry: changes to a group of the default graph, or a new group."""

    kind: str | None = None
    count: PositiveInt | None = None
    placement: Placement | None = None
    settings: dict[str, Any] | None = None
    streams: dict[str, str] | None = None


class PolicySpec(Section):
    """One of several policies (`policies.<name>`): its own model, algorithm and trainers."""

    policy: ComponentConfig = ComponentConfig(type="actor_critic")
    algorithm: ComponentConfig = ComponentConfig(type="ppo")
    trainers: TrainersConfig = TrainersConfig()


class AgentRule(Section):
    """`agents[i]`: agents whose id matches `match` (an fnmatch pattern) act with `policy`."""

    match: str
    policy: str


#: What a run may be called: `runs/<name>/` must stay inside `runs/`.
RUN_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}"

#: What a policy may be called: it names worker groups, streams, metrics and a checkpoint directory.
POLICY_NAME = r"^[A-Za-z][A-Za-z0-9_]*$"


class ExperimentConfig(Section):
    #: Names the default run directory (`runs/<name>/<time>`), so it is one safe path part.
    name: str
    seed: int = 0
    env: EnvConfig
    policy: ComponentConfig = ComponentConfig(type="actor_critic")
    algorithm: ComponentConfig = ComponentConfig(type="ppo")
    actors: ActorsConfig = ActorsConfig()
    policy_workers: PolicyWorkersConfig = PolicyWorkersConfig()
    trainers: TrainersConfig = TrainersConfig()
    streams: StreamsConfig = StreamsConfig()
    #: Replay buffers (only algorithms with a replay graph use this section).
    replay: ReplayConfig = ReplayConfig()
    stop: StopConfig = StopConfig()
    log: LogConfig = LogConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    supervision: SupervisionConfig = SupervisionConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    #: Absent: no self-play (one policy plays every agent). `self_play: {learner: [...]}` turns it on.
    self_play: SelfPlayConfig | None = None
    #: `local`: every worker a process here. `ray`: the same graph on a Ray cluster. `inline`:
    #: every worker in this one process, stepped in turn by one loop (for debugging: a
    #: `breakpoint()` anywhere stops the run there; no child process, no shared memory).
    launcher: Literal["local", "ray", "inline"] = "local"
    ray: RayConfig = RayConfig()
    #: Changes to the algorithm's worker graph, by group name (`actor`, `policy`, `trainer`),
    #: or new groups of any worker kind (see `srl.api.graph`).
    workers: dict[str, GroupOverride] = {}
    #: Absent: one experiment. Set: a population of `size` members (population-based training).
    population: PopulationConfig | None = None
    limits: LimitsConfig = LimitsConfig()
    #: Several policies by name, each with its own model, algorithm, trainers, parameter and
    #: sample streams (instead of the one-policy `policy:`/`algorithm:`/`trainers:` sections) ...
    policies: dict[str, PolicySpec] = {}
    #: ... and which agents each acts for: rules tried in order, the first match wins.
    agents: list[AgentRule] = []

    @pydantic.field_validator("name")
    @classmethod
    def _one_safe_path_part(cls, name: str) -> str:
        if not re.fullmatch(RUN_NAME, name):
            raise ValueError(f"{name!r}: one path part of letters, digits and _ . + - (it names the run's directory), "
                             "starting with a letter, a digit or _")
        return name

    @pydantic.model_validator(mode="after")
    def _within_limits(self) -> ExperimentConfig:
        limits = self.limits
        counts = {"actors.count": self.actors.count, "policy_workers.count": self.policy_workers.count,
                  "trainers.count": self.trainers.count, "replay.count": self.replay.count,
                  **{f"workers.{name}.count": group.count for name, group in self.workers.items() if group.count}}
        for field, count in counts.items():
            if count > limits.workers:
                raise ValueError(f"{field}: {count} is over limits.workers ({limits.workers} worker processes); "
                                 "raise limits.workers on purpose for a cluster that large")
        placements = {"actors": self.actors.placement, "policy_workers": self.policy_workers.placement,
                      "trainers": self.trainers.placement, "replay": self.replay.placement,
                      **{f"workers.{name}": group.placement for name, group in self.workers.items() if group.placement}}
        for section, placement in placements.items():
            if placement.threads > limits.threads_per_worker:
                raise ValueError(f"{section}.placement.threads: {placement.threads} is over "
                                 f"limits.threads_per_worker ({limits.threads_per_worker})")
        envs = self.actors.envs_per_slot * self.actors.ring_size
        if envs > limits.envs_per_actor:
            raise ValueError(f"actors.envs_per_slot: {self.actors.envs_per_slot} x actors.ring_size "
                             f"{self.actors.ring_size} = {envs} envs per actor, over limits.envs_per_actor "
                             f"({limits.envs_per_actor})")
        if self.replay.capacity > limits.replay_capacity:
            raise ValueError(f"replay.capacity: {self.replay.capacity} is over limits.replay_capacity "
                             f"({limits.replay_capacity})")
        return self

    @pydantic.model_validator(mode="after")
    def _policies_are_named(self) -> ExperimentConfig:
        if not self.policies:
            if self.agents:
                raise ValueError("agents: maps agents to the policies of a `policies:` section; there is none")
            return self
        for name in self.policies:
            if not re.match(POLICY_NAME, name):
                raise ValueError(f"policies.{name}: a policy name is letters, digits and _ (starting with a letter)")
        given = self.model_fields_set & {"policy", "algorithm", "trainers"}
        if given:
            raise ValueError(f"{min(given)}: with `policies:` each policy has its own policy, algorithm "
                             "and trainers sections")
        if not self.agents:
            raise ValueError("agents: required with `policies:` (e.g. [{match: 'seeker_*', policy: seeker}])")
        for i, rule in enumerate(self.agents):
            if rule.policy not in self.policies:
                raise ValueError(f"agents[{i}].policy: no policy {rule.policy!r} "
                                 f"(policies: {', '.join(self.policies)})")
        if self.actors.synchronous:
            raise ValueError("actors.synchronous: not available with several policies")
        if self.env.backend != "python":
            raise ValueError("env.backend: several policies step their envs in Python (backend: python)")
        if self.evaluation.count:
            raise ValueError("evaluation.count: the evaluation worker plays one policy; not available with "
                             "several policies yet")
        if self.self_play is not None:
            raise ValueError("self_play: a policy against its own past versions; not available with several "
                             "policies yet")
        if self.population is not None:
            raise ValueError("population: members of one policy; not available with several policies yet")
        for name, spec in self.policies.items():
            if spec.trainers.count > self.actors.count:
                raise ValueError(f"policies.{name}.trainers.count: {spec.trainers.count} trainers cannot be placed "
                                 f"with {self.actors.count} actors (each consumes at least one actor's samples)")
        return self

    @pydantic.model_serializer(mode="wrap")
    def _without_unused_sections(self, handler: Any) -> dict[str, Any]:
        """One-policy configs dump without `policies`/`agents`, several-policy ones without the
        one-policy `policy`/`algorithm`/`trainers`: the dump shows what the run used, and loads again."""
        data = handler(self)
        for key in ("policy", "algorithm", "trainers") if self.policies else ("policies", "agents"):
            data.pop(key, None)
        return data

    def policy_view(self, name: str) -> ExperimentConfig:
        """The experiment as policy `name` alone sees it: its sections in place of the one-policy ones."""
        spec = self.policies[name]
        return self.model_copy(update={"policy": spec.policy, "algorithm": spec.algorithm,
                                       "trainers": spec.trainers, "policies": {}, "agents": []})

    @pydantic.model_validator(mode="after")
    def _stop_is_set(self) -> ExperimentConfig:
        if not any(v is not None for v in self.stop.model_dump().values()):
            raise ValueError("stop: set at least one of env_steps, time_s, episode_return, eval_return")
        if self.stop.eval_return is not None and not self.evaluation.count:
            raise ValueError("stop.eval_return: needs an evaluation worker (evaluation.count: 1)")
        return self

    @pydantic.model_validator(mode="after")
    def _workers_can_be_placed(self) -> ExperimentConfig:
        if self.actors.inference == "remote" and self.policy_workers.count > self.actors.count:
            raise ValueError(f"policy_workers.count: {self.policy_workers.count} policy workers cannot be placed "
                             f"with {self.actors.count} actors (each serves at least one actor)")
        if self.actors.synchronous and (self.actors.count > 1 or self.actors.inference != "inline"
                                        or self.streams.when_full != "wait"):
            raise ValueError("actors.synchronous: needs one actor (actors.count: 1) with inline inference "
                             "and streams.when_full: wait (the actor counts what the trainer trains on)")
        if self.self_play is not None and self.actors.synchronous:
            raise ValueError("actors.synchronous: a self-play run cannot repeat exactly (its opponents come from a "
                             "pool the league fills on its own clock); set one or the other")
        if self.trainers.count > self.actors.count:
            raise ValueError(f"trainers.count: {self.trainers.count} trainers cannot be placed with "
                             f"{self.actors.count} actors (each consumes at least one actor's samples)")
        if self.ray.elastic is not None:
            elastic = self.ray.elastic
            if self.launcher != "ray":
                raise ValueError(f"ray.elastic: actors follow a Ray cluster's nodes; launcher is {self.launcher!r}, "
                                 "set launcher: ray")
            if isinstance(self.actors.count, int) and not elastic.min_actors <= self.actors.count <= elastic.max_actors:
                raise ValueError(f"actors.count: {self.actors.count} is outside ray.elastic's "
                                 f"[{elastic.min_actors}, {elastic.max_actors}]")
        if self.launcher == "inline":
            counts = [("trainers.count", self.trainers.count)] if not self.policies else [
                (f"policies.{name}.trainers.count", spec.trainers.count) for name, spec in self.policies.items()]
            for field, count in counts:
                if count > 1:
                    raise ValueError(f"{field}: launcher=inline runs one trainer per policy (data-parallel "
                                     "trainers wait for each other inside a step; one loop cannot run them)")
        return self


def check_devices(config: ExperimentConfig) -> None:
    """Fail before launch when a worker group asks for a device this machine lacks."""
    import torch

    devices = [("policy_workers", config.policy_workers.device), ("trainers", config.trainers.device)]
    devices += [(f"policies.{name}.trainers", spec.trainers.device) for name, spec in config.policies.items()]
    for section, device in devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"{section}.device: {device!r} requested but no CUDA device is available here")


#: The layout fields a config may set to `auto`: `srl.layout` chooses them from measurements on
#: this machine before the run starts (docs/layout.md); everything downstream sees plain values.
AUTO_FIELDS = ("actors.count", "actors.envs_per_slot", "actors.ring_size", "actors.inference",
               "policy_workers.count", "trainers.placement.threads")
AUTO = "auto"


def take_auto(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The raw config without its `auto` layout fields (so their defaults validate), and those fields.

    An `auto` anywhere else is left in place for validation to refuse (see `_error_line`).
    """
    out = copy.deepcopy(data)
    taken = []
    for field in AUTO_FIELDS:
        *sections, leaf = field.split(".")
        node = out
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf) == AUTO:
            del node[leaf]
            taken.append(field)
    return out, taken


def _error_line(error: pydantic.ValidationError, prefix: str = "") -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "")
    extra = len(error.errors()) - 1
    more = f" (and {extra} more)" if extra else ""
    message = first["msg"].removeprefix("Value error, ")
    if first.get("input") == AUTO and where in AUTO_FIELDS:  # validated without `take_auto` first
        message = "`auto` is chosen by `srl train` and `srl bench` (srl.layout); elsewhere give a value"
    elif first.get("input") == AUTO:
        message = f"`auto` is not a value here; it may set only {', '.join(AUTO_FIELDS)} (chosen from measurements)"
    # Whole-config checks name their field themselves ("stop: ...", "trainers.count: ...").
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def validate_structure(data: dict[str, Any]) -> ExperimentConfig:
    """Check the experiment's own schema (fast: imports no component). Raises ConfigError."""
    try:
        config = ExperimentConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(_error_line(exc)) from None
    if config.env.type == "gym" and not config.env.id:
        raise ConfigError("env.id: required for a Gymnasium env")
    return config


def validate_components(config: ExperimentConfig) -> ExperimentConfig:
    """Resolve the policy and algorithm and check their own `args`. Raises ConfigError."""
    from srl.api.registry import ALGORITHMS, POLICIES, RegistryError

    owners: list[tuple[str, Any]] = [("", config)]
    if config.policies:
        owners = [(f"policies.{name}.", spec) for name, spec in config.policies.items()]
    for prefix, owner in owners:
        for section, registry in (("policy", POLICIES), ("algorithm", ALGORITHMS)):
            component: ComponentConfig = getattr(owner, section)
            try:
                cls = registry.resolve(component.type)
            except RegistryError as exc:
                raise ConfigError(f"{prefix}{section}.type: {exc}") from None
            model = getattr(cls, "Config", None)
            if isinstance(model, type) and issubclass(model, BaseModel):
                try:
                    component.args = model.model_validate(component.args).model_dump()
                except pydantic.ValidationError as exc:
                    raise ConfigError(_error_line(exc, f"{prefix}{section}.args")) from None
    if config.population is not None:
        check_population(config.population, config.algorithm.args)
    return config


def check_population(population: PopulationConfig, args: dict[str, Any]) -> None:
    """Every varied hyper-parameter is a numeric field of the algorithm's (validated) `args`,
    with one starting value per member if any."""
    for name, hp in population.hyperparameters.items():
        if hp.values is not None and len(hp.values) != population.size:
            raise ConfigError(f"population.hyperparameters.{name}.values: {len(hp.values)} values for "
                              f"{population.size} members (one per member)")
        value = args.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            numeric = sorted(k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
            raise ConfigError(f"population.hyperparameters.{name}: not a numeric field of algorithm.args "
                              f"(those are: {', '.join(numeric)})")


def validate(data: dict[str, Any]) -> ExperimentConfig:
    """Validate the experiment, each component's own args, and the sizes this machine must hold.
    Raises ConfigError."""
    config = validate_components(validate_structure(data))
    fits_this_machine(config)
    return config


def fits_this_machine(config: ExperimentConfig) -> None:
    """Message caps against this machine's memory: checked where a run starts, not where its
    config is read again (`run_config` on a smaller machine). The defaults always pass."""
    share = config.limits.message_share_of_memory
    ceiling = share * _machine_memory_mb()
    defaults = MessageCaps().model_dump()
    for kind, mib in config.streams.max_message_mb.model_dump().items():
        if mib > max(ceiling, defaults[kind]):
            raise ConfigError(f"streams.max_message_mb.{kind}: {mib:g} MiB is over {share:g} of this machine's "
                              f"memory ({ceiling:.0f} MiB; limits.message_share_of_memory)")


def load(name_or_path: str, overrides: list[str] | None = None) -> ExperimentConfig:
    return validate(apply_overrides(read_config_file(name_or_path), overrides or []))


def dump(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def run_config(run_dir: str | Path) -> ExperimentConfig:
    """The config a run directory holds (`config.yaml`, every default filled in when the run
    started), validated as an experiment. Its components' classes are not imported here: a reader
    that builds one (`make_policy`) checks its args then, and one that builds none needs none."""
    path = RunPaths(run_dir).config
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {path.name})")
    return validate_structure(read_config_file(str(path)))
