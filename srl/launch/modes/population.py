"""Population-based training as a run mode: `size` members of the experiment train side by side,
and a population manager (`srl.workers.population`) has the worse copy the better.

The graph: the experiment's graph once per member, groups and streams named `<member>.<name>`,
each member's workers at home in `members/<member>/` (their checkpoints, logs and metrics), and
the manager beside them. The controller's side: each member's numbers, its stop rule, the
commands workers address to members, and what status and the summary show of the members. A
member's metrics go to `members/<member>/metrics.jsonl`, counted from its own workers alone; a
member that copies another starts a new return window (its weights are another's now), and the
copy is a line of `lineage.jsonl`. A worker outside every member (the manager) gets every
member's view with each heartbeat answer, and may send commands addressed to a member in its
stats (`commands`: dicts with an `id` and `to`); each is handed once to every worker of that
member whose kind `takes_commands`, with that worker's next heartbeat answer.
"""

from __future__ import annotations

import collections
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import pydantic
from pydantic import BaseModel

from srl.api.config import ConfigError, ExperimentConfig, dump
from srl.api.graph import Graph, Group, ResolvedGraph
from srl.api.registry import ALGORITHMS
from srl.api.run_paths import RunPaths
from srl.api.settings import PopulationSettings
from srl.launch.metrics import RunMetrics, StopRules, policy_version
from srl.launch.run_dir import RunDir
from srl.launch.supervision import WorkerState
from srl.launch.modes.base import RunMode
from srl.learn import checkpoint

#: The group of the population manager, beside the members' groups.
POPULATION_GROUP = "population"


def member_name(index: int) -> str:
    """Member `index` of a population: its groups, streams and directory carry this name."""
    return f"m{index}"


def member_config(config: ExperimentConfig, index: int) -> ExperimentConfig:
    """The experiment as member `index` of its population runs it: its own starting values of
    the varied hyper-parameters (validated as the algorithm's `args`), no population."""
    assert config.population is not None
    values = {name: hp.values[index] for name, hp in config.population.hyperparameters.items()
              if hp.values is not None}
    args = {**config.algorithm.args, **values}
    model = getattr(ALGORITHMS.resolve(config.algorithm.type), "Config", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        try:
            args = model.model_validate(args).model_dump()
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "?"
            raise ConfigError(f"population.hyperparameters.{name}.values: member {index}: {first['msg']}") from None
    return config.model_copy(update={"algorithm": config.algorithm.model_copy(update={"args": args}),
                                     "population": None})


class Population(RunMode):
    stage = "run"

    @staticmethod
    def active(config: ExperimentConfig) -> bool:
        return config.population is not None

    @classmethod
    def graph(cls, graph: Graph, config: ExperimentConfig, build: Callable[[ExperimentConfig], Graph]) -> Graph:
        """The experiment's graph once per member, and, when members exploit, the population manager."""
        population = config.population
        assert population is not None
        groups: dict[str, Group] = {}
        for index in range(population.size):
            member = member_name(index)
            home = str(RunPaths("").member(member).root)
            for name, group in build(member_config(config, index)).groups.items():
                renamed = {port: f"{member}.{stream}" for port, stream in group.streams.items()}
                groups[f"{member}.{name}"] = group.model_copy(update={"streams": renamed, "home": home})
        if population.exploit:
            groups[POPULATION_GROUP] = Group(
                kind="population", placement=population.placement,
                settings=PopulationSettings(population=population,
                                            members=[member_name(i) for i in range(population.size)]))
        return Graph(groups=groups)

    def __init__(self, config: ExperimentConfig, graph: ResolvedGraph, paths: RunPaths, resume: bool) -> None:
        super().__init__(config, graph, paths, resume)
        assert config.population is not None
        self.names = [member_name(i) for i in range(config.population.size)]
        #: Each member group's member.
        self.group_member = {group: group.split(".", 1)[0] for group in graph.graph.groups
                             if group.split(".", 1)[0] in self.names}
        self.varied = list(config.population.hyperparameters)
        self.metrics = {m: RunMetrics() for m in self.names}
        self.stop_rules = StopRules(config.stop)
        self.dirs = {m: RunDir(paths.member(m).root, config.log.tensorboard) for m in self.names}
        for index, m in enumerate(self.names):  # `srl evaluate <run>/members/<m>` plays a member's policy
            self.dirs[m].write_config(dump(member_config(config, index)))
            if resume and (path := checkpoint.latest(paths.member(m).checkpoints())) is not None:
                self.metrics[m].env_steps_at_start = int(checkpoint.info(path).get("env_steps", 0))
        self.takes_commands = {kind for kind, cls in graph.kinds.items() if getattr(cls, "takes_commands", False)}
        #: Why each member stopped ("": it has not): the run stops once every member has.
        self.stopped = {m: "" for m in self.names}
        self._relayed: set[str] = set()
        #: Commands relayed that load another member's weights, not yet done, by id.
        self._loads: dict[str, dict[str, Any]] = {}
        #: Lines for lineage.jsonl not yet written (`report` and `close` write them).
        self._lineage: list[dict[str, Any]] = []
        self.lineage_path = paths.lineage
        if not resume:
            for index, m in enumerate(self.names):
                values = member_config(config, index).algorithm.args
                self._note({"event": "start", "member": m, "hyperparameters": {k: values[k] for k in self.varied}})
        #: Each member's copies so far, and the member it copied last.
        self.copies: collections.Counter[str] = collections.Counter()
        self.copied_from: dict[str, str] = {}
        self._queued: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        self._last: dict[str, tuple[float, int]] = {m: (time.monotonic(), 0) for m in self.names}

    def member(self, worker: WorkerState) -> str | None:
        return self.group_member.get(worker.spec.group)

    def _workers(self, member: str, workers: list[WorkerState]) -> list[WorkerState]:
        return [w for w in workers if self.member(w) == member]

    # ---------------------------------------------------------------- heartbeats
    def take(self, worker: WorkerState, stats: dict[str, Any], workers: list[WorkerState]) -> None:
        """A worker's stats, before the run's own metrics take them: its member's metrics count
        them, and the commands it sends are queued for the workers they address."""
        for command in stats.pop("commands", None) or []:
            if not isinstance(command, dict) or str(command.get("id")) in self._relayed:
                continue
            self._relayed.add(str(command.get("id")))
            if command.get("load_checkpoint"):
                self._loads[str(command.get("id"))] = command
            for w in workers:
                if self.member(w) == command.get("to") and w.spec.kind in self.takes_commands:
                    self._queued[w.spec.name].append(command)
        if (member := self.member(worker)) is not None:
            for command_id, outcome in (stats.get("commands_done") or {}).items():
                if command_id in self._loads and self._loads[command_id].get("to") == member:
                    self._copied(member, self._loads.pop(command_id), outcome, stats, workers)
            self.metrics[member].take(worker, dict(stats))

    def _copied(self, member: str, command: dict[str, Any], outcome: str, stats: dict[str, Any],
                workers: list[WorkerState]) -> None:
        """A member's trainer has carried out a copy (`outcome` "ok") or failed to."""
        source = str(command.get("source", ""))
        if outcome != "ok":
            self._note({"event": "copy_failed", "member": member, "copied": source, "error": outcome})
            return
        self.copies[member] += 1
        self.copied_from[member] = source
        why = command.get("why") if isinstance(command.get("why"), dict) else {}
        self._note({"event": "copy", "member": member, "copied": source,
                    "env_steps": self.metrics[member].total("env_steps", self._workers(member, workers)),
                    **why, "checkpoint": stats.get("loaded"), "version": stats.get("policy_version"),
                    "hyperparameters": command.get("hyperparameters") or {}})
        if not self.metrics[member].frozen:
            # Its weights are now another member's: their return is what counts from here.
            self.metrics[member].returns.clear()

    def _note(self, record: dict[str, Any]) -> None:
        self._lineage.append({"time": round(time.time(), 3), **record})

    def _write_lineage(self) -> None:
        if self._lineage:
            with open(self.lineage_path, "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in self._lineage))
            self._lineage = []

    def answer(self, worker: WorkerState, workers: list[WorkerState]) -> dict[str, Any]:
        """What goes into this worker's heartbeat answer beyond (or instead of) the run's own info."""
        extra: dict[str, Any] = {}
        if commands := self._queued.pop(worker.spec.name, None):
            extra["commands"] = commands
        if (member := self.member(worker)) is None:
            extra["members"] = self.view(workers)
        else:  # its member's env steps, not the population's (its checkpoints record them)
            extra["env_steps"] = self.metrics[member].total("env_steps", self._workers(member, workers))
        return extra

    def retire(self, worker: WorkerState) -> None:
        if (member := self.member(worker)) is not None:
            self.metrics[member].retire(worker)

    def view(self, workers: list[WorkerState]) -> dict[str, dict[str, Any]]:
        """Each member as the population manager sees it."""
        out = {}
        for m in self.names:
            mine = self._workers(m, workers)
            commanded = [w for w in mine if w.spec.kind in self.takes_commands]
            # A command is done when every worker it went to has done it (the first error wins).
            done: dict[str, str] = {}
            if commanded:
                results = [w.stats.get("commands_done") or {} for w in commanded]
                for command_id in set(results[0]).intersection(*results[1:]):
                    errors = [r[command_id] for r in results if r[command_id] != "ok"]
                    done[command_id] = errors[0] if errors else "ok"
            hps = next((w.stats["hyperparameters"] for w in commanded if w.stats.get("hyperparameters")), {})
            out[m] = {"episode_return_mean": self.metrics[m].return_mean, "episodes": len(self.metrics[m].returns),
                      "env_steps": self.metrics[m].total("env_steps", mine), "policy_version": policy_version(mine),
                      "hyperparameters": {k: hps[k] for k in self.varied if k in hps}, "commands_done": done,
                      "loaded": next((w.stats["loaded"] for w in commanded if w.stats.get("loaded")), None)}
        return out

    # ---------------------------------------------------------------- reports
    def report(self, workers: list[WorkerState], elapsed: float) -> None:
        """One metrics line per member, in its own directory, and the lineage's new lines (raises
        OSError as the run's metrics do)."""
        self._write_lineage()
        now, view = time.monotonic(), self.view(workers)
        for m in self.names:
            mine = self._workers(m, workers)
            steps = self.metrics[m].total("env_steps", mine)
            then, before = self._last[m]
            self._last[m] = (now, steps)
            record = self.metrics[m].record(mine, elapsed, (steps - before) / max(now - then, 1e-9))
            record["hyperparameters"] = view[m]["hyperparameters"]
            self.dirs[m].log_metrics(record)

    def stop_reason(self, reason: str | None, workers: list[WorkerState], elapsed: float) -> str | None:
        """The population stops once every member has met the config's `stop:` (counted on its
        own workers; the run's totals do not count), or at `stop.time_s`. A member that met it keeps training meanwhile (it
        may still be copied), but its reported return stays the one that met it."""
        for m in self.names:
            if self.stopped[m]:
                continue
            mine = self._workers(m, workers)
            reason = self.stop_rules.reason(self.metrics[m], self.metrics[m].total("env_steps", mine), elapsed)
            if reason:
                self.stopped[m] = reason
                self.metrics[m].freeze()
        if all(self.stopped.values()):
            return "every member: " + "; ".join(f"{m} {why}" for m, why in self.stopped.items())
        return None

    def freeze(self) -> None:
        for metrics in self.metrics.values():
            metrics.freeze()

    def status(self, workers: list[WorkerState]) -> dict[str, Any]:
        return {"population": self.rows(workers)}

    def summary(self, workers: list[WorkerState]) -> dict[str, Any]:
        return {"members": self.rows(workers)}

    def rows(self, workers: list[WorkerState]) -> list[dict[str, Any]]:
        """The members as status.json and the summary list them."""
        view = self.view(workers)
        return [{"member": m, "episode_return_mean": view[m]["episode_return_mean"], "episodes": view[m]["episodes"],
                 "env_steps": view[m]["env_steps"], "policy_version": view[m]["policy_version"],
                 "hyperparameters": view[m]["hyperparameters"], "copies": self.copies[m],
                 "copied_from": self.copied_from.get(m), "stopped": self.stopped[m]} for m in self.names]

    def close(self, summary: dict[str, Any]) -> None:
        """Write the lineage's last lines and each member's `summary.json` (one of `rows`), so
        that a member's directory reads as a run (`srl plot <run>/members/m0`)."""
        with contextlib.suppress(OSError):  # the run's summary says why, if the disk is full
            self._write_lineage()
            for row in summary["members"]:
                self.dirs[row["member"]].write_summary(row)
        for run_dir in self.dirs.values():
            run_dir.close()
