"""Several policies: one trainer group per policy, each on streams of its own (`samples-<policy>`,
`parameters-<policy>`, `inference-<policy>`), and one actor group joined to all of them (its port
`samples/<policy>` to `samples-<policy>`, ...). With remote inference, one policy group serves
every policy the same way (`policy_workers.shared`), or each policy has a policy group of its own.

Each policy's groups are its one-policy graph's (`Algorithm.graph` of `config.policy_view`),
renamed `<group>-<policy>`, and told its name and agents.
"""

from __future__ import annotations

from srl.api.agents import AgentRouter
from srl.api.config import ConfigError, ExperimentConfig
from srl.api.graph import Graph, Group
from srl.graphs import algorithm_graph


def several_policies_graph(config: ExperimentConfig, router: AgentRouter) -> Graph:
    """Raises `ConfigError` for an algorithm whose graph has other kinds of workers."""
    joined_kinds = {"actor", "policy"} if config.policy_workers.shared else {"actor"}
    groups: dict[str, Group] = {}
    joined: dict[str, Group] = {}  # one group for all policies, its ports keyed by policy
    for name in config.policies:
        view = config.policy_view(name)
        graph = algorithm_graph(view)
        extra = [g for g, group in graph.groups.items() if group.kind not in ("trainer", "policy", "actor")]
        if extra:
            raise ConfigError(f"policies.{name}.algorithm.type: {view.algorithm.type!r} trains in a graph with "
                              f"{', '.join(extra)} workers; several policies work with on-policy algorithms "
                              "(ppo, appo) for now")
        agents = list(router.agents_of(name))
        for group_name, group in graph.groups.items():
            streams = {port: f"{stream}-{name}" for port, stream in group.streams.items()}
            if group.kind in joined_kinds:
                one = joined.setdefault(group_name, group.model_copy(update={"streams": {}}))
                one.streams = {**one.streams, **{f"{port}/{name}": stream for port, stream in streams.items()}}
                one.settings = one.settings.joining(name, view.policy, agents)
            else:
                groups[f"{group_name}-{name}"] = group.model_copy(update={
                    "streams": streams, "settings": group.settings.for_policy(name, agents)})
    return Graph(groups={**groups, **joined})
