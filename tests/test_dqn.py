"""DQN through buffer workers in real runs: it learns, the buffer reports itself, and a
buffer worker killed mid-run is replaced while the run goes on learning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import kill_run, srl_command
from srl.algorithms.dqn import DQN, DQNConfig
from srl.api.config import load
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.q_network import QNetworkPolicy
from srl.models.random import RandomPolicy
from srl.replay.buffer import ReplayBuffer


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _cartpole_policy() -> QNetworkPolicy:
    import gymnasium as gym

    obs = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-5, 5, (4,), np.float32)})
    return QNetworkPolicy(obs, gym.spaces.Discrete(2), hidden=[16])


def _replay_batch(updates: int = 2) -> NamedArray:
    T, envs = 8, 4
    rng = np.random.default_rng(0)
    traj = NamedArray({keys.OBS: {keys.OBS: rng.standard_normal((T + 1, envs, 4)).astype(np.float32)}})
    traj[keys.ACTION] = rng.integers(0, 2, (T + 1, envs))
    traj[keys.REWARD] = np.ones((T + 1, envs), np.float32)
    for flag in (keys.TERMINATED, keys.TRUNCATED):
        traj[flag] = np.zeros((T + 1, envs), bool)
    traj[keys.ALIVE] = np.ones((T + 1, envs), bool)
    traj[keys.VERSION] = np.zeros((T + 1, envs), np.int64)
    buffer = ReplayBuffer(1000, T, n_step=3, alpha=0.6)
    buffer.insert(traj)
    return buffer.sample(16, updates)


def test_a_step_learns_from_each_update_and_returns_a_priority_per_sampled_unit() -> None:
    policy = _cartpole_policy()
    dqn = DQN(policy, DQNConfig(target_update_interval=2, lr=0.01))
    batch = _replay_batch(updates=3)
    before = [p.detach().clone() for p in policy.parameters()]
    target_before = [p.detach().clone() for p in dqn.target_params]
    stats = dqn.step(batch)
    assert policy.version == 1 and dqn.updates == 3 and np.isfinite(stats["loss"])
    assert dqn.priorities().shape == batch[keys.REPLAY_INDEX].shape and (dqn.priorities() >= 0).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    # refreshed after update 2: the target now equals the online weights of that moment, not the start
    assert any(not torch.equal(a, b) for a, b in zip(target_before, dqn.target_params))
    state = dqn.state_dict()
    other = DQN(_cartpole_policy(), DQNConfig())
    other.load_state_dict(state)
    assert other.updates == 3
    assert all(torch.equal(a, b) for a, b in zip(other.target_params, dqn.target_params))


def test_a_policy_without_action_values_is_refused_by_name() -> None:
    import gymnasium as gym

    obs = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-5, 5, (4,), np.float32)})
    with pytest.raises(TypeError, match="ValuePolicy"):
        DQN(RandomPolicy(obs, gym.spaces.Discrete(2)), DQNConfig())


@pytest.mark.integration
def test_apex_on_cartpole_learns_through_two_buffers_one_of_them_replaced_when_killed(tmp_path: Path) -> None:
    """Ape-X's exploration (four actors, epsilons 0.4 to 0.4 ** 8), two buffer workers sharing
    out the actors, the replay ratio held: the mean training return reaches 150."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-dqn", "--run-dir", str(run_dir), "stop.episode_return=150",
                    "stop.env_steps=150000", "log.tensorboard=false", "log.report_interval_s=0.5",
                    "actors.count=4", "actors.envs_per_slot=16", "replay.count=2",
                    "policy.args.apex_alpha=7", "policy.args.epsilon_end=0.4"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline, victim = time.monotonic() + 90, None
        while victim is None and time.monotonic() < deadline and process.poll() is None:
            buffers = [w for w in _status(run_dir).get("workers", []) if w["kind"] == "buffer"]
            # Both buffers send batches and the trainers' answers (new priorities) come back.
            if len(buffers) == 2 and all(b["state"] == "running" and b["stats"].get("updates_sent", 0) > 50
                                         and b["stats"].get("priority_updates", 0) > 0 for b in buffers):
                victim = buffers[0]
            time.sleep(0.2)
        assert victim is not None, f"the buffers never sent batches or had no answer: {buffers}"
        assert victim["stats"]["held_steps"] > 0 and victim["stats"]["memory_mb"] > 0
        os.kill(victim["pid"], signal.SIGKILL)
        out, err = process.communicate(timeout=240)
    finally:
        kill_run(process, run_dir)
    assert process.returncode == 0, err[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    buffers = [w for w in _status(run_dir)["workers"] if w["kind"] == "buffer"]
    assert [b["restarts"] for b in buffers] == [1, 0]
    graph = _status(run_dir)["graph"]["streams"]
    assert graph["samples"]["consumers"] == ["buffer"] and graph["replay"]["producers"] == ["buffer"]


def test_bench_measures_a_replay_learner_on_real_buffer_batches_at_the_replay_ratio() -> None:
    from srl.measure import replay_batch, replay_settings, trajectories

    config = load("cartpole-dqn")
    settings = replay_settings(config)
    assert settings is not None and settings.unit == "transition" and settings.n_step == 3
    assert replay_settings(load("cartpole-ppo")) is None
    policy = _cartpole_policy()
    obs = NamedArray({keys.OBS: np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)})
    batch, steps = replay_batch(settings, trajectories(policy, obs, T=config.actors.trajectory_length, B=8))
    r = config.replay
    assert batch[keys.REPLAY_WEIGHT].shape == (r.updates_per_batch, r.batch_size)
    assert steps == r.updates_per_batch / r.replay_ratio  # what one step of the learner absorbs
    DQN(policy, DQNConfig()).step(batch)
    with pytest.raises(ValueError, match="replay_ratio"):
        replay_settings(load("pong-apex"))


@pytest.mark.integration
def test_a_resumed_run_reloads_the_buffers_saved_contents(run_srl, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    common = ["replay.save_contents=true", "log.tensorboard=false", "stop.episode_return=null"]
    first = run_srl("train", "cartpole-dqn", "--run-dir", str(run_dir), "stop.env_steps=12000", *common)
    assert first.returncode == 0, first.stderr[-2000:]
    held_before = next(w for w in _status(run_dir)["workers"] if w["kind"] == "buffer")["stats"]["held_steps"]
    saved = np.load(run_dir / "checkpoints" / "replay-0.npz", allow_pickle=False)
    segment = load("cartpole-dqn").actors.trajectory_length
    assert held_before > 0 and int(saved["counters"][0]) * segment >= held_before  # segments x trajectory length
    second = run_srl("train", "--resume", str(run_dir), "stop.env_steps=36000", *common)
    assert second.returncode == 0, second.stderr[-2000:]
    buffer = next(w for w in _status(run_dir)["workers"] if w["kind"] == "buffer")
    # It holds what the first run stored as well as what the second one took from its actors.
    assert buffer["stats"]["taken_steps"] > 0
    assert buffer["stats"]["held_steps"] >= held_before + buffer["stats"]["taken_steps"]
