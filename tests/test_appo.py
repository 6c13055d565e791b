"""APPO: V-trace against the paper's formulas, on real ring batches, learning from stale samples, a real run."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import start_one, step_one
from test_ppo import sample_batch

from srl.algorithms.appo import APPO, APPOConfig, current_estimates, vtrace
from srl.algorithms.ppo import PPO, gae
from srl.api.registry import ALGORITHMS
from srl.data import keys
from srl.data.named_array import NamedArray, concat
from srl.envs.fake import FakeEnv
from srl.envs.slots import EnvSlot
from srl.models.actor_critic import ActorCriticPolicy
from srl.streams.inference import serve
from srl.workers.env_ring import EnvRing


# ---------------------------------------------------------------------------- V-trace, element by element
def vtrace_reference(reward, value, log_rho, terminated, truncated, gamma, lam, rho_bar, c_bar):
    """Espeholt et al. 2018, eq. (1) and the policy-gradient term of section 4.2, one element
    at a time: v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t, the sum stopping at
    the episode's end (PPO's boundaries: 0 after a termination, V(x_t) after a truncation)."""
    T, B = reward.shape
    ratio = np.exp(log_rho.astype(np.float64))
    vs, advantages = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        def next_value(t):
            if terminated[t, b]:
                return 0.0
            return float(value[t, b]) if truncated[t, b] else float(value[t + 1, b])

        def v(s):
            total = float(value[s, b])
            for t in range(s, T):
                delta = min(rho_bar, ratio[t, b]) * (reward[t, b] + gamma * next_value(t) - value[t, b])
                trace = math.prod(lam * min(c_bar, ratio[i, b]) for i in range(s, t))
                total += gamma ** (t - s) * trace * delta
                if terminated[t, b] or truncated[t, b]:
                    break
            return total

        for s in range(T):
            vs[s, b] = v(s)
            next_v = next_value(s) if terminated[s, b] or truncated[s, b] else v(s + 1)
            advantages[s, b] = min(rho_bar, ratio[s, b]) * (reward[s, b] + gamma * next_v - value[s, b])
    return advantages, vs


def random_trajectories(seed: int, T: int = 9, B: int = 7, log_rho_scale: float = 1.0):
    rng = np.random.default_rng(seed)
    reward = rng.standard_normal((T, B)).astype(np.float32)
    value = rng.standard_normal((T + 1, B)).astype(np.float32)
    log_rho = (log_rho_scale * rng.standard_normal((T, B))).astype(np.float32)
    terminated = rng.random((T, B)) < 0.15
    truncated = (rng.random((T, B)) < 0.15) & ~terminated
    return reward, value, log_rho, terminated, truncated


@pytest.mark.parametrize("lam,rho_bar,c_bar", [(1.0, 1.0, 1.0), (0.9, 1.0, 1.0), (1.0, 2.0, 0.5), (0.8, 0.7, 1.3)])
@pytest.mark.parametrize("seed", [0, 1])
def test_vtrace_matches_the_papers_definitions(lam, rho_bar, c_bar, seed):
    reward, value, log_rho, terminated, truncated = random_trajectories(seed)
    assert terminated.any() and truncated.any() and (log_rho > 0).any() and (log_rho < 0).any()
    ours = vtrace(reward, value, log_rho, terminated, truncated, 0.9, lam, rho_bar, c_bar)
    theirs = vtrace_reference(reward, value, log_rho, terminated, truncated, 0.9, lam, rho_bar, c_bar)
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def discounted_return(reward, value, terminated, truncated, gamma, s, b):
    """Rewards summed to the episode's end or the trajectory's, plus the bootstrap there."""
    total, discount = 0.0, 1.0
    for t in range(s, reward.shape[0]):
        total += discount * reward[t, b]
        discount *= gamma
        if terminated[t, b]:
            return total
        if truncated[t, b]:
            return total + discount * value[t, b]
    return total + discount * value[-1, b]


def test_on_policy_vtrace_is_the_bootstrapped_return_and_gae_with_lambda_one():
    reward, value, _, terminated, truncated = random_trajectories(2)
    on_policy = np.zeros_like(reward)
    advantages, vs = vtrace(reward, value, on_policy, terminated, truncated, 0.95, 1.0, 1.0, 1.0)
    expected = [[discounted_return(reward, value, terminated, truncated, 0.95, s, b) for b in range(reward.shape[1])]
                for s in range(reward.shape[0])]
    np.testing.assert_allclose(vs, expected, rtol=1e-5, atol=1e-5)
    gae_advantages, gae_returns = gae(reward, value, terminated, truncated, 0.95, 1.0)
    np.testing.assert_allclose(advantages, gae_advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vs, gae_returns, rtol=1e-5, atol=1e-5)
    # With lambda < 1 the targets are GAE's lambda-returns (the advantages differ: V-trace's
    # look one full return ahead).
    _, vs = vtrace(reward, value, on_policy, terminated, truncated, 0.95, 0.7, 1.0, 1.0)
    np.testing.assert_allclose(vs, gae(reward, value, terminated, truncated, 0.95, 0.7)[1], rtol=1e-5, atol=1e-5)


def test_vtrace_clips_likely_actions_to_on_policy_and_ignores_unlikely_ones():
    reward, value, _, terminated, truncated = random_trajectories(3)
    on_policy = vtrace(reward, value, np.zeros_like(reward), terminated, truncated, 0.9, 1.0, 1.0, 1.0)
    with np.errstate(all="raise"):  # no overflow, however much likelier pi makes an action
        likely = vtrace(reward, value, np.full_like(reward, 200.0), terminated, truncated, 0.9, 1.0, 1.0, 1.0)
    for a, b in zip(likely, on_policy):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    advantages, vs = vtrace(reward, value, np.full_like(reward, -60.0), terminated, truncated, 0.9, 1.0, 1.0, 1.0)
    np.testing.assert_allclose(advantages, 0.0, atol=1e-6)  # actions pi would never take teach nothing
    np.testing.assert_allclose(vs, value[:-1], atol=1e-6)  # and correct no value


def test_no_correction_crosses_an_episode_boundary():
    reward, value, log_rho, _, _ = random_trajectories(4, T=6, B=2)
    terminated = np.zeros((6, 2), bool)
    truncated = np.zeros((6, 2), bool)
    terminated[2, 0] = truncated[2, 1] = True  # both columns end an episode after row 2
    before = vtrace(reward, value, log_rho, terminated, truncated, 0.9, 1.0, 1.0, 1.0)
    later = (slice(3, None), slice(None))
    reward[later], log_rho[later] = reward[later] + 5.0, log_rho[later] - 1.0
    value[3:] += 7.0  # the next episode's values, row T's bootstrap included
    after = vtrace(reward, value, log_rho, terminated, truncated, 0.9, 1.0, 1.0, 1.0)
    for a, b in zip(before, after):
        np.testing.assert_allclose(a[:3], b[:3], rtol=1e-6)
        assert not np.allclose(a[3:], b[3:])
    # at the boundary: termination adds nothing after r_2, truncation bootstraps from V(x_2)
    rho = np.minimum(1.0, np.exp(log_rho[2]))
    next_value = np.array([0.0, value[2, 1]])
    np.testing.assert_allclose(after[1][2], value[2] + rho * (reward[2] + 0.9 * next_value - value[2]), rtol=1e-5)


# ---------------------------------------------------------------------------- on real ring batches
OBS_SPACE = FakeEnv().observation_space("agent_0")


def ring_batch(policy: ActorCriticPolicy, trajectories: int = 3, T: int = 8) -> NamedArray:
    """Trajectories from a real env ring with 2 envs x 2 agents, the second agent's episodes
    longer than the first's: boundaries mid-trajectory and dead rows (alive = 0)."""
    envs = [FakeEnv(n_agents=2, agent_lengths=[3, 5]) for _ in range(2)]
    ring = EnvRing([EnvSlot(envs, seeds=[1, 2])], T, policy.initial_state)
    request, batches = start_one(ring, 0), []
    while len(batches) < trajectories:
        request, trajectory = step_one(ring, 0, serve(policy, request))
        if trajectory is not None:
            batches.append(trajectory)
    batch = concat(batches, axis=1)
    assert not batch[keys.ALIVE].all() and batch[keys.TRUNCATED][:-1].any()
    return batch


def fake_policy(lstm: int | None = None) -> ActorCriticPolicy:
    torch.manual_seed(0)
    return ActorCriticPolicy(OBS_SPACE, gym.spaces.Discrete(3), hidden=[16], **({"lstm": lstm} if lstm else {}))


def appo_targets(appo: APPO, batch: NamedArray) -> tuple[np.ndarray, np.ndarray]:
    reward = batch[keys.REWARD][:-1].astype(np.float32)
    return appo.targets(batch, reward, batch[keys.VALUE], batch[keys.TERMINATED][:-1], batch[keys.TRUNCATED][:-1])


@pytest.mark.parametrize("lstm", [None, 8])
def test_the_policy_that_acted_reproduces_its_log_probs_values_and_gae(lstm):
    policy = fake_policy(lstm)
    batch = ring_batch(policy)
    alive = batch[keys.ALIVE]
    logprob, value = current_estimates(policy, batch)
    np.testing.assert_allclose(logprob[alive], batch[keys.LOGPROB][alive], atol=1e-5)
    np.testing.assert_allclose(value[alive], batch[keys.VALUE][alive], atol=1e-5)
    # On-policy with lambda 1, APPO's targets are PPO's (over the values the actors recorded).
    appo = APPO(policy, APPOConfig(gamma=0.9, gae_lambda=1.0))
    advantages, returns = appo_targets(appo, batch)
    reward = batch[keys.REWARD][:-1]
    expected = gae(reward, batch[keys.VALUE], batch[keys.TERMINATED][:-1], batch[keys.TRUNCATED][:-1], 0.9, 1.0)
    rows = alive[:-1]
    np.testing.assert_allclose(advantages[rows], expected[0][rows], atol=1e-4)
    np.testing.assert_allclose(returns[rows], expected[1][rows], atol=1e-4)
    assert appo.staleness == pytest.approx({"version_lag": 0.0, "rho_mean": 1.0}, abs=1e-5)


@pytest.mark.parametrize("lstm", [None, 8])
def test_dead_rows_do_not_change_the_targets(lstm):
    policy = fake_policy(lstm)
    batch = ring_batch(policy)
    appo = APPO(policy, APPOConfig())
    before = appo_targets(appo, batch)
    dead = ~batch[keys.ALIVE]
    rng = np.random.default_rng(0)
    batch[keys.OBS][keys.OBS][dead] = rng.standard_normal((int(dead.sum()), 3)) * 100
    batch[keys.ACTION][dead] = (batch[keys.ACTION][dead] + 1) % 3
    batch[keys.LOGPROB][dead] = -50.0
    batch[keys.REWARD][dead] = 9.0
    after = appo_targets(appo, batch)
    rows = ~dead[:-1]
    for a, b in zip(before, after):
        np.testing.assert_allclose(a[rows], b[rows], rtol=1e-6)
    # and the targets are those of the current values, not of the ones the actors recorded
    batch[keys.VALUE][:] = 1e3
    for a, b in zip(before, appo_targets(appo, batch)):
        np.testing.assert_allclose(a[rows], b[rows], rtol=1e-6)


def test_appo_is_registered_and_its_trainers_keep_stale_samples():
    assert ALGORITHMS.resolve("appo") is APPO
    assert APPO.corrects_staleness and not PPO.corrects_staleness
    assert APPOConfig().epochs == 1 and APPOConfig().rho_bar == APPOConfig().c_bar == 1.0


def rewarded_action_batch(behaviour: ActorCriticPolicy, T: int = 8, B: int = 6, seed: int = 0) -> NamedArray:
    """Rows acted by `behaviour` on random observations; action 0 earns 1."""
    rng = np.random.default_rng(seed)
    return sample_batch(behaviour, T, B, NamedArray({keys.OBS: rng.standard_normal((T + 1, B, 3)).astype(np.float32)}))


def test_appo_learns_from_samples_acted_several_versions_ago():
    policy = fake_policy()
    behaviour = fake_policy()  # the actors' copy: refreshed only every 5 updates
    appo = APPO(policy, APPOConfig(lr=1e-2, minibatches=4))
    probe = NamedArray({keys.OBS: np.random.default_rng(9).standard_normal((64, 3)).astype(np.float32)})
    before = (policy.rollout(probe, NamedArray())[keys.ACTION] == 0).mean()
    lags = []
    for i in range(40):
        if i % 5 == 0:
            behaviour.set_params(policy.get_params(), policy.version)
        stats = appo.step(rewarded_action_batch(behaviour, seed=i))
        lags.append(stats["version_lag"])
    after = np.mean([(policy.rollout(probe, NamedArray())[keys.ACTION] == 0).mean() for _ in range(5)])
    assert policy.version == 40 and max(lags) == 4
    assert {"policy_loss", "value_loss", "approx_kl", "version_lag", "rho_mean"} <= stats.keys()
    assert stats["rho_mean"] < 1.0  # stale rows were corrected
    assert after > max(before, 0.34) + 0.3, (before, after)


# ---------------------------------------------------------------------------- a real run
@pytest.mark.integration
def test_cartpole_appo_reaches_475_learning_from_every_stale_sample(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    # A staleness bound of 1 would drop most samples of any algorithm that does not correct.
    result = run_srl("train", "cartpole-appo", "--run-dir", str(run_dir), "trainers.max_staleness=1",
                     "log.tensorboard=false", "log.progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    assert summary["episode_return_mean"] >= 475, summary
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r["dropped_stale"] == 0 for r in records)
    # Samples past the bound, which PPO would have dropped, were learned from. (Not the mean
    # lag: on a fast box the trainer keeps up and a batch's mean lag stays at 1, while its
    # oldest actions, which the bound looks at, are older.)
    assert records[-1]["kept_stale"] > 0, records[-1]
