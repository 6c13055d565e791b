"""Evaluation during training: an `eval` group reads the `parameters` stream, plays the newest
version now and then and reports `eval_*` metrics (docs/evaluation.md)."""

from __future__ import annotations

from collections.abc import Callable

from srl.api.config import SAMPLER_NICE, ConfigError, ExperimentConfig
from srl.api.graph import Graph, Group
from srl.api.settings import EvalSettings
from srl.graphs.common import niced
from srl.launch.modes.base import RunMode


class Evaluation(RunMode):
    @staticmethod
    def active(config: ExperimentConfig) -> bool:
        return config.evaluation.count > 0

    @classmethod
    def graph(cls, graph: Graph, config: ExperimentConfig, build: Callable[[ExperimentConfig], Graph]) -> Graph:
        c = config.evaluation
        if not any(g.streams.get("parameters") == "parameters" for g in graph.groups.values()):
            raise ConfigError("evaluation.count: the algorithm's graph has no `parameters` stream to evaluate")
        group = Group(kind="eval", count=c.count, placement=niced(c.placement, SAMPLER_NICE),
                      settings=EvalSettings(env=config.env, policy=config.policy, evaluation=c),
                      streams={"parameters": "parameters"})
        return Graph(groups={**graph.groups, "eval": group})
