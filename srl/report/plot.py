"""`srl plot`: learning curves of runs, one colour per config, seeds as a mean and a band.

Runs are grouped by their config: the same `name` and the same settings apart from the ones
that do not change what is learned (seed, stop rules, logging, checkpoints, supervision,
launcher; see `group_curves`). A group of several runs is drawn as its mean on a common x grid, with the band
between the seeds' minimum and maximum (or the mean ± one standard deviation) and each seed
faintly behind it; a group of one run is drawn as that run's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from srl.report.runs import BANDS, DEFAULT_METRIC, X_AXES, find_runs, metric_names, read_config, read_metrics, series

#: Config sections that do not change what a run learns: runs differing only in these are seeds of one config.
IGNORED_SECTIONS = ("seed", "stop", "log", "checkpoint", "supervision", "launcher", "ray")
#: Points of the common x grid a group's runs are interpolated onto.
GRID_POINTS = 200
_X_LABELS = {"env_steps": "env steps", "time_s": "wall time (s)"}


class PlotError(ValueError):
    """Nothing to draw: no run, or no run with the metric."""


@dataclass
class Curve:
    run: Path
    name: str
    seed: Any
    settings: dict[str, Any]  # the flattened config less IGNORED_SECTIONS
    x: np.ndarray
    y: np.ndarray


@dataclass
class Band:
    x: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass
class Group:
    label: str
    curves: list[Curve]


def smooth(y: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (the first points average what there is)."""
    y = np.asarray(y, dtype=float)
    if window <= 1 or y.size == 0:
        return y
    sums = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, y.size + 1)
    start = np.maximum(idx - window, 0)
    return (sums[idx] - sums[start]) / (idx - start)


def band(curves: Sequence[tuple[Sequence[float], Sequence[float]]], kind: str = "minmax",
         points: int = GRID_POINTS) -> Band:
    """The mean of several (x, y) curves on a common grid, with a band around it.

    The grid spans the x range every curve covers (from the latest first point to the earliest
    last point), so the mean is never over fewer runs than the group has; each curve is
    interpolated linearly onto it. `kind` is `minmax` (the band from the lowest to the highest
    curve) or `std` (mean ± the population standard deviation).
    """
    if kind not in BANDS:
        raise ValueError(f"band must be one of {', '.join(BANDS)}, not {kind!r}")
    if not curves:
        raise ValueError("band of no curves")
    arrays = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in curves]
    if any(x.size == 0 for x, _ in arrays):
        raise ValueError("band of an empty curve")
    lo = max(float(x[0]) for x, _ in arrays)
    hi = min(float(x[-1]) for x, _ in arrays)
    if hi < lo:
        raise ValueError("the curves share no x range")
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.stack([np.interp(grid, x, y) for x, y in arrays])
    mean = ys.mean(axis=0)
    if kind == "minmax":
        lower, upper = ys.min(axis=0), ys.max(axis=0)
    else:
        std = ys.std(axis=0)
        lower, upper = mean - std, mean + std
    return Band(grid, mean, lower, upper)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_curves(paths: Sequence[str | Path], metric: str = DEFAULT_METRIC, x: str = "env_steps",
                window: int = 1, warn=None) -> list[Curve]:
    """The curve of every run in `paths` (run directories, or directories holding them) that has the metric."""
    runs: list[Path] = []
    for path in paths:
        if not Path(path).exists():
            raise PlotError(f"{path} does not exist")
        found = find_runs(path)
        if not found:
            raise PlotError(f"{path} is not a run directory and holds none (no config.yaml with status.json "
                            "or summary.json)")
        runs += [run for run in found if run not in runs]
    curves, seen_metrics = [], set()
    for run in runs:
        records = read_metrics(run)
        xs, ys = series(records, metric, x)
        if not xs:
            seen_metrics.update(metric_names(records))
            if warn:
                warn(f"{run}: no {metric} in metrics.jsonl; skipped")
            continue
        config = read_config(run)
        settings = _flatten({k: v for k, v in config.items() if k not in IGNORED_SECTIONS})
        curves.append(Curve(run, str(config.get("name") or run.name), config.get("seed"), settings,
                            np.asarray(xs), smooth(ys, window)))
    if not curves:
        known = f"; metrics found: {', '.join(sorted(seen_metrics))}" if seen_metrics else ""
        raise PlotError(f"no run has {metric!r}{known}")
    return curves


def group_curves(curves: Sequence[Curve]) -> list[Group]:
    """Curves of one config together, in the order they first appear, each group labelled.

    Runs of one name split into groups only on settings that every one of them records with
    different values: a setting that some config.yaml lacks (written by an older srl, before
    the setting existed) splits nothing. The label is the config's name, with "(N seeds)" for
    a group of several runs; groups of one name also show the settings that set them apart.
    """
    by_name: dict[str, list[Curve]] = {}
    for curve in curves:
        by_name.setdefault(curve.name, []).append(curve)
    out = []
    for name, members in by_name.items():
        common = set.intersection(*(set(c.settings) for c in members))
        differing = sorted(k for k in common if len({repr(c.settings[k]) for c in members}) > 1)
        groups: dict[tuple[str, ...], list[Curve]] = {}
        for curve in members:
            groups.setdefault(tuple(repr(curve.settings[k]) for k in differing), []).append(curve)
        for group in groups.values():
            label = name
            if len(groups) > 1:
                shown = [f"{k}={group[0].settings[k]}" for k in differing[:3]] + (["…"] if len(differing) > 3 else [])
                label = f"{name} [{', '.join(shown)}]"
            if len(group) > 1:
                seeds = {repr(c.seed) for c in group}
                label += f" ({len(group)} seeds)" if len(seeds) == len(group) else f" ({len(group)} runs)"
            out.append(Group(label, group))
    return out


def make_figure(paths: Sequence[str | Path], metric: str = DEFAULT_METRIC, x: str = "env_steps",
                window: int = 1, band_kind: str = "minmax", title: str | None = None, warn=None):
    """The plot as a matplotlib Figure (not saved): one line and legend entry per group, a
    filled band (a PolyCollection) for each group of several runs."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    if x not in X_AXES:
        raise PlotError(f"--x must be one of {', '.join(X_AXES)}, not {x!r}")
    if band_kind not in BANDS:
        raise PlotError(f"--band must be one of {', '.join(BANDS)}, not {band_kind!r}")
    groups = group_curves(load_curves(paths, metric, x, window, warn))
    fig = Figure(figsize=(9, 5.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colours = list(colormaps["tab10"].colors)
    for i, group in enumerate(groups):
        colour = colours[i % len(colours)]
        if len(group.curves) == 1:
            curve = group.curves[0]
            ax.plot(curve.x, curve.y, color=colour, linewidth=1.8, label=group.label)
            continue
        for curve in group.curves:  # every seed, faintly: the band covers only the range all of them reach
            ax.plot(curve.x, curve.y, color=colour, linewidth=0.8, alpha=0.3)
        try:
            b = band([(c.x, c.y) for c in group.curves], band_kind)
        except ValueError as exc:
            if warn:
                warn(f"{group.label}: no band ({exc})")
            ax.plot([], [], color=colour, linewidth=1.8, label=group.label)
            continue
        shortest = min(group.curves, key=lambda c: c.x[-1])
        longest = max(c.x[-1] for c in group.curves)
        if warn and b.x[-1] < 0.5 * longest:
            warn(f"{group.label}: the mean stops at {x} {b.x[-1]:,.6g}, where {shortest.run} ends (the longest run "
                 f"goes to {longest:,.6g}); leave that run out for a longer mean")
        ax.fill_between(b.x, b.lower, b.upper, color=colour, alpha=0.2, linewidth=0)
        ax.plot(b.x, b.mean, color=colour, linewidth=1.8, label=group.label)
    ax.set_xlabel(_X_LABELS[x])
    ax.set_ylabel(metric)
    if x == "env_steps":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(True, alpha=0.3)
    notes = [f"moving average of {window} reports"] if window > 1 else []
    if any(len(g.curves) > 1 for g in groups):
        notes.append(f"seeds: mean and {'min–max' if band_kind == 'minmax' else '±1 std'} band")
    ax.set_title(title or (f"{metric} ({'; '.join(notes)})" if notes else metric))
    ax.legend(loc="best", fontsize="small")
    return fig


def save_figure(fig, output: str | Path) -> Path:
    """Write the figure with the Agg backend (no display needed); the format follows the suffix."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(output)
    return output


def plot(paths: Sequence[str | Path], output: str | Path, metric: str = DEFAULT_METRIC, x: str = "env_steps",
         window: int = 1, band_kind: str = "minmax", title: str | None = None, warn=None) -> Path:
    return save_figure(make_figure(paths, metric, x, window, band_kind, title, warn), output)
