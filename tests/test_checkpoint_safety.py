"""Checkpoints hold plain weights: one crafted to run code on load is refused and runs nothing."""

import json
import os
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import srl_command
from srl.api.config import dump, validate
from srl.learn import checkpoint


class RunsCodeOnLoad:
    """Unpickling this calls `os.system`: what a malicious checkpoint would carry."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _plant(directory, version: int, payload) -> None:
    """A checkpoint file with a valid sidecar, so `latest()` picks it as the newest good one."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ckpt-{version:09d}.pt"
    torch.save(payload, path)
    sidecar = {"version": version, "env_steps": 0, "sha256": checkpoint._sha256(path)}
    path.with_suffix(".json").write_text(json.dumps(sidecar))


def test_policy_and_optimizer_state_round_trip_as_plain_weights(tmp_path):
    from srl.algorithms.ppo import PPO
    from srl.models.actor_critic import ActorCriticPolicy

    spaces = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (4,), np.float32)}), gym.spaces.Discrete(2)
    policy = ActorCriticPolicy(*spaces, hidden=[8], obs_norm=True)
    policy.version = 7
    algorithm = PPO(policy, PPO.Config())
    state = {"policy": policy.state_dict(), "algorithm": algorithm.state_dict(), "scalar": np.float32(1.5)}
    path = checkpoint.save(tmp_path, 7, state, {"env_steps": 10}, keep=2)
    loaded = checkpoint.load(path)
    assert loaded["scalar"] == 1.5 and isinstance(loaded["scalar"], float)
    restored = ActorCriticPolicy(*spaces, hidden=[8], obs_norm=True)
    restored.load_state_dict(loaded["policy"])
    assert restored.version == 7
    for (name, a), (_, b) in zip(policy.get_params().items_flat(), restored.get_params().items_flat()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    PPO(restored, PPO.Config()).load_state_dict(loaded["algorithm"])


def test_a_checkpoint_that_runs_code_is_refused_in_one_line_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    _plant(tmp_path / "checkpoints", 5, {"policy": RunsCodeOnLoad(marker)})
    path = checkpoint.latest(tmp_path / "checkpoints")
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.load(path)
    assert "refused" in str(error.value) and "system" in str(error.value) and "\n" not in str(error.value)
    assert not marker.exists()


def test_a_file_that_is_not_a_checkpoint_is_one_clear_error(tmp_path):
    path = tmp_path / "ckpt-000000001.pt"
    path.write_bytes(b"not a zip archive at all")
    with pytest.raises(checkpoint.CheckpointError, match="refused"):
        checkpoint.load(path)


def _run_dir_with(tmp_path, payload) -> tuple:
    run_dir, marker = tmp_path / "run", tmp_path / "ran"
    run_dir.mkdir()
    config = validate({"name": "cartpole-ppo", "env": {"type": "gym", "id": "CartPole-v1"},
                       "actors": {"count": 1, "inference": "inline"}, "stop": {"env_steps": 5000},
                       "log": {"tensorboard": False, "progress": False}})
    (run_dir / "config.yaml").write_text(dump(config))
    _plant(run_dir / "checkpoints", 3, payload(marker))
    return run_dir, marker


def test_evaluate_refuses_a_malicious_checkpoint(tmp_path):
    run_dir, marker = _run_dir_with(tmp_path, lambda m: {"policy": RunsCodeOnLoad(m)})
    result = subprocess.run(srl_command("evaluate", str(run_dir), "--episodes", "1"), cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "refused" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


@pytest.mark.integration
def test_resume_from_a_malicious_checkpoint_stops_before_anything_runs_it(tmp_path):
    run_dir, marker = _run_dir_with(tmp_path, lambda m: {"policy": RunsCodeOnLoad(m)})
    result = subprocess.run(srl_command("train", "--resume", str(run_dir)), cwd=tmp_path,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode != 0
    assert "trainer.0 failed to start" in result.stderr and "refused" in result.stderr, result.stderr[-2000:]
    assert not marker.exists()
