"""Hyper-parameter sweeps on Optuna: `srl sweep CONFIG --space SPACE.yaml --trials N --parallel K`.

The space names config fields (as overrides do) with a distribution each:

    algorithm.args.lr: {log_uniform: [1.0e-5, 1.0e-2]}
    algorithm.args.entropy_coef: {uniform: [0.0, 0.05]}
    actors.envs_per_slot: {categorical: [32, 64, 128]}
    trainers.batch_steps: {int: [1024, 8192]}

Each trial is a real run, `srl train` in a process of its own, in `trial-<number>/` under the
sweep's directory (so `srl runs DIR` and `srl plot DIR` read a sweep as they read any runs).
The objective is read from the run's `summary.json`:

- `env_steps` (the default when the config stops at a return, `stop.episode_return`): the env
  steps the run took to reach it, minimised; a run that never reached it scores twice the env
  steps it ran, worse than any that did;
- any other number of the summary (`eval_return_mean`, `episode_return_mean`), maximised.

Pruning reads each run's metrics rows as they are written: every `--report-every` env steps a
trial reports its mean return, and Optuna's median pruner stops (as Ctrl-C does: cleanly, no
process left) one whose return is below the median of the trials before it at that point.
The study lives in `sweep.db` (SQLite) in the sweep's directory, or in any Optuna storage URL
(`--storage postgresql://...`: several machines then share one sweep); `sweep.yaml` records
the sweep's settings, so `srl sweep --resume DIR` continues it: finished and pruned trials are
kept, a trial cut off mid-run is run again with its parameters. At the end: a table of the
trials, the best overrides, and `sweep.png` (the objective per trial).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from srl.api.config import ConfigError, validate_components, validate_structure
from srl.api.config_files import apply_overrides, read_config_file
from srl.api.run_paths import RunPaths
from srl.report import runs as run_files

#: The distributions a space may use, and the Optuna call each is.
DISTRIBUTIONS = ("uniform", "log_uniform", "int", "log_int", "categorical")
#: The objective that counts env steps to the config's stop return.
ENV_STEPS = "env_steps"
STUDY = "sweep"
SETTINGS = "sweep.yaml"
#: Seconds between two looks at a running trial's metrics.
LOOK_EVERY_S = 0.25
#: The environment variable that tells a trial's `srl` which process to die with.
PARENT_PID = "SRL_PARENT_PID"


@dataclass
class SweepSettings:
    """What `sweep.yaml` records: enough to continue the sweep with `--resume`."""

    config: str
    space: dict[str, dict[str, Any]]
    trials: int
    parallel: int = 1
    objective: str = ENV_STEPS
    overrides: list[str] = field(default_factory=list)
    storage: str | None = None
    #: Env steps between two pruning reports (each trial's mean return at that point); None: a
    #: hundredth of the config's `stop.env_steps` (10,000 without one).
    report_every: int | None = None
    seed: int = 0

    @property
    def maximize(self) -> bool:
        return self.objective != ENV_STEPS


def read_space(path: str | Path) -> dict[str, dict[str, Any]]:
    """A space file, checked: each field names one distribution with valid bounds."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"sweep space {path}: cannot read it ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"sweep space {path}: expected a mapping of config fields to distributions")
    for name, spec in data.items():
        check_distribution(str(name), spec)
    return {str(k): v for k, v in data.items()}


def check_distribution(name: str, spec: Any) -> None:
    where = f"sweep space: {name}"
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: expected one of {{{', '.join(f'{d}: ...' for d in DISTRIBUTIONS)}}}, got {spec!r}")
    (kind, args), = spec.items()
    if kind == "categorical":
        if not isinstance(args, list) or not args:
            raise ConfigError(f"{where}: categorical takes a non-empty list of choices, got {args!r}")
        return
    if isinstance(args, list):  # YAML reads 1e-5 (no dot) as a string: take it as the number it is
        args = spec[kind] = [_number(v) for v in args]
    if (not isinstance(args, list) or len(args) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args)):
        raise ConfigError(f"{where}: {kind} takes [low, high], got {args!r}")
    low, high = args
    if not low < high:
        raise ConfigError(f"{where}: {kind} needs low < high, got [{low}, {high}]")
    if kind.startswith("log") and low <= 0:
        raise ConfigError(f"{where}: {kind} needs low > 0, got {low}")
    if kind.endswith("int") and not all(float(v).is_integer() for v in args):
        raise ConfigError(f"{where}: {kind} takes integer bounds, got [{low}, {high}]")


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One value per field, drawn by Optuna's sampler."""
    values = {}
    for name, spec in space.items():
        (kind, args), = spec.items()
        if kind == "categorical":
            values[name] = trial.suggest_categorical(name, args)
        elif kind.endswith("int"):
            values[name] = trial.suggest_int(name, int(args[0]), int(args[1]), log=kind == "log_int")
        else:
            values[name] = trial.suggest_float(name, float(args[0]), float(args[1]), log=kind == "log_uniform")
    return values


def as_overrides(values: dict[str, Any]) -> list[str]:
    return [f"{name}={json.dumps(value) if not isinstance(value, str) else value}" for name, value in values.items()]


def check_settings(settings: SweepSettings) -> None:
    """The config with the space's extremes applied validates, and the objective can be read:
    a typo in a field name fails here, in one line, not in eight trials."""
    base = apply_overrides(read_config_file(settings.config), list(settings.overrides))
    for pick in (0, -1):
        values = {name: (spec[next(iter(spec))][pick]) for name, spec in settings.space.items()}
        validate_components(validate_structure(apply_overrides(base, as_overrides(values))))
    stop = validate_structure(base).stop
    if settings.report_every is None:
        settings.report_every = max(1000, int(stop.env_steps) // 100) if stop.env_steps else 10_000
    if settings.objective == ENV_STEPS and stop.episode_return is None:
        raise ConfigError("sweep: the objective env_steps counts env steps to stop.episode_return, which the "
                          "config leaves unset; set it, or choose another objective (--objective eval_return_mean)")


def trial_value(summary: dict[str, Any] | None, settings: SweepSettings) -> float | None:
    """The objective of a finished run (None: it has no such number)."""
    if not summary:
        return None
    if settings.objective == ENV_STEPS:
        steps = float(summary.get("env_steps") or 0)
        reached = str(summary.get("stop_reason", "")).startswith("episode_return_mean")
        return steps if reached else 2.0 * max(steps, 1.0)
    value = summary.get(settings.objective)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


class Sweep:
    def __init__(self, directory: Path, settings: SweepSettings) -> None:
        self.dir = directory
        self.settings = settings
        self.stopping = threading.Event()
        # Re-entrant: `stop` runs from a signal handler, maybe while this very thread holds it.
        self.lock = threading.RLock()
        self.children: dict[int, subprocess.Popen] = {}

    @property
    def storage(self) -> str:
        return self.settings.storage or f"sqlite:///{(self.dir / 'sweep.db').resolve()}"

    def study(self) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.create_study(
            study_name=STUDY, storage=self.storage, load_if_exists=True,
            direction="maximize" if self.settings.maximize else "minimize",
            # Two finished trials before any is pruned; none before its fourth report.
            pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=3))

    def run(self) -> Any:
        import optuna
        from optuna.trial import TrialState

        study = self.study()
        trials = study.get_trials(deepcopy=False)
        # A resumed sweep's sampler starts where no earlier process did: reseeded by the trials
        # so far, it does not draw the first trials' values again.
        study.sampler = optuna.samplers.TPESampler(seed=self.settings.seed + len(trials))
        requeued = {t.user_attrs.get("rerun_of") for t in trials}
        for cut_off in trials:
            # Left running by a sweep that was killed, or stopped by Ctrl-C: run it again, once.
            if cut_off.state == TrialState.RUNNING:
                study.tell(cut_off.number, state=TrialState.FAIL)
            elif not (cut_off.state == TrialState.FAIL and cut_off.user_attrs.get("interrupted")):
                continue
            if cut_off.number not in requeued:
                study.enqueue_trial(cut_off.params, user_attrs={"rerun_of": cut_off.number})
        done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
        self.remaining = max(0, self.settings.trials - done)
        # Our own ask-run-tell loop on `parallel` threads, not `study.optimize(n_jobs=...)`: its
        # threads can both take one enqueued trial (a rerun) and run it twice.
        threads = [threading.Thread(target=self._trials, args=(study,), name=f"sweep {i}", daemon=True)
                   for i in range(self.settings.parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)  # (the main thread stays free for Ctrl-C's handler)
        return study

    def _trials(self, study: Any) -> None:
        import optuna
        from optuna.trial import TrialState

        while not self.stopping.is_set():
            with self.lock:
                if self.remaining <= 0:
                    return
                self.remaining -= 1
                trial = study.ask()
            try:
                value = self.objective(trial)
            except optuna.TrialPruned:
                study.tell(trial, state=TrialState.PRUNED)
            except (Interrupted, TrialFailed) as exc:
                print(f"srl: sweep: trial {trial.number}: {exc}", file=sys.stderr)
                study.tell(trial, state=TrialState.FAIL)
            else:
                study.tell(trial, value)

    def stop(self) -> None:
        """Stop every running trial (as Ctrl-C stops a run) and start no other."""
        self.stopping.set()
        with self.lock:
            for child in self.children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)

    def objective(self, trial: Any) -> float:
        import optuna

        if self.stopping.is_set():
            trial.set_user_attr("interrupted", True)
            raise Interrupted("the sweep is stopping")
        values = suggest(trial, self.settings.space)
        run_dir = self.dir / f"trial-{trial.number}"
        trial.set_user_attr("run_dir", str(run_dir))
        command = [sys.executable, "-m", "srl.cli", "train", self.settings.config, "--run-dir", str(run_dir),
                   *self.settings.overrides, *as_overrides(values), "log.progress=false"]
        (self.dir / "logs").mkdir(exist_ok=True)
        # The trial's `srl` ends itself, as Ctrl-C would, if this process dies (srl.cli: SRL_PARENT_PID).
        env = {**os.environ, PARENT_PID: str(os.getpid())}
        with open(self.dir / "logs" / f"trial-{trial.number}.log", "w") as log:
            child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        with self.lock:
            self.children[trial.number] = child
        pruned = False
        try:
            pruned = self._follow(trial, child, run_dir)
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
            child.wait()
            with self.lock:
                self.children.pop(trial.number, None)
        summary = run_files.read_json(RunPaths(run_dir).summary)
        trial.set_user_attr("env_steps", (summary or {}).get("env_steps"))
        if pruned:
            raise optuna.TrialPruned(f"below the median at {trial.user_attrs.get('pruned_at')} env steps")
        if self.stopping.is_set():
            trial.set_user_attr("interrupted", True)
            raise Interrupted("the sweep was stopped")
        value = trial_value(summary, self.settings)
        if value is None:
            raise TrialFailed(f"trial {trial.number}: the run gave no {self.settings.objective} "
                              f"(exit {child.returncode}; see {self.dir / 'logs' / f'trial-{trial.number}.log'})")
        return value

    def _follow(self, trial: Any, child: subprocess.Popen, run_dir: Path) -> bool:
        """Report the run's mean return every `report_every` env steps while it runs; True once
        it was stopped for being pruned."""
        every, reported = self.settings.report_every, -1
        sign = 1.0 if self.settings.maximize else -1.0
        rows = NewRows(RunPaths(run_dir).metrics)
        while child.poll() is None:
            time.sleep(LOOK_EVERY_S)
            for row in rows.read():
                step = int(row.get("env_steps") or 0) // every
                value = row.get("episode_return_mean")
                if step > reported and isinstance(value, (int, float)):
                    trial.report(sign * float(value), step)
                    reported = step
                    if trial.should_prune():
                        trial.set_user_attr("pruned_at", int(row["env_steps"]))
                        child.send_signal(signal.SIGINT)
                        child.wait()
                        return True
        return False


class NewRows:
    """The rows a growing `metrics.jsonl` gained since the last read (a line being written waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return run_files.json_rows(complete.splitlines())


class Interrupted(Exception):
    """The sweep was stopped (Ctrl-C, SIGTERM): the trial cut off is run again on `--resume`."""


class TrialFailed(Exception):
    pass


def start_sweep(directory: Path, settings: SweepSettings) -> Sweep:
    """A new sweep in `directory` (which must not hold one), its settings checked and recorded."""
    if (directory / SETTINGS).exists():
        raise ConfigError(f"{directory} holds a sweep already; continue it with srl sweep --resume {directory}")
    check_settings(settings)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SETTINGS).write_text(yaml.safe_dump(asdict(settings), sort_keys=False))
    return Sweep(directory, settings)


def resume_sweep(directory: Path, trials: int | None = None, parallel: int | None = None) -> Sweep:
    """The sweep in `directory`, as `sweep.yaml` recorded it (optionally with more trials or workers)."""
    try:
        data = yaml.safe_load((directory / SETTINGS).read_text())
        settings = SweepSettings(**data)
    except (OSError, yaml.YAMLError, TypeError) as exc:
        raise ConfigError(f"{directory} holds no readable sweep ({SETTINGS}: {exc})") from None
    if trials is not None:
        settings.trials = trials
    if parallel is not None:
        settings.parallel = parallel
    return Sweep(directory, settings)


def table(study: Any) -> list[dict[str, Any]]:
    """One row per trial: number, state, objective, env steps, parameters."""
    return [{"trial": t.number, "state": t.state.name.lower(), "value": t.value if t.state.name == "COMPLETE" else None,
             "env_steps": t.user_attrs.get("env_steps"), "pruned_at": t.user_attrs.get("pruned_at"),
             "params": dict(t.params)} for t in study.get_trials(deepcopy=False)]


def plot(rows: list[dict[str, Any]], settings: SweepSettings, output: Path) -> Path:
    """The objective per trial (finished trials as dots, pruned ones as crosses at their last env steps)."""
    import matplotlib

    from srl.report.plot import save_figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    done = [r for r in rows if r["state"] == "complete"]
    ax.plot([r["trial"] for r in done], [r["value"] for r in done], "o", label="finished")
    pruned = [r for r in rows if r["state"] == "pruned" and r["pruned_at"] is not None]
    if pruned and not settings.maximize:
        ax.plot([r["trial"] for r in pruned], [r["pruned_at"] for r in pruned], "x", label="pruned (env steps run)")
    ax.set_xlabel("trial")
    ax.set_ylabel(settings.objective if settings.maximize else "env steps to the stop return")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, output)
