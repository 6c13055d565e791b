"""Population-based training: the exploit/explore rule (`PBT`) and the worker that applies it.

Jaderberg et al. 2017, truncation selection: when a member is ready (an interval after its
start or its last copy), if its return ranks in the bottom quantile of the population it
copies a member of the top quantile (exploit: weights, optimiser state, hyper-parameters),
then multiplies each varied hyper-parameter by a random factor, within bounds (explore).

The manager never touches a member directly. Its commands travel in its heartbeats; the
controller hands each to the workers of the member it names that take commands (the
trainers), and tells the manager every member's return, version, settings and which of its
commands are done. One copy takes two commands:

    manager -> source's trainer: {"save_checkpoint": true}           # its weights as they are now
    manager -> member's trainer: {"load_checkpoint": <source's checkpoints>, "source": <member>,
                                  "hyperparameters": {...}}

The controller writes each member's starting values and each copy, once its trainer has
loaded it, to `lineage.jsonl` in the run directory (`srl.launch.modes.population`).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from srl.api.run_paths import RunPaths
from srl.api.settings import PopulationSettings
from srl.workers.base import Worker

log = logging.getLogger(__name__)

#: A command not done within this long is given up (the member is ranked again later).
COMMAND_TIMEOUT_S = 120.0


@dataclass
class Member:
    """What the rule needs to know of one member."""

    name: str
    #: Its recent mean return (None: too few episodes to rank it).
    score: float | None
    hyperparameters: dict[str, float]
    #: An interval has passed since its start or its last copy.
    ready: bool


@dataclass
class Copy:
    """`member` copies `source`, then trains with `hyperparameters` (the source's, explored)."""

    member: str
    source: str
    hyperparameters: dict[str, float]


class PBT:
    """Exploit and explore as a pure function of the members' scores (a seeded `rng`)."""

    def __init__(self, quantile: float, bounds: dict[str, tuple[float, float]],
                 factors: dict[str, list[float]], rng: random.Random, margin: float = 0.0) -> None:
        self.quantile = quantile
        self.margin = margin
        self.bounds = bounds
        self.factors = factors
        self.rng = rng

    def decide(self, members: list[Member]) -> list[Copy]:
        """The copies to make now: each ready member of the bottom quantile copies one of the
        top quantile that scores higher by more than `margin`. Members without a score take no part."""
        ranked = sorted((m for m in members if m.score is not None), key=lambda m: m.score)
        if len(ranked) < 2:
            return []
        n = max(1, int(len(ranked) * self.quantile))  # quantile <= 0.5: bottom and top never overlap
        top = ranked[-n:]
        copies = []
        for member in ranked[:n]:
            if not member.ready:
                continue
            source = self.rng.choice(top)
            if source.score > member.score + self.margin:  # type: ignore[operator]
                copies.append(Copy(member.name, source.name, self.explore(source.hyperparameters)))
        return copies

    def explore(self, values: dict[str, float]) -> dict[str, float]:
        """Each varied hyper-parameter times a random one of its factors, clipped to its bounds."""
        out = {}
        for name, (low, high) in self.bounds.items():
            value = values[name] * self.rng.choice(self.factors[name])
            out[name] = min(max(value, low), high)
        return out


class PopulationWorker(Worker):
    """The population manager: ranks the members now and then, and has the worse copy the better."""

    Config = PopulationSettings
    settings: PopulationSettings

    def setup(self) -> None:
        self.population, self.members = self.settings.population, self.settings.members
        hps = self.population.hyperparameters
        self.rule = PBT(self.population.quantile, {n: (hp.min, hp.max) for n, hp in hps.items()},
                        {n: list(hp.factors) for n, hp in hps.items()},
                        random.Random(f"{self.spec.seed}-{self.spec.generation}"), self.population.margin)
        self.started = time.monotonic()
        #: Per member: when it last started afresh (its start or copy) and its version then.
        self.since = {m: self.started for m in self.members}
        self.version_at: dict[str, int] = {}
        #: Copies under way, by member: {"copy": Copy, "stage": "save"|"load", "id": command id, ...}.
        self.pending: dict[str, dict[str, Any]] = {}
        #: Commands sent and not yet done (they go out with every heartbeat until they are).
        self.outbox: dict[str, dict[str, Any]] = {}
        self.sent = 0
        self.copies = 0
        self.failed = 0

    def poll(self) -> None:
        self.pause(0.1)
        view: dict[str, dict[str, Any]] = self.controller_info.get("members") or {}
        varied = set(self.population.hyperparameters)
        if not all(varied <= set((view.get(m) or {}).get("hyperparameters") or {}) for m in self.members):
            return  # not every member's trainer has reported its settings yet
        self._advance(view)
        now = time.monotonic()
        busy = {m for p in self.pending.values() for m in (p["copy"].member, p["copy"].source)}
        members = [Member(m, self._score(view[m]), self._values(view[m]), self._ready(m, view[m], now))
                   for m in self.members if m not in busy]
        for copy in self.rule.decide(members):
            self.pending[copy.member] = {"copy": copy, "stage": "save", "at": now,
                                         "id": self._send(copy.source, {"save_checkpoint": True}),
                                         "score": self._score(view[copy.member]),
                                         "source_score": self._score(view[copy.source])}

    def _advance(self, view: dict[str, dict[str, Any]]) -> None:
        """Move each copy under way on once its command is done."""
        for member, p in list(self.pending.items()):
            copy: Copy = p["copy"]
            target = copy.source if p["stage"] == "save" else member
            outcome = (view[target].get("commands_done") or {}).get(p["id"])
            if outcome is None and time.monotonic() - p["at"] > COMMAND_TIMEOUT_S:
                outcome = f"not done after {COMMAND_TIMEOUT_S:.0f} s"  # its trainer restarted meanwhile
            if outcome is None:
                continue
            self.outbox.pop(p["id"], None)
            if outcome != "ok":
                log.warning("%s copying %s failed at %s: %s", member, copy.source, p["stage"], outcome)
                self.failed += 1
                del self.pending[member]
                self.since[member] = time.monotonic()
                continue
            if p["stage"] == "save":
                checkpoints = RunPaths(self.spec.run_dir).member(copy.source).checkpoints()
                p["stage"], p["source_version"] = "load", view[copy.source].get("policy_version")
                p["at"] = time.monotonic()
                # `source` and `why` are for the lineage the controller writes; the trainer reads the rest.
                p["id"] = self._send(member, {"load_checkpoint": str(checkpoints), "source": copy.source,
                                              "hyperparameters": copy.hyperparameters,
                                              "why": {"return": p["score"], "source_return": p["source_score"],
                                                      "source_version": p["source_version"]}})
                continue
            del self.pending[member]
            self.copies += 1
            self.since[member] = time.monotonic()
            self.version_at[member] = int(view[member].get("policy_version") or 0)
            log.info("%s copied %s (return %.1f < %.1f); hyper-parameters now %s", member, copy.source,
                     p["score"], p["source_score"], copy.hyperparameters)

    def _send(self, member: str, command: dict[str, Any]) -> str:
        self.sent += 1
        command_id = f"{self.spec.generation}.{self.sent}"
        self.outbox[command_id] = {"id": command_id, "to": member, **command}
        return command_id

    def _score(self, member: dict[str, Any]) -> float | None:
        mean = member.get("episode_return_mean")
        return float(mean) if mean is not None and member.get("episodes", 0) >= self.population.min_episodes else None

    def _values(self, member: dict[str, Any]) -> dict[str, float]:
        return {name: float(member["hyperparameters"][name]) for name in self.population.hyperparameters}

    def _ready(self, member: str, view: dict[str, Any], now: float) -> bool:
        p = self.population
        version = int(view.get("policy_version") or 0)
        self.version_at.setdefault(member, version)
        return ((p.interval_s is not None and now - self.since[member] >= p.interval_s)
                or (p.interval_versions is not None and version - self.version_at[member] >= p.interval_versions))

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "outbox"):
            return {}
        return {"copies": self.copies, "copies_failed": self.failed, "copies_under_way": len(self.pending),
                "commands": list(self.outbox.values())}
