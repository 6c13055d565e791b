"""The Q-network policy: epsilon-greedy acting and its schedules, dueling heads, weights on the
wire, recurrent unrolls that reproduce acting, and the exported greedy module."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.api.env import spaces_of
from srl.api.registry import POLICIES
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.gym import GymEnv
from srl.models.q_network import QNetworkPolicy

SPACE = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-1, 1, (3,), np.float32)})
ACTIONS = 4


def observations(*lead: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (*lead, 3)).astype(np.float32)


def policy(**args) -> QNetworkPolicy:
    torch.manual_seed(0)
    return QNetworkPolicy(SPACE, gym.spaces.Discrete(ACTIONS), **{"hidden": [16], **args})


def test_rollout_on_cartpole_spaces_has_the_interface_shapes_and_dtypes():
    env = GymEnv(id="CartPole-v1")
    obs_space, action_space = spaces_of(env)
    env.close()
    q = POLICIES.resolve("q_network")(obs_space, action_space)
    out = q.rollout(NamedArray({keys.OBS: np.zeros((5, 4), np.float32)}), q.initial_state(5))
    assert out[keys.ACTION].shape == (5,) and out[keys.ACTION].dtype == np.int64
    assert out[keys.LOGPROB].shape == (5,) and out[keys.LOGPROB].dtype == np.float32
    assert out[keys.VALUE].shape == (5,) and out[keys.VALUE].dtype == np.float32
    assert keys.RNN_STATE not in out and not q.initial_state(5).paths()
    assert set(out[keys.ACTION]) <= {0, 1}


def test_epsilon_anneals_over_acted_rows_and_deterministic_acting_is_greedy():
    q = policy(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100)
    obs = NamedArray({keys.OBS: observations(50)})
    greedy = q.q_values({keys.OBS: {keys.OBS: obs[keys.OBS]}}).argmax(-1).numpy()
    # A copy no actor acts with (srl evaluate's) explores as a trained policy does ...
    assert q.epsilon == pytest.approx(0.1)
    q.acting_as(0, 1)  # ... an actor's copy anneals from the start
    assert q.epsilon == 1.0
    # Epsilon 1: uniform actions over every action, each with probability 1 / A.
    out = q.rollout(obs, q.initial_state(50))
    assert set(out[keys.ACTION]) == set(range(ACTIONS))
    np.testing.assert_allclose(out[keys.LOGPROB], np.log(1 / ACTIONS), rtol=1e-6)
    assert q.epsilon == pytest.approx(0.55)
    for _ in range(3):  # deterministic calls neither explore nor advance the schedule
        out = q.rollout(obs, q.initial_state(50), deterministic=True)
        np.testing.assert_array_equal(out[keys.ACTION], greedy)
        np.testing.assert_array_equal(out[keys.LOGPROB], 0)
    assert q.epsilon == pytest.approx(0.55)
    q.rollout(obs, q.initial_state(50))
    q.rollout(obs, q.initial_state(50))
    assert q.epsilon == pytest.approx(0.1)  # and it stays there
    # Epsilon 0: always the argmax of q_values.
    zero = policy(epsilon_start=0.0, epsilon_end=0.0)
    out = zero.rollout(obs, zero.initial_state(50))
    np.testing.assert_array_equal(out[keys.ACTION], greedy)
    np.testing.assert_array_equal(out[keys.LOGPROB], 0)
    np.testing.assert_allclose(out[keys.VALUE], zero.q_values({keys.OBS: {keys.OBS: obs[keys.OBS]}}).max(-1).values.detach(),
                               rtol=1e-5, atol=1e-6)  # (acting rounds as NumPy does)


def test_each_copy_explores_with_its_own_stream_and_a_seed_repeats_them():
    def explored(copies):
        obs = NamedArray({keys.OBS: observations(256)})
        for q in copies:
            q.acting_as(0, 1)  # epsilon 1: every action is the exploration stream's
        return [q.rollout(obs, NamedArray())[keys.ACTION] for q in copies]

    torch.manual_seed(5)
    first, second = explored([QNetworkPolicy(SPACE, gym.spaces.Discrete(ACTIONS), epsilon_start=1.0) for _ in range(2)])
    assert (first != second).mean() > 0.5  # two copies in one process (a policy worker and its opponent, say)
    torch.manual_seed(5)
    again = explored([QNetworkPolicy(SPACE, gym.spaces.Discrete(ACTIONS), epsilon_start=1.0) for _ in range(2)])
    assert (again[0] == first).all() and (again[1] == second).all()


def test_apex_gives_each_actor_a_fixed_epsilon():
    epsilons = []
    for actor in range(8):
        q = policy(epsilon_end=0.4, apex_alpha=7.0)
        q.acting_as(actor, 8)
        q.rollout(NamedArray({keys.OBS: observations(10)}), q.initial_state(10))  # no annealing
        epsilons.append(q.epsilon)
    assert epsilons[0] == pytest.approx(0.4) and epsilons[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in itertools.pairwise(epsilons))
    single = policy(epsilon_end=0.4, apex_alpha=7.0)
    single.acting_as(0, 1)
    assert single.epsilon == pytest.approx(0.4)
    annealing = policy(epsilon_start=0.9)
    annealing.acting_as(3, 8)  # without apex_alpha every actor anneals alike
    assert annealing.epsilon == pytest.approx(0.9)


def test_dueling_advantages_are_mean_centred():
    q = policy(dueling=True)
    values = []
    q.net.value.register_forward_hook(lambda module, args, out: values.append(out))
    qs = q.q_values({keys.OBS: {keys.OBS: observations(7, 3)}})
    assert qs.shape == (7, 3, ACTIONS)
    torch.testing.assert_close(qs.mean(-1), values[0].reshape(7, 3), atol=1e-6, rtol=0)


def test_q_values_are_differentiable_and_params_round_trip():
    q = policy(dueling=False)
    qs = q.q_values({keys.OBS: {keys.OBS: torch.as_tensor(observations(6))}})
    qs.max(-1).values.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in q.parameters())
    other = policy(dueling=False)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    batch = {keys.OBS: {keys.OBS: observations(6)}}
    assert not torch.allclose(other.q_values(batch), q.q_values(batch))
    other.set_params(q.get_params(), version=3)
    assert other.version == 3
    torch.testing.assert_close(other.q_values(batch), q.q_values(batch))


@pytest.mark.parametrize("dueling, activation", [(True, "relu"), (False, "tanh")])
def test_numpy_acting_matches_the_torch_net_and_follows_its_weights(dueling, activation):
    """Acting runs in NumPy (srl/models/numpy_forward.py): its values and greedy actions are the
    net's, after optimizer steps, loaded parameters and a move to shared memory alike."""
    q = policy(dueling=dueling, activation=activation, hidden=[16, 8])
    assert q._numpy is not None
    obs = NamedArray({keys.OBS: observations(200)})

    def acts_as_the_net() -> None:
        out = q.rollout(obs, q.initial_state(200), deterministic=True)
        with torch.no_grad():
            qs = q.q_values({keys.OBS: {keys.OBS: obs[keys.OBS]}}).numpy()
        np.testing.assert_allclose(out[keys.VALUE], qs.max(-1), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out[keys.ACTION], qs.argmax(-1))

    acts_as_the_net()
    before = q.rollout(obs, q.initial_state(200), deterministic=True)[keys.VALUE]
    optimizer = torch.optim.Adam(q.parameters(), lr=0.5, fused=True)  # as the algorithms' (writes uncounted)
    q.q_values({keys.OBS: {keys.OBS: torch.as_tensor(observations(8))}}).pow(2).sum().backward()
    optimizer.step()
    assert not np.allclose(q.rollout(obs, q.initial_state(200), deterministic=True)[keys.VALUE], before)
    acts_as_the_net()
    q.set_params(policy(dueling=dueling, activation=activation, hidden=[16, 8]).get_params(), version=1)
    acts_as_the_net()
    q.net.share_memory()
    with torch.no_grad():
        for p in q.parameters():
            p.mul_(-1.0)
    acts_as_the_net()


def test_lstm_unroll_reproduces_step_by_step_acting():
    q = policy(lstm=8)
    T, B = 6, 5
    obs = observations(T, B)
    starts = np.zeros((T, B), bool)
    starts[3, 1] = starts[2, 4] = True
    state = q.initial_state(B)
    first, values = state.copy(), []
    for t in range(T):
        if starts[t].any():  # as the env ring does at a reset
            state[np.flatnonzero(starts[t])] = q.initial_state(int(starts[t].sum()))
        out = q.rollout(NamedArray({keys.OBS: obs[t]}), state)
        values.append(out[keys.VALUE])
        state = out[keys.RNN_STATE]
    batch = {keys.OBS: {keys.OBS: obs}, keys.RNN_STATE: first, keys.EPISODE_START: starts}
    np.testing.assert_allclose(q.q_values(batch).max(-1).values.detach().numpy(), np.stack(values), atol=1e-5)
    ignored = q.q_values({**batch, keys.EPISODE_START: np.zeros((T, B), bool)}).max(-1).values.detach().numpy()
    assert not np.isclose(ignored[3, 1], values[3][1], atol=1e-5)
    action = torch.as_tensor(np.zeros((T, B), np.int64))
    analysis = q.analyze({**batch, keys.ACTION: action})
    assert analysis.logprob.shape == analysis.value.shape == (T, B) and analysis.entropy is None
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        q.q_values({**batch, keys.OBS: {keys.OBS: obs[0]}})


def test_non_discrete_action_spaces_are_refused():
    with pytest.raises(ValueError, match="Discrete.*Box"):
        QNetworkPolicy(SPACE, gym.spaces.Box(-1, 1, (2,), np.float32))


@pytest.mark.parametrize("lstm", [0, 8])
def test_acting_module_matches_deterministic_rollout(lstm):
    q = policy(lstm=lstm)
    obs = observations(9)
    state = q.initial_state(9).map(lambda x: x + 0.3)  # a state mid-episode (empty without an LSTM)
    out = q.rollout(NamedArray({keys.OBS: obs}), state, deterministic=True)
    module = q.acting_module()
    with torch.no_grad():
        result = module(torch.as_tensor(obs), *(torch.as_tensor(v) for _, v in state.items_flat()))
    action = result[0] if lstm else result
    np.testing.assert_array_equal(action.numpy(), out[keys.ACTION])
    if lstm:
        np.testing.assert_allclose(result[1].numpy(), out[keys.RNN_STATE]["h"], atol=1e-6)
