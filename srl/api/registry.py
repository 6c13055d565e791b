"""Registries: short names for bundled components, import paths for anything else.

Entries are import paths resolved on first use, so nothing registers itself as a side
effect of an import and this module imports nothing above `srl.api`. A config names a
component either by its short name (`ppo`) or by `package.module:Name`, which works for
any user class without editing srl.
"""

from __future__ import annotations

import importlib
from typing import Any


class RegistryError(LookupError):
    pass


class Registry:
    def __init__(self, kind: str, entries: dict[str, str]) -> None:
        self.kind = kind
        self._entries = dict(entries)

    def register(self, name: str, target: str | Any) -> None:
        """Add a short name for an import path (or for an object directly)."""
        self._entries[name] = target

    def names(self) -> list[str]:
        return sorted(self._entries)

    def resolve(self, name: str) -> Any:
        target = self._entries.get(name, name)
        if not isinstance(target, str):
            return target
        if ":" not in target:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}, or give an import path 'package.module:Name'"
            )
        return import_object(target)


def import_object(path: str) -> Any:
    """Import `package.module:Name` (Name may be dotted)."""
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"cannot import {module_name!r} (from {path!r}): {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f"{module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


ENVS = Registry("env", {
    "gym": "srl.envs.gym:GymEnv",
    "fake": "srl.envs.fake:FakeEnv",
    "recall": "srl.envs.fake:RecallEnv",
    "atari": "srl.envs.atari:AtariEnv",
    "vizdoom": "srl.envs.vizdoom:VizDoomEnv",
    "pettingzoo": "srl.envs.pettingzoo:PettingZooEnv",
    "turn_based": "srl.envs.turn_based:TurnBasedEnv",
    "football": "srl.envs.football:FootballEnv",
    "duel": "srl.envs.duel:DuelEnv",
})
POLICIES = Registry("policy", {
    "actor_critic": "srl.models.actor_critic:ActorCriticPolicy",
    "random": "srl.models.random:RandomPolicy",
    "q_network": "srl.models.q_network:QNetworkPolicy",
    "muzero": "srl.models.muzero:MuZeroPolicy",
})
ALGORITHMS = Registry("algorithm", {
    "ppo": "srl.algorithms.ppo:PPO",
    "appo": "srl.algorithms.appo:APPO",
    "noop": "srl.algorithms.noop:NoopAlgorithm",
    "dqn": "srl.algorithms.dqn:DQN",
    "r2d2": "srl.algorithms.r2d2:R2D2",
    "vdn": "srl.algorithms.qmix:VDN",
    "qmix": "srl.algorithms.qmix:QMIX",
    "muzero": "srl.algorithms.muzero:MuZero",
})
#: Worker kinds: what a graph's groups run (see `srl.api.graph`).
WORKERS = Registry("worker kind", {
    "actor": "srl.workers.actor:ActorWorker",
    "policy": "srl.workers.policy_worker:PolicyWorker",
    "trainer": "srl.workers.trainer:TrainerWorker",
    "relay": "srl.workers.relay:RelayWorker",
    "buffer": "srl.workers.buffer:BufferWorker",
    "reanalyse": "srl.workers.reanalyse:ReanalyseWorker",
    "eval": "srl.workers.evaluator:EvalWorker",
    "league": "srl.workers.league:LeagueWorker",
    "population": "srl.workers.population:PopulationWorker",
})
