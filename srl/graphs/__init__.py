"""The algorithms' worker graphs, one module each: on-policy (actors -> trainers), replay (actors ->
buffers -> trainers) and several policies (one on-policy graph per policy, actors shared).

Each builder reads the config and hands every group its kind's typed settings
(`srl.api.settings`); run modes (evaluation, self-play, populations: `srl.launch.modes`) add to what
these return, and `srl.prepare` puts the pieces together.
"""

from __future__ import annotations

from srl.api.config import ExperimentConfig
from srl.api.graph import Graph
from srl.api.registry import ALGORITHMS
from srl.graphs.on_policy import on_policy_graph


def algorithm_graph(config: ExperimentConfig) -> Graph:
    """The graph the config's algorithm trains in (`Algorithm.graph`; the on-policy one by default)."""
    graph = ALGORITHMS.resolve(config.algorithm.type).graph(config)
    return graph if graph is not None else on_policy_graph(config)
