"""The replay graph: actors -> replay buffers -> trainers; parameters back to the actors (or
policy workers), and the trainers' new priorities back to the buffer that sent each batch.
DQN (Ape-X by config), R2D2, VDN, QMIX and MuZero (whose buffers may also feed reanalyse workers)."""

from __future__ import annotations

from typing import Literal

from srl.api.config import SAMPLER_NICE, ExperimentConfig
from srl.api.graph import Graph, Group
from srl.api.settings import BufferSettings, ReanalyseSettings
from srl.graphs.common import niced, sampler_groups, trainer_group


def replay_graph(config: ExperimentConfig, unit: Literal["transition", "sequence"] = "transition",
                 n_step: int = 1, gamma: float = 0.99, joint: bool = False, also_store: tuple[str, ...] = (),
                 reanalyse_fraction: float = 0.0) -> Graph:
    """The buffers (the config's `replay:` section) store `unit`s: transitions with `n_step`
    returns discounted by `gamma`, or whole sequences; `joint`: one transition holds all the
    agents of an env (VDN, QMIX); `also_store`: acting fields the learner reads (MuZero's
    searched values and visit distributions); `reanalyse_fraction` > 0: a reanalyse worker per
    buffer searches that many stored sequences again per sequence trained on, with the newest
    parameters, and the buffer keeps the fresh `also_store` fields it finds."""
    c = config
    buffer = Group(
        kind="buffer", count=c.replay.count, placement=niced(c.replay.placement, 0),
        settings=BufferSettings(env=c.env, replay=c.replay, checkpoint=c.checkpoint,
                                trajectory_length=c.actors.trajectory_length, unit=unit, n_step=n_step, gamma=gamma,
                                joint=joint, also_store=also_store, reanalyse_fraction=reanalyse_fraction),
        streams={"samples": "samples", "replay": "replay"})
    groups = {"trainer": trainer_group(config, samples="replay")}
    if reanalyse_fraction > 0:
        # Buffer i sends to reanalyse worker i (a sharded stream): one each. Like the actors, they
        # search, and yield the CPU to the trainers.
        groups["reanalyse"] = Group(kind="reanalyse", count=c.replay.count,
                                    placement=niced(c.replay.placement, SAMPLER_NICE),
                                    settings=ReanalyseSettings(env=c.env, policy=c.policy),
                                    streams={"segments": "reanalyse", "parameters": "parameters"})
        buffer.streams["reanalyse"] = "reanalyse"
    return Graph(groups={**groups, "buffer": buffer, **sampler_groups(config)})
