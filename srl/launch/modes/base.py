"""The run-mode interface: one way of running an experiment, plugged into the graph and the controller.

A mode is active when its config section asks for it. It adds to the graph (`graph`): at the
`experiment` stage it extends one experiment's graph before the config's `workers:` changes
apply (an evaluation worker, self-play's league); at the `run` stage it builds the run's
graph from experiments' graphs (a population: one per member). The controller makes one
instance of each active mode per run and calls its hooks as the run goes: the worker stats
it takes, what it adds to heartbeat answers (commands to workers), its stop rule, its metrics
lines and status rows, its part of the summary. Every hook has a default that does nothing,
so a mode implements only what it needs; the controller names no mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from srl.api.config import ExperimentConfig
from srl.api.graph import Graph, ResolvedGraph
from srl.api.run_paths import RunPaths


class RunMode:
    #: When its `graph` runs: on each experiment's graph, or once on the run's.
    stage: ClassVar[Literal["experiment", "run"]] = "experiment"

    @staticmethod
    def active(config: ExperimentConfig) -> bool:
        """Whether the config asks for this mode."""
        raise NotImplementedError

    @classmethod
    def graph(cls, graph: Graph, config: ExperimentConfig, build: Callable[[ExperimentConfig], Graph]) -> Graph:
        """The graph with what this mode adds. `build(config)` gives one experiment's whole graph
        (its modes of the `experiment` stage and its `workers:` included), for `run` modes. Raises
        `ConfigError`."""
        return graph

    # ------------------------------------------------------------ the controller's side
    def __init__(self, config: ExperimentConfig, graph: ResolvedGraph, paths: RunPaths, resume: bool) -> None:
        self.config, self.resolved, self.paths, self.resume = config, graph, paths, resume

    def take(self, worker: Any, stats: dict[str, Any], workers: list[Any]) -> None:
        """A worker's newest stats (a `WorkerState`), before the run's metrics take them."""

    def answer(self, worker: Any, workers: list[Any]) -> dict[str, Any]:
        """What this mode adds to the worker's heartbeat answer (its `controller_info`)."""
        return {}

    def retire(self, worker: Any) -> None:
        """A worker is about to be replaced (its totals must not be lost)."""

    def stop_reason(self, reason: str | None, workers: list[Any], elapsed: float) -> str | None:
        """The run's stop reason, given the config's own rule's verdict `reason` (None: go on)."""
        return reason

    def freeze(self) -> None:
        """The run stops: the numbers reported from now on are final."""

    def report(self, workers: list[Any], elapsed: float) -> None:
        """At each metrics line: write what this mode reports (raises OSError as the run's writes do)."""

    def status(self, workers: list[Any]) -> dict[str, Any]:
        """Entries of status.json (what `srl status` shows)."""
        return {}

    def summary(self, workers: list[Any]) -> dict[str, Any]:
        """Entries of summary.json."""
        return {}

    def close(self, summary: dict[str, Any]) -> None:
        """The run is over; `summary` is what summary.json will hold."""
