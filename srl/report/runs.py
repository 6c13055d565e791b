"""Run directories as a user sees them: where they are, what state they are in, their curves.

A run directory holds `config.yaml` and, once the controller has reported, `status.json`
(rewritten while the run goes) and at the end `summary.json` (see `srl.launch.run_dir`).
`metrics.jsonl` gains one line per report; a resumed run appends to it, its `time_s`
starting again from zero and its `env_steps` from the checkpoint it resumed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from srl.api.run_paths import RunPaths

#: What a curve can be drawn against.
X_AXES = ("env_steps", "time_s")
#: The metric `srl plot` draws and `srl runs` reports: the mean return of the last 100 episodes.
DEFAULT_METRIC = "episode_return_mean"
#: The bands `srl plot` can draw around a config's seeds (here so the CLI need not import numpy).
BANDS = ("minmax", "std")


def is_run_dir(path: Path) -> bool:
    return RunPaths(path).is_run()


def find_runs(path: str | Path) -> list[Path]:
    """`path` itself when it is a run directory, else every run directory below it (sorted)."""
    root = Path(path)
    if is_run_dir(root):
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and is_run_dir(here):
            found.append(here)
            dirnames.clear()  # a run's own folders hold no runs
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in RunPaths.OWN_DIRECTORIES and not d.startswith("."))
    return sorted(found)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_config(run: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(RunPaths(run).config.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """Every record of `metrics.jsonl`; a line being written (or otherwise unreadable) is skipped."""
    try:
        with open(RunPaths(run).metrics) as f:
            return json_rows(f)
    except OSError:
        return []


def json_rows(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """The lines that are JSON objects, parsed (others skipped)."""
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def lookup(record: dict[str, Any], metric: str) -> float | None:
    """A metric's finite number in one record (`train/value_loss` reads `record["train"]["value_loss"]`)."""
    if metric in record:
        value: Any = record[metric]
    else:
        value = record
        for part in metric.split("/"):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def metric_names(records: list[dict[str, Any]]) -> list[str]:
    """The numeric metrics the records hold, nested ones as `section/name`."""
    names: set[str] = set()

    def walk(record: dict[str, Any], prefix: str) -> None:
        for key, value in record.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}/")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                names.add(f"{prefix}{key}")

    for record in records:
        walk(record, "")
    return sorted(names - set(X_AXES))


def elapsed(records: list[dict[str, Any]]) -> list[float | None]:
    """Each record's wall time since the run first started: a resumed run's `time_s` restarts at
    zero, so each later part is shifted by where the one before it ended."""
    out: list[float | None] = []
    offset, last = 0.0, None
    for record in records:
        t = lookup(record, "time_s")
        if t is None:
            out.append(None)
            continue
        if last is not None and t < last:
            offset += last
        last = t
        out.append(offset + t)
    return out


def series(records: list[dict[str, Any]], metric: str, x: str = "env_steps") -> tuple[list[float], list[float]]:
    """(x, y) of one metric, nulls skipped, x increasing.

    Against `time_s` the wall time runs on across resumes. Against `env_steps` a resumed run
    starts again from its checkpoint, and the points logged after that checkpoint are dropped:
    the training that produced them was lost.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, not {x!r}")
    xs: list[float] = []
    ys: list[float] = []
    times = elapsed(records)
    for record, t in zip(records, times):
        xv = t if x == "time_s" else lookup(record, "env_steps")
        if xv is None:
            continue
        while xs and xs[-1] > xv:
            xs.pop()
            ys.pop()
        y = lookup(record, metric)
        if y is not None:
            xs.append(xv)
            ys.append(y)
    return xs, ys


def _pid_is_controller(pid: Any, status_file: Path) -> bool:
    """Whether the run's controller still lives: its pid exists and is no younger than the
    status file it last wrote (a process started after that is another that reused the pid)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    import psutil

    try:
        created = psutil.Process(pid).create_time()
        written = status_file.stat().st_mtime
    except (psutil.Error, OSError):
        return False
    return created <= written + 1.0


@dataclass
class RunInfo:
    """One row of `srl runs`."""

    path: str
    config: str
    seed: int | None
    state: str
    env_steps: int | None
    best_return: float | None
    last_return: float | None
    wall_time_s: float | None
    stop_reason: str | None
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_state(run: Path, status: dict[str, Any] | None, summary: dict[str, Any] | None) -> str:
    """running, stopped, failed, or died (the controller is gone and left no summary).

    A resumed run keeps the summary of the part before it until it writes its own, so a live
    controller in `status.json` wins over an older `summary.json`.
    """
    status_file, summary_file = RunPaths(run).status, RunPaths(run).summary
    live = status is not None and status.get("state") in ("running", "stopping")
    if live and _pid_is_controller(status.get("controller_pid"), status_file):
        return "running"
    if summary is not None and not (live and status_file.stat().st_mtime > summary_file.stat().st_mtime + 1.0):
        failed = summary.get("errors") or any(w.get("state") == "failed" for w in (status or {}).get("workers", []))
        return "failed" if failed else "stopped"
    if live:
        return "died"
    return "stopped" if status is not None else "unknown"


def run_info(run: Path) -> RunInfo:
    config = read_config(run)
    status = read_json(RunPaths(run).status)
    summary = read_json(RunPaths(run).summary)
    state = run_state(run, status, summary)
    records = read_metrics(run)
    returns = [r for r in (lookup(rec, DEFAULT_METRIC) for rec in records) if r is not None]
    finished = state in ("stopped", "failed") and summary is not None
    env_steps = None
    for source in ((summary, status) if finished else (status, summary)):
        if source is not None and isinstance(source.get("env_steps"), int):
            env_steps = source["env_steps"]
            break
    if env_steps is None and records:
        env_steps = max((int(v) for v in (lookup(r, "env_steps") for r in records) if v is not None), default=None)
    times = [t for t in elapsed(records) if t is not None]
    wall = times[-1] if times else None
    if finished and isinstance(summary.get("wall_time_s"), (int, float)):
        # The summary's wall time covers start-up and shutdown, but only the last part of a resumed run.
        last_part = records[-1].get("time_s") if records else None
        wall = summary["wall_time_s"] + (wall - last_part if wall is not None and isinstance(last_part, (int, float))
                                         else 0.0)
    errors = sorted((summary or {}).get("errors") or {})
    seed = config.get("seed")
    return RunInfo(path=str(run), config=str(config.get("name") or run.name),
                   seed=seed if isinstance(seed, int) else None, state=state, env_steps=env_steps,
                   best_return=max(returns) if returns else None, last_return=returns[-1] if returns else None,
                   wall_time_s=round(wall, 3) if wall is not None else None,
                   stop_reason=(summary or {}).get("stop_reason") if finished else None, errors=errors)
