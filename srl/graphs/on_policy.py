"""The on-policy graph: actors -> trainers, parameters back (to policy workers with remote
inference, else to the actors themselves). PPO, APPO and any algorithm that keeps the default
`Algorithm.graph`."""

from __future__ import annotations

from srl.api.config import ExperimentConfig
from srl.api.graph import Graph
from srl.graphs.common import sampler_groups, trainer_group


def on_policy_graph(config: ExperimentConfig) -> Graph:
    return Graph(groups={"trainer": trainer_group(config), **sampler_groups(config)})
