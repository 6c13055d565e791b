"""One pipeline from what a user gives to a run ready to launch: `prepare`.

    run = prepare("cartpole-ppo", ["actors.count=4"])      # or a YAML path, a dict, an ExperimentConfig
    run = prepare(resume="runs/mine", overrides=["stop.env_steps=2e6"])
    run.config, run.graph, run.layout                       # validated config, resolved graph, `auto`'s record

It reads the config (a bundled name, a file, a mapping, or a resumed run's `config.yaml`),
applies the overrides, validates the experiment and then its components, chooses the `auto`
layout fields from measurements (`srl.layout`), and builds and checks the worker graph: the
algorithm's graph (`srl.graphs`), what the run modes add (`srl.launch.modes`), the config's `workers:`.
`srl train`, `srl bench`, `srl evaluate`, `srl export` and the Python API all start here; the
controller takes the prepared graph and resolves nothing itself. Raises `ConfigError` (and
`MeasurementError` when `auto`'s measurements fail).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from srl.api.agents import route
from srl.api.config import (ConfigError, ExperimentConfig, check_devices, fits_this_machine, take_auto,
                            validate_components, validate_structure)
from srl.api.config_files import apply_overrides, read_config_file
from srl.api.graph import Graph, GraphError, ResolvedGraph
from srl.api.graph import apply_overrides as apply_group_overrides
from srl.api.graph import resolve
from srl.api.registry import WORKERS, RegistryError
from srl.api.run_paths import RunPaths
from srl.graphs import algorithm_graph
from srl.launch.modes import active_modes


@dataclass
class Prepared:
    """A run ready to launch."""

    config: ExperimentConfig
    graph: ResolvedGraph
    #: What `auto` chose and why (written as `layout.json`); None without `auto` fields.
    layout: dict[str, Any] | None = None
    #: A resumed run: its directory, and its config as it was before this command's overrides.
    resume: Path | None = None
    previous: ExperimentConfig | None = None


def prepare(source: str | Path | dict[str, Any] | ExperimentConfig | None = None, overrides: Sequence[str] = (),
            resume: str | Path | None = None, *, say: Callable[[str], None] | None = None,
            before_components: Callable[[ExperimentConfig], None] | None = None) -> Prepared:
    """The run of `source` (or of the run directory `resume`) with `overrides` (`key.sub=value`).

    `say` gets the layout's lines when `auto` fields are measured (default: stderr);
    `before_components(config)` runs once the experiment's own schema is valid, before its
    components are imported (the CLI starts its worker fork server there)."""
    previous = None
    if resume is not None:
        resume = Path(resume)
        data = read_config_file(str(RunPaths(resume).config))
        previous = validate_components(validate_structure(json.loads(json.dumps(data))))
    elif isinstance(source, ExperimentConfig):
        data = source.model_dump(mode="json")
    elif isinstance(source, dict):
        data = json.loads(json.dumps(source))
    elif source is not None:
        data = read_config_file(str(source))
    else:
        raise ConfigError("give a CONFIG (bundled name or YAML path) or a run directory to resume")
    data, auto = take_auto(apply_overrides(data, list(overrides)))
    config = validate_structure(data)
    if before_components is not None:
        before_components(config)
    config = validate_components(config)
    fits_this_machine(config)
    check_devices(config)
    from srl.launch.tracking import check_wandb

    check_wandb(config.log.wandb)
    layout = None
    if auto:
        from srl.layout import describe
        from srl.layout import resolve as choose_layout

        say = say or (lambda line: print(f"srl: {line}", file=sys.stderr))
        config, layout = choose_layout(config, auto, say=say)
        say(describe(layout))
    return Prepared(config, resolve_graph(config), layout, resume, previous)


def experiment_graph(config: ExperimentConfig) -> Graph:
    """One experiment's graph: the algorithm's (or several policies'), what the run modes of the
    `experiment` stage add (evaluation, self-play), then the config's `workers:`."""
    if config.policies:
        from srl.graphs.policies import several_policies_graph

        graph = several_policies_graph(config, route(config))
    else:
        graph = algorithm_graph(config)
    try:
        for mode in active_modes(config):
            if mode.stage == "experiment":
                graph = mode.graph(graph, config, experiment_graph)
        return with_run_sections(apply_group_overrides(graph, config.workers), config)
    except (GraphError, pydantic.ValidationError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


def with_run_sections(graph: Graph, config: ExperimentConfig) -> Graph:
    """A kind's `Config` field named after a section of the experiment (`env`, `policy`, `seed`,
    `algorithm`, `policies`, ...) that its group's settings leave out takes the run's section (a
    population member's own). A user's worker kind asks for the run's env or policy by declaring
    the field, and it travels with the worker's settings to whichever host runs it."""
    groups = dict(graph.groups)
    for name, group in graph.groups.items():
        if isinstance(group.settings, pydantic.BaseModel):  # a graph builder's, complete
            continue
        try:
            model = getattr(WORKERS.resolve(group.kind), "Config", None)
        except RegistryError:
            continue  # `resolve` says what is wrong with the kind
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            continue
        taken = {field: getattr(config, field) for field in model.model_fields
                 if field in ExperimentConfig.model_fields and field not in group.settings}
        if taken:
            groups[name] = group.model_copy(update={"settings": {**group.settings, **taken}})
    return Graph(groups=groups)


def run_graph(config: ExperimentConfig) -> Graph:
    """The run's graph: the experiment's, or what the `run` stage's modes make of experiments (a
    population: one per member)."""
    graph = experiment_graph(config)
    for mode in active_modes(config):
        if mode.stage == "run":
            graph = mode.graph(graph, config, experiment_graph)
    return graph


def resolve_graph(config: ExperimentConfig) -> ResolvedGraph:
    """The run's graph, checked (kinds, settings, streams) against the config."""
    graph = run_graph(config)
    total = sum(group.count for group in graph.groups.values())
    if total > config.limits.workers:
        largest = sorted(graph.groups.items(), key=lambda item: -item[1].count)[:3]
        raise ConfigError(f"limits.workers: the graph has {total} worker processes ("
                          + ", ".join(f"{name} {group.count}" for name, group in largest)
                          + f", ...), over {config.limits.workers}; raise limits.workers on purpose for a cluster "
                          "that large")
    for name in config.supervision.progress_timeout_by_group:
        if name not in graph.groups:
            raise ConfigError(f"supervision.progress_timeout_by_group: no group {name!r} in the graph "
                              f"(its groups: {', '.join(graph.groups)})")
    return resolve(graph)
