"""A policy written from `srl.api.policy` alone (examples/user_policy) acts, analyzes, ships its
params, and trains in real runs with one trainer and with two data-parallel ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import kill_run, srl_command, start_one, step_one

from srl.api.algorithm import Algorithm
from srl.api.components import make_algorithm
from srl.api.env import spaces_of
from srl.api.policy import Policy
from srl.api.registry import ALGORITHMS
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.gym import GymEnv
from srl.envs.slot_builder import make_slots
from srl.streams.inference import serve
from srl.workers.env_ring import EnvRing

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
from user_policy.tiny_policy import TinyPolicy  # noqa: E402

TYPE = "user_policy.tiny_policy:TinyPolicy"
OBS_SPACE = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (4,), np.float32),
                             "extra": gym.spaces.Box(-1, 1, (2, 3), np.float32)})
SPACES = {"discrete": gym.spaces.Discrete(3), "box": gym.spaces.Box(-2, 2, (2,), np.float32)}


def obs_batch(*lead: int, seed: int = 0) -> NamedArray:
    rng = np.random.default_rng(seed)
    return NamedArray({"obs": rng.standard_normal((*lead, 4)).astype(np.float32),
                       "extra": rng.standard_normal((*lead, 2, 3)).astype(np.float32)})


def tensors(obs: NamedArray) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in obs.items_flat()}


def test_it_is_a_policy_and_nothing_from_srl_models():
    source = (EXAMPLES / "user_policy" / "tiny_policy.py").read_text()
    assert "srl.models" not in source
    assert issubclass(TinyPolicy, Policy)


@pytest.mark.parametrize("name", SPACES)
def test_rollout_returns_what_the_interface_states(name):
    space = SPACES[name]
    policy = TinyPolicy(OBS_SPACE, space, hidden=[16])
    assert policy.initial_state(5).paths() == []
    out = policy.rollout(obs_batch(5), policy.initial_state(5))
    assert set(out.paths()) == {keys.ACTION, keys.LOGPROB, keys.VALUE}
    assert all(isinstance(v, np.ndarray) for _, v in out.items_flat())
    assert out[keys.ACTION].shape == (5, *space.shape)
    assert out[keys.LOGPROB].shape == out[keys.VALUE].shape == (5,)
    assert out[keys.LOGPROB].dtype == out[keys.VALUE].dtype == np.float32
    if name == "discrete":
        assert np.issubdtype(out[keys.ACTION].dtype, np.integer)
        assert all(space.contains(int(a)) for a in out[keys.ACTION])
    # What serve() adds for staleness checks.
    served = serve(policy, NamedArray({keys.OBS: obs_batch(5)}))
    assert (served[keys.VERSION] == policy.version).all()
    # Deterministic acting picks the same action every time.
    first = policy.rollout(obs_batch(5), NamedArray(), deterministic=True)[keys.ACTION]
    np.testing.assert_array_equal(first, policy.rollout(obs_batch(5), NamedArray(), deterministic=True)[keys.ACTION])


@pytest.mark.parametrize("name", SPACES)
def test_analyze_is_differentiable_and_agrees_with_rollout(name):
    policy = TinyPolicy(OBS_SPACE, SPACES[name], hidden=[16, 16])
    obs = obs_batch(3, 4)  # [T, B] rows, as a trainer may hand them over
    out = policy.rollout(obs.map(lambda x: x.reshape(12, *x.shape[2:])), NamedArray())
    action = torch.as_tensor(out[keys.ACTION]).reshape(3, 4, *SPACES[name].shape)
    analysis = policy.analyze({keys.OBS: tensors(obs), keys.ACTION: action})
    assert analysis.logprob.shape == analysis.entropy.shape == analysis.value.shape == (3, 4)
    np.testing.assert_allclose(analysis.logprob.detach().numpy().reshape(-1), out[keys.LOGPROB], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(analysis.value.detach().numpy().reshape(-1), out[keys.VALUE], rtol=1e-5, atol=1e-5)
    (analysis.logprob.sum() + analysis.value.sum() + analysis.entropy.sum()).backward()
    params = list(policy.parameters())
    assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert policy.analyze({keys.OBS: tensors(obs), keys.ACTION: action}, entropy=False).entropy is None


def test_params_round_trip_and_checkpoint():
    a = TinyPolicy(OBS_SPACE, SPACES["box"], obs_norm=True)
    a.update_statistics(obs_batch(7, 3, seed=1))
    b = TinyPolicy(OBS_SPACE, SPACES["box"], obs_norm=True)
    before = b.rollout(obs_batch(5), NamedArray(), deterministic=True)[keys.ACTION]
    b.set_params(a.get_params(), version=7)
    assert b.version == 7
    after = b.rollout(obs_batch(5), NamedArray(), deterministic=True)[keys.ACTION]
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, a.rollout(obs_batch(5), NamedArray(), deterministic=True)[keys.ACTION])
    c = TinyPolicy(OBS_SPACE, SPACES["box"], obs_norm=True)
    c.load_state_dict(b.state_dict())
    assert c.version == 7
    for (pa, x), (pc, y) in zip(a.get_params().items_flat(), c.get_params().items_flat()):
        assert pa == pc
        np.testing.assert_array_equal(x, y)


def test_running_statistics_are_buffers_that_ship_with_the_params():
    policy = TinyPolicy(OBS_SPACE, SPACES["discrete"], obs_norm=True)
    buffers = list(policy.buffers())
    assert buffers and not any(b.requires_grad for b in buffers)
    assert not {id(b) for b in buffers} & {id(p) for p in policy.parameters()}
    before = [b.clone() for b in buffers]
    policy.update_statistics(obs_batch(6, 2, seed=3))
    assert any(not torch.equal(x, y) for x, y in zip(before, policy.buffers()))
    shipped = dict(policy.get_params().items_flat())
    assert any(np.array_equal(v, policy_buffer.numpy()) for v in shipped.values() for policy_buffer in policy.buffers())
    assert list(TinyPolicy(OBS_SPACE, SPACES["discrete"]).buffers()) == []


def collect(policy: TinyPolicy, env_id: str, steps: int = 16) -> NamedArray:
    """One batch [T + 1, B] as an actor records it: an env ring answered through `serve`."""
    slots = make_slots(lambda: GymEnv(env_id), ring_size=1, envs_per_slot=4, seed=0)
    ring = EnvRing(slots, steps, policy.initial_state)
    request, trajectory = start_one(ring, 0), None
    while trajectory is None:
        request, trajectory = step_one(ring, 0, serve(policy, request))
    slots[0].close()
    return trajectory


#: The algorithms that learn from actors' trajectories (the others replay transitions and need a
#: policy with action values: tests/test_dqn.py, test_r2d2.py and test_qmix.py step them).
ON_POLICY = [name for name in ALGORITHMS.names() if ALGORITHMS.resolve(name).graph.__func__ is Algorithm.graph.__func__]


@pytest.mark.parametrize("algorithm", ON_POLICY)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_every_bundled_algorithm_steps_it(algorithm, env_id):
    env = GymEnv(env_id)
    torch.manual_seed(0)
    policy = TinyPolicy(*spaces_of(env), hidden=[16], obs_norm=True)
    env.close()
    batch = collect(policy, env_id)
    before = [p.detach().clone() for p in policy.parameters()]
    stats = make_algorithm({"type": algorithm}, policy).step(batch)
    assert all(np.isfinite(v) for v in stats.values()), stats
    changed = any(not torch.equal(x, y) for x, y in zip(before, policy.parameters()))
    assert changed == (policy.version == 1), (changed, policy.version)  # a new version: new weights
    if algorithm == "ppo":
        assert changed


# ---------------------------------------------------------------- real runs


def train(tmp_path: Path, *overrides: str, timeout: float = 150) -> Path:
    """`srl train cartpole-ppo` with the user's policy, found through PYTHONPATH as a user would."""
    run_dir = tmp_path / "run"
    path = os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), f"policy.type={TYPE}",
                    "stop.episode_return=475", "stop.env_steps=1500000", "stop.time_s=120", "log.tensorboard=false",
                    *overrides),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"})
    try:
        _, stderr = process.communicate(timeout=timeout)
        assert process.returncode == 0, stderr[-3000:]
    finally:
        kill_run(process, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary  # stopped by itself
    assert summary["episode_return_mean"] >= 475, summary
    assert f"type: {TYPE}" in (run_dir / "config.yaml").read_text()
    return run_dir


@pytest.mark.integration
def test_cartpole_learns_with_the_user_policy(tmp_path):
    train(tmp_path)


@pytest.mark.integration
def test_two_data_parallel_trainers_keep_the_user_policy_identical(tmp_path):
    # Observation statistics make the buffers part of what the trainers must keep equal.
    run_dir = train(tmp_path, "trainers.count=2", "actors.count=2", "policy.args={obs_norm: true}")
    trainers = [w for w in json.loads((run_dir / "status.json").read_text())["workers"] if w["kind"] == "trainer"]
    assert len(trainers) == 2
    assert trainers[0]["policy_version"] == trainers[1]["policy_version"] > 3
    assert trainers[0]["param_digest"] == trainers[1]["param_digest"]
