"""Which policy acts for which agent: the config's `agents:` rules, applied to an env's agent ids.

    router = AgentRouter.from_rules(["seeker_0", "seeker_1", "hider_0"],
                                    [("seeker_*", "seeker"), ("*", "hider")])
    router.agents_of("seeker")         # ("seeker_0", "seeker_1")
    router.rows_of("hider", n_envs=2)  # rows of a slot that hold hider agents (env-major)

Rules are `fnmatch` patterns tried in order; the first that matches an agent names its
policy. An agent no rule matches, a rule naming no declared policy, or a declared policy
no agent maps to, is a `ConfigError` naming it. A slot's rows are env-major, then agent in
the env's own order (`srl.envs.slots`); a policy's own rows (its trajectory buffer) are
env-major, then its agents in that same order.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from srl.api.config import ConfigError, ExperimentConfig

#: The key of a run's only policy: its slots' rows, ring tracks and trajectories are keyed by
#: it as several policies' are by their names, and its ports carry no `/<policy>` suffix.
DEFAULT_POLICY = ""


def port(name: str, policy: str) -> str:
    """A keyed port's stream for `policy`: `samples` for the only policy, `samples/<policy>` for one of several."""
    return f"{name}/{policy}" if policy else name


@dataclass(frozen=True)
class AgentRouter:
    #: The env's agents in its own order, and the policy each one acts with.
    agent_ids: tuple[str, ...]
    policy_of: dict[str, str]

    @classmethod
    def from_rules(cls, agent_ids: Sequence[str], rules: Iterable[tuple[str, str]],
                   policies: Iterable[str] | None = None) -> AgentRouter:
        """Apply `(pattern, policy)` rules (first match wins). `policies`: the declared names;
        each must get at least one agent, and no rule may name another."""
        rules = list(rules)
        declared = list(policies) if policies is not None else list(dict.fromkeys(p for _, p in rules))
        for i, (_, policy) in enumerate(rules):
            if policy not in declared:
                raise ConfigError(f"agents[{i}].policy: no policy {policy!r} (policies: {', '.join(declared)})")
        policy_of = {}
        for agent in agent_ids:
            match = next((policy for pattern, policy in rules if fnmatch.fnmatchcase(agent, pattern)), None)
            if match is None:
                raise ConfigError(f"agents: the env's agent {agent!r} matches no rule "
                                  f"(patterns: {', '.join(p for p, _ in rules) or 'none'})")
            policy_of[agent] = match
        for policy in declared:
            if policy not in policy_of.values():
                raise ConfigError(f"policies.{policy}: no agent of the env maps to it "
                                  f"(agents: {', '.join(agent_ids)})")
        return cls(tuple(agent_ids), policy_of)

    @property
    def policies(self) -> tuple[str, ...]:
        """Policy names in the order their first agent appears."""
        return tuple(dict.fromkeys(self.policy_of[a] for a in self.agent_ids))

    def agents_of(self, policy: str) -> tuple[str, ...]:
        return tuple(a for a in self.agent_ids if self.policy_of[a] == policy)

    def rows_of(self, policy: str, n_envs: int) -> np.ndarray:
        """The slot rows (env-major, then agent) of `policy`'s agents, in its own row order."""
        n = len(self.agent_ids)
        mine = [i for i, a in enumerate(self.agent_ids) if self.policy_of[a] == policy]
        return np.array([j * n + i for j in range(n_envs) for i in mine], dtype=np.int64)


def route(config: ExperimentConfig) -> AgentRouter:
    """The config's `agents:` rules applied to its env (built once, to read its agents and
    spaces): every agent of one policy must have that policy's spaces. Raises `ConfigError`."""
    from srl.api.registry import ENVS

    kwargs = dict(config.env.args)
    if config.env.id:
        kwargs["id"] = config.env.id
    env = ENVS.resolve(config.env.type)(**kwargs)
    try:
        router = AgentRouter.from_rules(env.agent_ids, [(r.match, r.policy) for r in config.agents], config.policies)
        for policy in router.policies:
            first, *others = router.agents_of(policy)
            for agent in others:
                if (env.observation_space(agent) != env.observation_space(first)
                        or env.action_space(agent) != env.action_space(first)):
                    raise ConfigError(f"agents: {first!r} and {agent!r} both act with policy {policy!r} but have "
                                      "different observation or action spaces (give them policies of their own)")
    finally:
        env.close()
    return router
