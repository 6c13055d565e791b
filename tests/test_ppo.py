"""The actor-critic policy, GAE, a PPO step, and checkpoints — pure compute, no processes."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.algorithms.common import clip_grad_norm
from srl.algorithms.ppo import PPO, PPOConfig, gae
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.learn import checkpoint
from srl.models.actor_critic import ActorCriticPolicy
from srl.models.encoders import ENCODERS

OBS_SPACE = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (4,), np.float32), "extra": gym.spaces.Box(-1, 1, (2, 3), np.float32)})
SPACES = {
    "discrete": gym.spaces.Discrete(3),
    "box": gym.spaces.Box(-2, 2, (2,), np.float32),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
}


def obs_batch(*lead: int) -> NamedArray:
    rng = np.random.default_rng(0)
    return NamedArray({"obs": rng.standard_normal((*lead, 4)).astype(np.float32),
                       "extra": rng.standard_normal((*lead, 2, 3)).astype(np.float32)})


@pytest.mark.parametrize("name", SPACES)
def test_rollout_and_analyze_agree(name):
    space = SPACES[name]
    policy = ActorCriticPolicy(OBS_SPACE, space, hidden=[16, 16])
    out = policy.rollout(obs_batch(5), NamedArray())
    assert out[keys.ACTION].shape == (5, *space.shape)
    assert out[keys.LOGPROB].shape == out[keys.VALUE].shape == (5,)
    assert all(space.contains(a.astype(space.dtype)) for a in out[keys.ACTION]) or name == "box"
    analysis = policy.analyze({keys.OBS: {k: torch.as_tensor(v) for k, v in obs_batch(5).items_flat()},
                               keys.ACTION: torch.as_tensor(out[keys.ACTION])})
    np.testing.assert_allclose(analysis.logprob.detach().numpy(), out[keys.LOGPROB], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(analysis.value.detach().numpy(), out[keys.VALUE], rtol=1e-5, atol=1e-5)
    assert analysis.entropy.shape == (5,)
    without = policy.analyze({keys.OBS: {k: torch.as_tensor(v) for k, v in obs_batch(5).items_flat()},
                              keys.ACTION: torch.as_tensor(out[keys.ACTION])}, entropy=False)
    assert without.entropy is None
    torch.testing.assert_close(without.logprob, analysis.logprob)


@pytest.mark.parametrize("name", SPACES)
def test_numpy_acting_is_the_torch_nets_and_follows_training(name):
    """Acting runs in NumPy (srl/models/numpy_forward.py): the same modes, log-probs and values
    as the torch net's, with normalised inputs and a critic of its own inputs, after the
    statistics and the weights change; and samples drawn from the net's distribution."""
    torch.manual_seed(0)
    policy = ActorCriticPolicy(OBS_SPACE, SPACES[name], hidden=[16, 8], obs_norm=True, critic_inputs=["extra"])
    assert policy._numpy is not None
    obs = obs_batch(64)

    def acts_as_the_net() -> None:
        ours = policy.rollout(obs, NamedArray(), deterministic=True)
        torch_ = policy._torch_rollout(obs, NamedArray(), deterministic=True)
        for k in (keys.ACTION, keys.LOGPROB, keys.VALUE):
            assert ours[k].dtype == torch_[k].dtype and ours[k].shape == torch_[k].shape, k
            np.testing.assert_allclose(ours[k], torch_[k], rtol=1e-5, atol=1e-5, err_msg=k)

    acts_as_the_net()
    policy.update_statistics(NamedArray({k: 3 * v + 1 for k, v in obs_batch(100).items()}))
    acts_as_the_net()
    ppo = PPO(policy, PPOConfig(lr=0.05, epochs=1, minibatches=1))  # fused Adam
    before = policy.rollout(obs, NamedArray(), deterministic=True)[keys.VALUE]
    batch = sample_batch(policy)
    batch[keys.REWARD] = np.random.default_rng(1).standard_normal(batch[keys.TERMINATED].shape).astype(np.float32)
    ppo.step(batch)
    assert not np.allclose(policy.rollout(obs, NamedArray(), deterministic=True)[keys.VALUE], before)
    acts_as_the_net()
    policy.net = copy.deepcopy(policy.net)  # a net replaced after construction acts through torch
    with torch.no_grad():
        policy.net.value_head.bias.add_(1.0)
    acts_as_the_net()

    # Sampling: 20,000 draws on one observation follow the net's distribution.
    one = obs[:1].map(lambda x: np.repeat(x, 20_000, 0))
    action = policy.rollout(one, NamedArray())[keys.ACTION]
    with torch.no_grad():
        dists, _, _ = policy.net({k: torch.as_tensor(v) for k, v in one[:1].items()})
    if name == "box":
        np.testing.assert_allclose(action.mean(0), dists[0].mean[0].numpy(), atol=0.03)
        np.testing.assert_allclose(action.std(0), dists[0].log_std.exp().detach().numpy(), rtol=0.03)
    else:
        columns = action.reshape(len(action), -1)
        for i, dist in enumerate(dists):
            frequencies = np.bincount(columns[:, i], minlength=dist.logp.shape[-1]) / len(action)
            np.testing.assert_allclose(frequencies, dist.logp[0].exp().numpy(), atol=0.015)


def test_the_critic_reuses_the_actors_flattened_inputs_exactly():
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[16, 16], share_encoder=False)
    net = policy.net
    assert net.critic_encoder is None and not net.critic_shares_actor
    obs = {k: torch.as_tensor(v) for k, v in obs_batch(5).items_flat()}
    with torch.no_grad():
        _, value, _ = net(obs)
        flatten = ENCODERS["flatten"]({k: OBS_SPACE[k] for k in net.critic_inputs})
        own = flatten({k: obs[k] for k in net.critic_inputs})  # what it would compute
        expected = net.value_head(net.critic(own)).squeeze(-1)
    torch.testing.assert_close(value, expected)
    # A critic that reads other inputs encodes its own.
    other = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[16], critic_inputs=["extra"])
    assert other.net.critic_encoder is not None


def test_params_round_trip_between_policies():
    a = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"])
    b = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"])
    b.set_params(a.get_params(), version=7)
    assert b.version == 7
    x = obs_batch(3)
    np.testing.assert_array_equal(a.rollout(x, NamedArray(), deterministic=True)[keys.ACTION],
                                  b.rollout(x, NamedArray(), deterministic=True)[keys.ACTION])


def test_gae_bootstraps_truncation_but_not_termination():
    reward = np.array([[1.0, 1.0], [1.0, 1.0]], np.float32)
    value = np.array([[0.5, 0.5], [0.5, 0.5], [2.0, 2.0]], np.float32)
    terminated = np.array([[False, False], [True, False]])
    truncated = np.array([[False, False], [False, True]])
    adv, ret = gae(reward, value, terminated, truncated, gamma=0.9, lam=1.0)
    # column 0 terminates after step 1: return = 1 + 0.9 * 1
    assert ret[0, 0] == pytest.approx(1 + 0.9 * 1)
    assert ret[1, 0] == pytest.approx(1.0)
    # column 1 is truncated after step 1: bootstrap from V(s_1) = 0.5, not from the next row's 2.0
    assert ret[1, 1] == pytest.approx(1 + 0.9 * 0.5)
    assert ret[0, 1] == pytest.approx(1 + 0.9 * (1 + 0.9 * 0.5))
    np.testing.assert_allclose(adv, ret - value[:2])


def sample_batch(policy: ActorCriticPolicy, T: int = 8, B: int = 6, obs: NamedArray | None = None) -> NamedArray:
    """Rows acted by `policy` (on `obs` [T + 1, B, ...], or fixed random ones); action 0 earns 1."""
    obs = obs_batch(T + 1, B) if obs is None else obs
    out = policy.rollout(obs.map(lambda x: x.reshape(-1, *x.shape[2:])), NamedArray())
    batch = NamedArray({keys.OBS: obs})
    for k in (keys.ACTION, keys.LOGPROB, keys.VALUE):
        batch[k] = out[k].reshape(T + 1, B, *out[k].shape[1:])
    # reward 1 for action 0: PPO should make action 0 more likely
    batch[keys.REWARD] = (batch[keys.ACTION] == 0).astype(np.float32)
    batch[keys.TERMINATED] = np.zeros((T + 1, B), bool)
    batch[keys.TRUNCATED] = np.zeros((T + 1, B), bool)
    batch[keys.VERSION] = np.full((T + 1, B), policy.version, np.int64)
    return batch


@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clip_grad_norm_matches_torch(max_norm):
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(64, 4, generator=g), torch.randn(64, generator=g), torch.randn(2, 64, generator=g)]
    ours = [torch.zeros_like(x, requires_grad=True) for x in grads] + [torch.zeros(3, requires_grad=True)]
    theirs = [torch.zeros_like(x, requires_grad=True) for x in grads]
    for group in (ours, theirs):
        for p, grad in zip(group, grads):
            p.grad = grad.clone()
    # (the last of ours has no gradient: a parameter the loss did not reach)
    clip_grad_norm(ours, max_norm)
    torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)
    assert ours[-1].grad is None
    if max_norm < 1:  # clipped: the joint norm is now max_norm
        total = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in ours[:-1]]))
        torch.testing.assert_close(total, torch.tensor(max_norm), rtol=1e-4, atol=0)


def test_ppo_step_learns_the_rewarded_action():
    torch.manual_seed(0)
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[32])
    ppo = PPO(policy, PPOConfig(lr=3e-3, epochs=4, minibatches=2, value_clip=0.2, entropy_coef=0.01))
    probe = obs_batch(64)
    before = (policy.rollout(probe, NamedArray())[keys.ACTION] == 0).mean()
    for _ in range(30):
        stats = ppo.step(sample_batch(policy))
    after = np.mean([(policy.rollout(probe, NamedArray())[keys.ACTION] == 0).mean() for _ in range(5)])
    assert policy.version == 30
    assert {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"} <= stats.keys()
    assert after > max(before, 0.34) + 0.3, (before, after)


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_ppo_reports_the_entropy_with_or_without_a_bonus(entropy_coef):
    torch.manual_seed(0)
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[16])
    stats = PPO(policy, PPOConfig(epochs=2, minibatches=3, entropy_coef=entropy_coef)).step(sample_batch(policy))
    # A fresh policy's output layer starts near zero: close to uniform over 3 actions.
    assert stats["entropy"] == pytest.approx(np.log(3), abs=0.05)


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"])
    ppo = PPO(policy, PPOConfig())
    for version in range(1, 6):
        policy.version = version
        checkpoint.save(tmp_path, version, {"policy": policy.state_dict(), "algorithm": ppo.state_dict()},
                        {"env_steps": version * 100}, keep=2)
    assert [p.name for p in sorted(tmp_path.glob("ckpt-*.pt"))] == ["ckpt-000000004.pt", "ckpt-000000005.pt"]
    assert not list(tmp_path.glob(".*tmp"))
    latest = checkpoint.latest(tmp_path)
    info = checkpoint.info(latest)
    assert info["version"] == 5 and info["env_steps"] == 500 and len(info["sha256"]) == 64
    restored = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"])
    restored.load_state_dict(checkpoint.load(latest)["policy"])
    assert restored.version == 5
    for (_, a), (_, b) in zip(policy.get_params().items_flat(), restored.get_params().items_flat()):
        np.testing.assert_array_equal(a, b)


def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"])
    for version in (1, 2, 3):
        checkpoint.save(tmp_path, version, {"policy": policy.state_dict()}, {"env_steps": version}, keep=3)
    newest = tmp_path / "ckpt-000000003.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte
    newest.write_bytes(bytes(data))
    assert checkpoint.latest(tmp_path).name == "ckpt-000000002.pt"
    (tmp_path / "ckpt-000000002.pt").write_bytes(b"truncated")
    assert checkpoint.latest(tmp_path).name == "ckpt-000000001.pt"
    (tmp_path / "ckpt-000000001.json").unlink()
    assert checkpoint.latest(tmp_path) is None


def test_entity_attention_ignores_masked_entities_and_entity_order():
    from srl.models.entity_attention import EntityAttentionEncoder

    spaces = gym.spaces.Dict({
        "self": gym.spaces.Box(-1, 1, (5,), np.float32),
        "boxes": gym.spaces.Box(-1, 1, (4, 3), np.float32),
        "boxes_visible": gym.spaces.Box(0, 1, (4,), np.bool_),
    })
    torch.manual_seed(0)
    encoder = EntityAttentionEncoder(spaces.spaces, width=16, heads=2)
    rng = np.random.default_rng(0)
    obs = {"self": torch.as_tensor(rng.standard_normal((2, 5)), dtype=torch.float32),
           "boxes": torch.as_tensor(rng.standard_normal((2, 4, 3)), dtype=torch.float32),
           "boxes_visible": torch.tensor([[True, True, False, False]] * 2)}
    out = encoder(obs)
    assert out.shape == (2, encoder.out_dim)
    hidden = dict(obs, boxes=obs["boxes"].clone())
    hidden["boxes"][:, 2:] = 99.0  # what an agent cannot see cannot change what it does
    torch.testing.assert_close(encoder(hidden), out)
    swapped = dict(obs, boxes=obs["boxes"][:, [1, 0, 2, 3]])
    torch.testing.assert_close(encoder(swapped), out, rtol=1e-5, atol=1e-5)
    policy = ActorCriticPolicy(spaces, gym.spaces.MultiDiscrete([11, 11, 11, 2, 2]), encoder="entity_attention",
                               hidden=[32])
    batch = NamedArray({k: v.numpy() for k, v in obs.items()})
    assert policy.rollout(batch, NamedArray())[keys.ACTION].shape == (2, 5)


def _stale_batches(steps_behind: int = 6):
    """A policy, and a batch its own version from `steps_behind` updates ago sampled (as an
    asynchronous actor hands its trainer), the policy since trained on fresh ones."""
    torch.manual_seed(0)
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[32])
    behind = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[32])
    behind.net.load_state_dict(policy.net.state_dict())
    ppo = PPO(policy, PPOConfig(lr=3e-3, epochs=4, minibatches=2))
    stale = sample_batch(behind, T=16, B=8)
    for _ in range(steps_behind):
        ppo.step(sample_batch(policy))
    return policy, stale


@pytest.mark.parametrize("decoupled", [False, True])
def test_decoupled_ppo_on_fresh_rows_is_ppo(decoupled):
    """Rows the learner's own policy just sampled: the proximal policy is the actors', every weight 1."""
    torch.manual_seed(0)
    policy = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[16])
    batch = sample_batch(policy)
    stats = PPO(policy, PPOConfig(epochs=1, minibatches=1, decoupled=decoupled)).step(batch)
    reference = {"decoupled": decoupled, **stats}
    torch.manual_seed(0)
    again = ActorCriticPolicy(OBS_SPACE, SPACES["discrete"], hidden=[16])
    other = PPO(again, PPOConfig(epochs=1, minibatches=1, decoupled=not decoupled)).step(sample_batch(again))
    for name in ("policy_loss", "value_loss", "clip_fraction"):
        assert other[name] == pytest.approx(reference[name], abs=1e-6), (name, reference, other)
    for a, b in zip(policy.parameters(), again.parameters()):
        torch.testing.assert_close(a, b)


def test_decoupled_ppo_clips_stale_rows_around_the_learner_not_the_actors():
    """Rows sampled several versions ago: clipped around the actors' policy many start out
    clipped; around the learner's, the first epoch starts unclipped."""
    policy, stale = _stale_batches()
    import copy

    plain, decoupled = copy.deepcopy(policy), copy.deepcopy(policy)
    one_step = dict(lr=1e-9, epochs=1, minibatches=1)  # (a step too small to move the policy)
    plain_stats = PPO(plain, PPOConfig(**one_step)).step(stale)
    decoupled_stats = PPO(decoupled, PPOConfig(**one_step, decoupled=True)).step(stale)
    assert plain_stats["clip_fraction"] > 0.2, plain_stats
    assert decoupled_stats["clip_fraction"] == 0.0 and decoupled_stats["approx_kl"] < 1e-6, decoupled_stats
