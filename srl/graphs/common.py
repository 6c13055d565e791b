"""What the algorithms' graphs share: the trainer group and the samplers (actors, policy workers)."""

from __future__ import annotations

from srl.api.config import SAMPLER_NICE, ExperimentConfig, Placement
from srl.api.graph import Group
from srl.api.settings import ActorSettings, PolicyWorkerSettings, TrainerSettings


def niced(placement: Placement, default_nice: int) -> Placement:
    """The placement with `nice` resolved (unset: the group's default)."""
    return placement if placement.nice is not None else placement.model_copy(update={"nice": default_nice})


def trainer_group(c: ExperimentConfig, samples: str = "samples") -> Group:
    """The trainers, reading `samples` (trajectories, or a replay buffer's batches) and publishing parameters."""
    return Group(kind="trainer", count=c.trainers.count, placement=niced(c.trainers.placement, 0),
                 settings=TrainerSettings(env=c.env, policy=c.policy, algorithm=c.algorithm, trainers=c.trainers,
                                          checkpoint=c.checkpoint, streams=c.streams),
                 streams={"samples": samples, "parameters": "parameters"})


def sampler_groups(c: ExperimentConfig) -> dict[str, Group]:
    """Actors, and policy workers when inference is remote. Samplers yield the CPU to trainers
    unless their placement sets `nice`."""
    remote = c.actors.inference == "remote"
    groups = {}
    if remote:
        groups["policy"] = Group(
            kind="policy", count=c.policy_workers.count, placement=niced(c.policy_workers.placement, SAMPLER_NICE),
            settings=PolicyWorkerSettings(env=c.env, policy=c.policy, max_wait_ms=c.policy_workers.max_wait_ms,
                                          device=c.policy_workers.device),
            streams={"inference": "inference", "parameters": "parameters"})
    groups["actor"] = Group(
        kind="actor", count=c.actors.count, placement=niced(c.actors.placement, SAMPLER_NICE),
        settings=ActorSettings(env=c.env, policy=c.policy, actors=c.actors, sample_slots=c.streams.sample_slots,
                               batch_steps=c.trainers.batch_steps),
        streams={"samples": "samples", **({"inference": "inference"} if remote else {"parameters": "parameters"})})
    return groups
