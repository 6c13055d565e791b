"""Self-play: the actors are told which agents learn (their opponents come from the policy pool),
and a `league` group reads the `parameters` stream to fill the pool and rate the newest version
(docs/selfplay.md)."""

from __future__ import annotations

from collections.abc import Callable

from srl.api.config import SAMPLER_NICE, ConfigError, ExperimentConfig
from srl.api.graph import Graph, Group
from srl.api.settings import LeagueSettings
from srl.graphs.common import niced
from srl.launch.modes.base import RunMode


class SelfPlay(RunMode):
    @staticmethod
    def active(config: ExperimentConfig) -> bool:
        return config.self_play is not None

    @classmethod
    def graph(cls, graph: Graph, config: ExperimentConfig, build: Callable[[ExperimentConfig], Graph]) -> Graph:
        c = config.self_play
        assert c is not None
        if "actor" not in graph.groups or not any(g.streams.get("parameters") == "parameters"
                                                  for g in graph.groups.values()):
            raise ConfigError("self_play: the algorithm's graph has no `actor` group or no `parameters` stream")
        actor = graph.groups["actor"]
        league = Group(kind="league", count=1, placement=niced(c.placement, SAMPLER_NICE),
                       settings=LeagueSettings(env=config.env, policy=config.policy, self_play=c),
                       streams={"parameters": "parameters"})
        actor = actor.model_copy(update={"settings": actor.settings.model_copy(update={"self_play": c})})
        return Graph(groups={**graph.groups, "actor": actor, "league": league})
