"""A worker kind written outside srl, named by import path in a config, in a real run.

The kinds are `examples/user_worker/weight_watcher.py` (with the config beside it) and
`examples/user_worker/greedy_player.py`.
Nothing is registered: the run finds the class through PYTHONPATH, as a user's would.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import kill_run, srl_command, wait_for

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KIND = "user_worker.weight_watcher:WeightWatcher"


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _worker(run_dir: Path, name: str) -> dict | None:
    return next((w for w in _status(run_dir).get("workers", []) if w["name"] == name), None)


def _watcher(run_dir: Path) -> dict | None:
    return _worker(run_dir, "watcher.0")


def test_a_users_worker_kind_runs_reports_and_is_restarted_when_killed(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        srl_command("train", str(EXAMPLES / "user_worker" / "cartpole-watched.yaml"), "--run-dir", str(run_dir),
                    "stop.episode_return=null", "stop.time_s=120", "log.tensorboard=false"),
        cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def watching():
            w = _watcher(run_dir)
            return w if w and w["state"] == "running" and w["stats"].get("versions_seen", 0) >= 2 else None

        victim = wait_for(watching, 90, "the watcher to see two versions", process)
        assert victim["kind"] == KIND and victim["group"] == "watcher"
        assert victim["stats"]["weight_norm"] > 0
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced():
            w = _watcher(run_dir)
            return w if (w and w["restarts"] == 1 and w["pid"] != victim["pid"] and w["state"] == "running"
                         and w["stats"].get("versions_seen", 0) >= 1) else None

        wait_for(replaced, 60, "the watcher replaced", process)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the run stops cleanly, as after any stop rule
        process.wait(timeout=60)
        assert process.returncode == 0, process.stderr.read()[-2000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted" and "errors" not in summary, summary
        status = _status(run_dir)
        assert status["graph"]["groups"]["watcher"]["kind"] == KIND
        assert status["graph"]["streams"]["parameters"]["consumers"] == ["actor", "watcher"]
        assert "kind: " + KIND in (run_dir / "graph.yaml").read_text()
        assert "weight norm" in (run_dir / "logs" / "watcher.0.log").read_text()
    finally:
        kill_run(process, run_dir)


def test_a_bad_setting_of_a_users_kind_is_one_config_error_before_launch(run_srl, tmp_path):
    result = subprocess.run(
        srl_command("train", str(EXAMPLES / "user_worker" / "cartpole-watched.yaml"), "--run-dir", str(tmp_path / "r"),
                    "workers.watcher.settings.log_every=0"),
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(EXAMPLES)})
    assert result.returncode == 2, result.stderr
    assert "workers.watcher.settings.log_every" in result.stderr
    assert not (tmp_path / "r" / "status.json").exists()


GREEDY = ["workers.greedy.kind=user_worker.greedy_player:GreedyPlayer", "workers.greedy.settings.every_versions=8",
          "workers.greedy.settings.episodes=1",
          "workers.greedy.streams.parameters=parameters"]


def test_a_users_worker_kind_plays_greedy_episodes_of_the_runs_env_with_the_runs_policy(tmp_path):
    """`examples/user_worker/greedy_player.py`, written from docs/graph.md alone: its settings name
    the run's `env` and `policy` sections and get them; it follows the trained versions, and the
    greedy return it reports rises with them (an untrained CartPole policy lasts ~10-40 steps)."""
    run_dir = tmp_path / "run"
    result = subprocess.run(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=inline", "log.tensorboard=false",
                    "stop.episode_return=300",
                    *GREEDY),
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(EXAMPLES)})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return"), summary
    greedy = _worker(run_dir, "greedy.0")["stats"]
    assert greedy["greedy_rounds"] >= 3 and greedy["greedy_version"] >= 3, greedy
    assert greedy["greedy_return_mean"] >= 150, greedy
    log_lines = (run_dir / "logs" / "greedy.0.log").read_text().splitlines()
    first = float(next(line for line in log_lines if "greedy return" in line).split("greedy return ")[1].split()[0])
    assert first < greedy["greedy_return_mean"], (first, greedy)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["workers"]["greedy"]["settings"] == {"every_versions": 8, "episodes": 1}  # env and policy: the run's own, not copied
