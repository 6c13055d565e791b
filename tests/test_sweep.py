"""Sweeps on Optuna (srl/sweep.py, `srl sweep`): spaces checked in one line, trials as real runs,
pruning from the metrics rows, a sweep killed and resumed without repeating finished trials."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from conftest import srl_command

from srl.api.config import ConfigError
from srl.streams import shm
from srl.sweep import ENV_STEPS, SweepSettings, check_settings, read_space, trial_value

pytest.importorskip("optuna")


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("algorithm.args.lr: {loguniform: [1e-5, 1e-2]}", "algorithm.args.lr: expected one of"),
    ("algorithm.args.lr: {log_uniform: [1e-2, 1e-5]}", "algorithm.args.lr: log_uniform needs low < high"),
    ("algorithm.args.lr: {log_uniform: [0, 1e-2]}", "log_uniform needs low > 0"),
    ("trainers.batch_steps: {int: [512.5, 4096]}", "trainers.batch_steps: int takes integer bounds"),
    ("actors.envs_per_slot: {categorical: []}", "categorical takes a non-empty list"),
    ("algorithm.args.lr: {uniform: [0.1]}", "uniform takes [low, high]"),
    ("algorithm.args.lr: {uniform: [a, 0.1]}", "uniform takes [low, high]"),
    ("[1, 2]", "expected a mapping of config fields"),
])
def test_a_bad_space_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_space(_space(tmp_path, text))


def test_numbers_yaml_reads_as_strings_are_numbers(tmp_path: Path):
    assert read_space(_space(tmp_path, "algorithm.args.lr: {log_uniform: [1e-5, 1e-2]}")) == {
        "algorithm.args.lr": {"log_uniform": [1e-5, 1e-2]}}


def test_a_field_the_config_does_not_have_is_refused_before_any_trial():
    settings = SweepSettings("cartpole-ppo", {"algorithm.args.learning_rate": {"uniform": [0.1, 0.2]}}, trials=2)
    with pytest.raises(ConfigError, match="learning_rate"):
        check_settings(settings)
    settings = SweepSettings("cartpole-ppo", {"algorithm.args.lr": {"uniform": [0.1, 0.2]}}, trials=2,
                             overrides=["stop.episode_return=null"])
    with pytest.raises(ConfigError, match="stop.episode_return"):
        check_settings(settings)


def test_the_objective_counts_env_steps_to_the_return_and_doubles_those_of_a_run_that_missed_it():
    settings = SweepSettings("cartpole-ppo", {}, trials=1)
    assert settings.objective == ENV_STEPS and not settings.maximize
    assert trial_value({"env_steps": 90_000, "stop_reason": "episode_return_mean 476.0 >= 475.0"}, settings) == 90_000
    assert trial_value({"env_steps": 300_000, "stop_reason": "env_steps reached 300000"}, settings) == 600_000
    maximized = SweepSettings("cartpole-ppo", {}, trials=1, objective="eval_return_mean")
    assert maximized.maximize
    assert trial_value({"eval_return_mean": 500.0}, maximized) == 500.0
    assert trial_value({"episode_return_mean": 1.0}, maximized) is None


def _trials(db: Path) -> list:
    """The sweep's trials so far: none while the database exists but the study is not yet in it
    (optuna writes the file and its tables before the study's row), or while a writer holds it."""
    import optuna
    from sqlalchemy.exc import OperationalError

    try:
        return optuna.load_study(study_name="sweep", storage=f"sqlite:///{db}").get_trials(deepcopy=False)
    except (KeyError, OperationalError):
        return []


@pytest.mark.integration
def test_a_cartpole_sweep_prunes_finds_a_faster_lr_and_resumes_without_repeating_trials(tmp_path: Path):
    """Five trials over lr (log-uniform 1e-5..1e-2) and entropy_coef, two at once. The sweep is
    stopped (SIGTERM) once two trials have finished, then resumed: the finished trials are kept,
    the ones cut off run again with their parameters, and no process or segment is left."""
    space = _space(tmp_path, "algorithm.args.lr: {log_uniform: [1.0e-5, 1.0e-2]}\n"
                             "algorithm.args.entropy_coef: {uniform: [0.0, 0.05]}\n")
    sweep_dir = tmp_path / "sweep"
    # A trial that never reaches 475 stops at 250k env steps (its objective then 500k).
    # The sampler's seed 6 draws lr 4.8e-3 and 2.9e-3 first (two trials that reach 475 set the
    # pruner's median), then 2.1e-5 and 3.9e-4: the first six trials of seeds 0-11 hold 0 to 5
    # learning rates above 1e-3, so a seed decides whether a sweep this short has anything to find.
    args = ["sweep", "cartpole-ppo", "--space", str(space), "--trials", "5", "--parallel", "2", "--seed", "6",
            "--run-dir", str(sweep_dir), "--report-every", "10000", "stop.env_steps=250000"]
    log = open(tmp_path / "sweep.log", "w")
    first = subprocess.Popen(srl_command(*args), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    db = sweep_dir / "sweep.db"
    deadline = time.monotonic() + 240
    while first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        if db.exists() and sum(t.state.is_finished() for t in _trials(db)) >= 2:
            first.send_signal(signal.SIGTERM)
            break
    assert first.wait(120) == 130, (tmp_path / "sweep.log").read_text()[-3000:]
    kept = {t.number: t for t in _trials(db) if t.state.name in ("COMPLETE", "PRUNED")}
    assert len(kept) >= 2
    resumed = subprocess.run(srl_command("sweep", "--resume", str(sweep_dir)), cwd=tmp_path, capture_output=True,
                             text=True, timeout=400)
    (tmp_path / "resumed.err").write_text(resumed.stderr)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = json.loads((sweep_dir / "trials.json").read_text())
    finished = [r for r in rows if r["state"] in ("complete", "pruned")]
    assert len(finished) == 5, rows
    for number, trial in kept.items():  # the finished trials were not run again
        row = next(r for r in rows if r["trial"] == number)
        assert row["state"] == trial.state.name.lower()
        assert row["value"] == (trial.value if trial.state.name == "COMPLETE" else None)
        assert sum(r["params"] == trial.params for r in rows) == 1
    assert any(r["state"] == "pruned" for r in finished), rows
    # Every finished trial's objective (a pruned trial counts as never reaching 475).
    values = [r["value"] if r["state"] == "complete" else 2.0 * 250_000 for r in finished]
    best = min(values)
    assert best < statistics.median(values) and best < 250_000, values
    assert "best: trial" in resumed.stdout and (sweep_dir / "sweep.png").stat().st_size > 0
    for row in rows:  # every run stopped cleanly: a summary each, no worker left
        run_dir = sweep_dir / f"trial-{row['trial']}"
        if not (run_dir / "status.json").exists():
            continue
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "stopped", (row, status["state"])
        assert not shm.sweep(f"{shm.PREFIX}{status['run_id']}_"), f"trial {row['trial']} left shared memory"
        for worker in status["workers"]:
            if worker.get("pid"):
                with pytest.raises(ProcessLookupError):
                    os.kill(worker["pid"], 0)


def test_a_trial_whose_sweep_is_gone_stops_itself(tmp_path: Path):
    """A trial's `srl` is told (SRL_PARENT_PID) which process started it; when that one is gone
    (here: it names a process that is not its parent), it ends itself with SIGTERM at once."""
    gone = subprocess.run(srl_command("configs", "--json"), cwd=tmp_path, capture_output=True, timeout=60,
                          env={**os.environ, "SRL_PARENT_PID": "1"})
    assert gone.returncode == -signal.SIGTERM
    kept = subprocess.run(srl_command("configs", "--json"), cwd=tmp_path, capture_output=True, timeout=60,
                          env={**os.environ, "SRL_PARENT_PID": str(os.getpid())})
    assert kept.returncode == 0 and json.loads(kept.stdout)
