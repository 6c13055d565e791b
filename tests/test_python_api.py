"""SRL from Python (srl/run.py): train, start and stop, open a run, play its policy in a user's loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import srl
from srl.api.config import ConfigError
from srl.streams import shm

FAST = ["log.progress=false", "log.tensorboard=false"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) is gone for every purpose here.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
def test_a_plain_script_trains_cartpole_and_plays_the_policy_in_its_own_gymnasium_loop(tmp_path: Path):
    """`srl.train` from a plain `python` script (no `__main__` guard: the workers must not run it
    again) returns once the run reaches 475; its best evaluated policy then plays 20 episodes of
    the user's own CartPole far above random play (about 22) and balances the pole for a whole
    episode at least once. The learning bar itself is the run's own 475: a policy that has just
    reached it is brittle on unseen starts (one best policy played 97 to 500, mean 306, over 20)."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(f"""
        import json
        import gymnasium as gym
        import srl

        run = srl.train("cartpole-ppo", overrides={[*FAST, "evaluation.count=1"]!r}, run_dir={str(tmp_path / "run")!r})
        policy = srl.load_policy(run.dir)
        env = gym.make("CartPole-v1")
        returns = []
        for episode in range(20):
            obs, _ = env.reset(seed=episode)
            done, total = False, 0.0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
                total += reward
                done = terminated or truncated
            returns.append(total)
        print(json.dumps({{"summary": run.summary, "returns": returns, "rows": len(run.metrics()),
                          "label": policy.label}}))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["summary"]["stop_reason"].startswith("episode_return_mean"), result["summary"]
    assert result["summary"]["episode_return_mean"] >= 475
    assert result["label"] == "best.pt"
    assert np.mean(result["returns"]) >= 200 and max(result["returns"]) == 500, result["returns"]


@pytest.mark.integration
def test_a_run_started_from_python_is_stopped_from_another_thread_and_leaves_nothing(tmp_path: Path):
    handle = srl.start("cartpole-ppo", overrides=[*FAST, "stop.episode_return=1e9"], run_dir=tmp_path / "run")
    try:
        deadline = time.monotonic() + 60
        while not any(row.get("env_steps") for row in handle.metrics()):
            assert handle.running and time.monotonic() < deadline, "no metrics row with env steps in 60 s"
            time.sleep(0.2)
        status = handle.status()
        assert status["state"] == "running"
        pids = [w["pid"] for w in status["workers"] if w.get("pid")]
        assert pids
        stopper = threading.Thread(target=handle.stop)
        stopper.start()
        stopper.join()
        summary = handle.wait(60)
    finally:
        if handle.running:
            handle.stop()
            handle.wait(60)
    assert summary is not None and summary["stop_reason"] == "stopped", summary
    assert summary["env_steps"] > 0
    assert not handle.running
    assert not [pid for pid in pids if _alive(pid)]
    run_id = json.loads(handle.paths.status.read_text())["run_id"]
    assert not shm.sweep(f"{shm.PREFIX}{run_id}_"), "the run left shared memory behind"
    opened = srl.Run.open(handle.dir)
    assert opened.summary == summary
    assert opened.config.name == "cartpole-ppo"
    assert opened.checkpoints() and opened.graph["groups"]


def test_a_bad_config_is_refused_before_anything_starts(tmp_path: Path):
    with pytest.raises(ConfigError, match="actors.count"):
        srl.start("cartpole-ppo", overrides=["actors.count=0"], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_directory_that_holds_a_run_is_refused(tmp_path: Path):
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(srl.run.RunExists, match="already holds a run"):
        srl.train("cartpole-ppo", run_dir=tmp_path)


def test_opening_a_directory_that_is_not_a_run_says_so(tmp_path: Path):
    with pytest.raises(ValueError, match="not a run directory"):
        srl.Run.open(tmp_path)
    with pytest.raises(ConfigError, match="not a run directory"):
        srl.load_policy(tmp_path)


@pytest.fixture
def cartpole_run(tmp_path: Path) -> Path:
    """A run directory whose checkpoint holds an untrained CartPole policy (no training needed)."""
    import torch

    from srl.api.components import make_env, make_policy
    from srl.api.config import dump
    from srl.api.env import spaces_of
    from srl.api.run_paths import RunPaths
    from srl.learn import checkpoint
    from srl.prepare import prepare

    config = prepare("cartpole-ppo").config
    paths = RunPaths(tmp_path)
    paths.config.write_text(dump(config))
    env = make_env(config.env)
    torch.manual_seed(0)
    policy = make_policy(config.policy, *spaces_of(env))
    env.close()
    checkpoint.save(paths.checkpoints(), 3, {"policy": policy.state_dict()}, {"env_steps": 10}, keep=2)
    return tmp_path


def test_a_loaded_policy_acts_on_one_observation_or_a_batch(cartpole_run: Path):
    policy = srl.load_policy(cartpole_run, version=3)
    assert policy.label == "ckpt-000000003.pt"
    one = policy.act(np.zeros(4, np.float32))
    assert np.ndim(one) == 0 and one in (0, 1)
    batch = policy.act(np.zeros((5, 4), np.float32))
    assert batch.shape == (5,)
    action, state = policy.act(np.zeros(4), state=policy.initial_state())
    assert action in (0, 1)
    assert srl.load_policy(cartpole_run).label == "ckpt-000000003.pt"  # nothing evaluated: "best" is the newest


def test_a_loaded_policy_names_what_is_wrong(cartpole_run: Path):
    with pytest.raises(ValueError, match="version must be one of best, latest or a policy version number"):
        srl.load_policy(cartpole_run, version="newest")
    with pytest.raises(ValueError, match="does not exist"):
        srl.load_policy(cartpole_run, version=7)
    policy = srl.load_policy(cartpole_run, version="latest")
    with pytest.raises(ValueError, match="lacks the field"):
        policy.act({"position": np.zeros(4)})
