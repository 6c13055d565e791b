"""The learner apart from any worker: checkpoints that never hold non-finite weights, and a
rollback that walks back to the newest finite checkpoint, or stops with the reason."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.algorithms.ppo import PPO
from srl.learn import checkpoint
from srl.learn.learner import Diverged, Learner
from srl.models.actor_critic import ActorCriticPolicy

SPACES = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (4,), np.float32)}), gym.spaces.Discrete(2)


def _learner(directory) -> Learner:
    policy = ActorCriticPolicy(*SPACES, hidden=[8])
    return Learner(policy, PPO(policy, PPO.Config()), directory, keep=5)


def _poison(learner: Learner) -> None:
    with torch.no_grad():
        for p in learner.policy.parameters():
            p.fill_(float("nan"))


def _nan_checkpoint(learner: Learner, version: int) -> None:
    """A checkpoint of non-finite weights, as a run before these checks could leave (or a disk could)."""
    state = {"policy": learner.policy.state_dict(), "algorithm": learner.algorithm.state_dict()}
    for name in state["policy"]["params"]:
        state["policy"]["params"][name] = np.full_like(state["policy"]["params"][name], np.nan)
    checkpoint.save(learner.checkpoints, version, state, {"env_steps": 0}, keep=5)


def test_rollback_walks_past_a_non_finite_checkpoint_to_the_newest_finite_one(tmp_path):
    learner = _learner(tmp_path)
    learner.policy.version = 1
    assert learner.save(env_steps=100, trained_steps=100)
    good = {k: v.copy() for k, v in learner.policy.state_dict()["params"].items()}
    _nan_checkpoint(learner, 2)  # the newest checkpoint holds NaN: rolling back to it would loop
    learner.policy.version = 3
    _poison(learner)
    assert not learner.finite()
    assert not learner.save(env_steps=300, trained_steps=300)  # nothing written for non-finite weights
    assert checkpoint.versions(tmp_path) == [1, 2]
    assert learner.roll_back("rollback") == "ckpt-000000001.pt"
    assert learner.finite() and learner.rollbacks == 1
    assert learner.policy.version == 4  # newer than any the readers hold
    for name, value in learner.policy.state_dict()["params"].items():
        np.testing.assert_array_equal(value, good[name], err_msg=name)


def test_rollback_stops_with_the_reason_when_asked_to_or_when_nothing_finite_is_kept(tmp_path):
    learner = _learner(tmp_path)
    _poison(learner)
    with pytest.raises(Diverged, match="no checkpoint to roll back to"):
        learner.roll_back("rollback")
    _nan_checkpoint(learner, 1)
    _nan_checkpoint(learner, 2)
    with pytest.raises(Diverged, match="none of the 2 checkpoints in .* holds finite weights"):
        learner.roll_back("rollback")
    with pytest.raises(Diverged, match=r"stopping \(trainers.on_diverge=stop\)"):
        learner.roll_back("stop")
    assert learner.rollbacks == 0
