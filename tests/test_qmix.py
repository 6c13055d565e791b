"""VDN and QMIX: the team value each mixes, QMIX's monotonicity, the mixer's target copy and
checkpoint round trip, and a real run on MPE simple_spread."""

from __future__ import annotations

import json
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.algorithms.qmix import QMIX, VDN, QMIXConfig
from srl.api.config import load
from srl.api.registry import ALGORITHMS
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.q_network import QNetworkPolicy

G, ACTIONS, OBS_DIM, STATE_DIM = 3, 5, 4, 6
SPACE = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (OBS_DIM,), np.float32),
                         "state": gym.spaces.Box(-1, 1, (STATE_DIM,), np.float32)})


def policy(seed: int = 0) -> QNetworkPolicy:
    torch.manual_seed(seed)
    return QNetworkPolicy(SPACE, gym.spaces.Discrete(ACTIONS), hidden=[16], inputs=["obs"])


def observations(rng: np.random.Generator, lead: tuple[int, ...]) -> NamedArray:
    """Per-agent observations and one global state per env, copied to each of its agents."""
    state = rng.uniform(-1, 1, (*lead, 1, STATE_DIM)).astype(np.float32)
    return NamedArray({"obs": rng.uniform(-1, 1, (*lead, G, OBS_DIM)).astype(np.float32),
                       "state": np.repeat(state, G, axis=-2)})


def joint_batch(updates: int = 2, batch: int = 8, seed: int = 0) -> NamedArray:
    """What a joint replay buffer sends: leaves [updates, batch, G, ...], weights [updates, batch]."""
    rng = np.random.default_rng(seed)
    lead = (updates, batch)
    return NamedArray({
        keys.OBS: observations(rng, lead),
        keys.NEXT_OBS: observations(rng, lead),
        keys.ACTION: rng.integers(0, ACTIONS, (*lead, G)),
        keys.ALIVE: np.ones((*lead, G), bool),
        keys.NSTEP_RETURN: rng.standard_normal((*lead, G)).astype(np.float32),
        keys.DISCOUNT: np.repeat(rng.choice([0.0, 0.97], (*lead, 1)).astype(np.float32), G, -1),
        keys.REPLAY_WEIGHT: np.ones(lead, np.float32),
        keys.REPLAY_INDEX: np.arange(updates * batch).reshape(lead),
    })


def test_both_are_registered_and_ask_the_buffer_for_joint_steps():
    assert ALGORITHMS.resolve("vdn") is VDN and ALGORITHMS.resolve("qmix") is QMIX
    assert VDN.joint and QMIX.joint


def test_vdn_sums_agent_values_and_bootstraps_the_mean_team_return():
    vdn = VDN(policy(), VDN.Config())
    rows = joint_batch()[0]
    q, next_value = torch.randn(8, G), torch.randn(8, G)
    prediction, target = vdn.values(q, rows, next_value)
    torch.testing.assert_close(prediction, q.sum(-1))
    team_return = torch.as_tensor(rows[keys.NSTEP_RETURN]).mean(-1)
    torch.testing.assert_close(target, team_return + torch.as_tensor(rows[keys.DISCOUNT])[:, 0] * next_value.sum(-1))
    stats = vdn.step(joint_batch())
    assert math.isfinite(stats["loss"]) and vdn.priorities().shape == (2, 8)  # one priority per joint step


def test_qmix_is_monotonic_in_every_agents_value_and_depends_on_the_state():
    qmix = QMIX(policy(), QMIXConfig(embed_dim=8))
    for seed in range(5):  # the mixer as built, then after training moves its weights
        qmix.step(joint_batch(seed=seed))
        obs = observations(np.random.default_rng(100 + seed), (64,))
        q = torch.randn(64, G, requires_grad=True)
        (grad,) = torch.autograd.grad(qmix.mix(q, obs).sum(), q)
        assert (grad >= 0).all() and (grad > 0).any()
    other = observations(np.random.default_rng(7), (64,))
    assert not torch.allclose(qmix.mix(q, obs), qmix.mix(q, other))  # conditioned on the global state


def test_the_target_mixer_follows_the_mixer_at_each_target_refresh():
    qmix = QMIX(policy(), QMIXConfig(target_update_interval=3))
    same = lambda: all(torch.equal(a, b) for a, b in zip(qmix.mixer.parameters(), qmix.target_mixer.parameters()))
    qmix.step(joint_batch(updates=2))
    assert not same()  # two updates moved the mixer, not yet its target
    qmix.step(joint_batch(updates=1, seed=1))
    assert same()
    assert not any(p.requires_grad for p in qmix.target_mixer.parameters())
    optimised = {id(p) for group in qmix.optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in qmix.mixer.parameters()} <= optimised


def test_state_dict_round_trip_restores_the_mixer_its_target_and_the_optimiser():
    trained = QMIX(policy(), QMIXConfig(target_update_interval=2))
    for seed in range(3):
        trained.step(joint_batch(updates=3, seed=seed))
    state = pickle.loads(pickle.dumps(trained.state_dict()))  # as a checkpoint stores it
    fresh = QMIX(policy(seed=1), QMIXConfig(target_update_interval=2))  # no batch yet: no mixer
    fresh.load_state_dict(state)
    for a, b in [(trained.mixer, fresh.mixer), (trained.target_mixer, fresh.target_mixer)]:
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            torch.testing.assert_close(x, y, msg=name)
    assert not all(torch.equal(a, b) for a, b in zip(trained.mixer.parameters(), trained.target_mixer.parameters()))
    assert fresh.updates == trained.updates == 9
    assert len(fresh.optimizer.state_dict()["state"]) == len(trained.optimizer.state_dict()["state"])


def test_qmix_refuses_a_missing_state_field():
    with pytest.raises(ValueError, match="state_field 'global'"):
        QMIX(policy(), QMIXConfig(state_field="global"))


def test_spread_qmix_config_reads_the_state_it_mixes_on():
    config = load("spread-qmix")
    assert config.algorithm.type == "qmix" and config.stop.env_steps == 150_000
    assert config.policy.args["inputs"] == ["obs"] and QMIXConfig(**config.algorithm.args).state_field == "state"


# ---------------------------------------------------------------------------- a real run
@pytest.mark.integration
def test_spread_qmix_learns_through_a_buffer_worker(run_srl, tmp_path):
    pytest.importorskip("mpe2")
    run_dir = tmp_path / "run"
    result = run_srl("train", "spread-qmix", "--run-dir", str(run_dir), "stop.env_steps=30000",
                     "log.tensorboard=false", "log.progress=false", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert any(w["kind"] == "buffer" for w in status["workers"])
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train"]["loss"] for r in records if "loss" in r.get("train", {})]
    assert losses and all(math.isfinite(x) for x in losses)
    # The random policy scores -27.5 (return averaged over agents).
    best = max(r["episode_return_mean"] for r in records if r.get("episode_return_mean") is not None)
    assert best >= -24.0, best
