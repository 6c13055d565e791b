"""MuZero (srl/algorithms/muzero.py, srl/models/muzero.py): the learner's targets from stored
searches, the buffers keeping them, the learner fitting values from replay, and the worker graph."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import train_inline

from srl.algorithms.muzero import MuZero, MuZeroConfig, movers
from srl.api.agents import DEFAULT_POLICY
from srl.api.components import make_env
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slots import EnvSlot
from srl.models.muzero import MuZeroPolicy, scalar_to_support, support_to_scalar
from srl.replay.buffer import ReplayBuffer
from srl.workers.env_ring import EnvRing
from srl.workers.reanalyse import reanalyse

OBS_SPACE = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-5, 5, (4,), np.float32)})


def _muzero(discount: float = 0.99, **args) -> MuZero:
    policy = MuZeroPolicy(OBS_SPACE, gym.spaces.Discrete(2), state=16, hidden=[32], support=10, discount=discount)
    return MuZero(policy, MuZeroConfig(**args))


def _segment(terminated_at=None, truncated_at=None, T: int = 6) -> NamedArray:
    """One env's rows 0..T: rewards 1, searched values 10, 20, ..., an episode end where asked."""
    rows = NamedArray({keys.REWARD: np.ones((T + 1, 1), np.float32),
                       keys.TERMINATED: np.zeros((T + 1, 1), bool), keys.TRUNCATED: np.zeros((T + 1, 1), bool),
                       keys.VALUE: (10.0 * np.arange(1, T + 2, dtype=np.float32))[:, None],
                       keys.SEARCH_POLICY: np.stack([np.linspace(0, 1, T + 1), np.linspace(1, 0, T + 1)], -1)[:, None]})
    if terminated_at is not None:
        rows[keys.TERMINATED][terminated_at] = True
    if truncated_at is not None:
        rows[keys.TRUNCATED][truncated_at] = True
    return rows


def test_value_targets_sum_n_rewards_then_bootstrap_from_the_searched_value_and_stop_at_a_terminal():
    muzero = _muzero(discount=0.5, unroll_steps=2, td_steps=2)
    t = muzero.targets(_segment(terminated_at=2))
    # Row values z_t (td 2, gamma 0.5): 1 + 0.5 + 0.25 v_2 = 9 | 1 + 0.5 (ends at row 2) | 1 |
    # 1 + 0.5 + 0.25 v_5 = 16.5 | 1 + 0.5 + 0.25 v_6 = 19 | 1 + 0.5 v_6 (the segment's last row) = 36.
    assert t["value"][:, 0].tolist() == [[9.0, 1.5, 1.0], [1.5, 1.0, 0.0], [1.0, 0.0, 0.0], [16.5, 19.0, 36.0]]
    # Step k's reward is row t + k - 1's: it counts up to the terminal step, 0 after it.
    assert t["reward"][:, 0].tolist() == [[0, 1, 1], [0, 1, 1], [0, 1, 0], [0, 1, 1]]
    assert t["policy_mask"][:, 0].tolist() == [[True] * 3, [True, True, False], [True, False, False], [True] * 3]
    assert np.allclose(t["policy"][3, 0, 2], _segment()[keys.SEARCH_POLICY][5, 0])  # start 3, step 2: row 5's search
    assert t["known"].all()


def test_past_a_truncation_nothing_is_a_target():
    t = _muzero(unroll_steps=2, td_steps=2).targets(_segment(truncated_at=3))
    # The episode was cut after row 3's step: row 4 starts another, unseen from row 3's side.
    assert t["known"][:, 0].tolist() == [[True] * 3, [True] * 3, [True, True, False], [True, False, False]]


def test_two_players_values_are_the_movers_and_flip_sign_every_ply():
    policy = MuZeroPolicy(OBS_SPACE, gym.spaces.Discrete(2), state=16, hidden=[32], support=10, discount=1.0,
                          two_player=True)
    muzero = MuZero(policy, MuZeroConfig(unroll_steps=1, td_steps=5))
    # The mover of row 2 wins: +1 to it, the game over. Rows 0 and 2 are one player's moves, row 1 the other's.
    segment = _segment(terminated_at=2, T=4)
    segment[keys.REWARD][:] = 0
    segment[keys.REWARD][2] = 1
    assert muzero.targets(segment)["value"][:, 0, 0].tolist() == [1.0, -1.0, 1.0]


def test_random_moves_are_legal_and_at_their_rate_and_deterministic_acting_has_none():
    space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-5, 5, (4,), np.float32),
                             keys.ACTION_MASK: gym.spaces.Box(0, 1, (5,), np.int8)})
    rows = 400
    mask = np.zeros((rows, 5), np.int8)
    mask[:, [1, 2, 4]] = 1
    obs = NamedArray({keys.OBS: np.zeros((rows, 4), np.float32), keys.ACTION_MASK: mask})
    # No root noise and temperature 0: the search's move is its most visited, the same every time.
    kept = MuZeroPolicy(space, gym.spaces.Discrete(5), state=16, hidden=[16], support=5, simulations=4,
                        temperature=0.0, exploration_fraction=0.0)
    searched = kept.rollout(obs, NamedArray())
    policy = MuZeroPolicy(space, gym.spaces.Discrete(5), state=16, hidden=[16], support=5, simulations=4,
                          temperature=0.0, exploration_fraction=0.0, random_moves=0.5)
    policy.load_state_dict(kept.state_dict())
    acted = policy.rollout(obs, NamedArray())
    assert set(acted[keys.ACTION].tolist()) == {1, 2, 4}  # only legal ones, and all of them
    # Half the rows move at random, and two of their three legal moves are not the search's: a third change.
    changed = (acted[keys.ACTION] != searched[keys.ACTION]).mean()
    assert 0.25 < changed < 0.42
    # The search's targets stay what the search found, whatever move is played.
    assert acted[keys.SEARCH_POLICY].shape == (rows, 5) and (acted[keys.SEARCH_POLICY][:, [0, 3]] == 0).all()
    greedy = policy.rollout(obs, NamedArray(), deterministic=True)[keys.ACTION]
    assert np.array_equal(greedy, kept.rollout(obs, NamedArray(), deterministic=True)[keys.ACTION])


def test_a_turn_based_games_rows_become_its_movers_alternating_moves():
    T1, G = 6, 2
    waiting = np.array([1, 0, 0], np.int8)  # a player waiting for its turn may only pass (action 0)
    mover_of_row = [0, 1, 0, 1, 0, 1]
    mask = np.tile(waiting, (T1, 1, G, 1))
    for t, mover in enumerate(mover_of_row):
        mask[t, 0, mover] = [1, 1, 1]
    mask[0, 0, 0] = mask[3, 0, 1] = [1, 0, 0]  # a mover with one legal move left looks like the waiting player
    obs = 10 * np.arange(T1)[:, None, None] + np.arange(G)[None, None, :]  # row t, agent g: 10 t + g
    rows = NamedArray({keys.OBS: {keys.OBS: obs.astype(np.float32), keys.ACTION_MASK: mask},
                       keys.REWARD: np.zeros((T1, 1, G), np.float32), keys.TERMINATED: np.zeros((T1, 1, G), bool),
                       keys.TRUNCATED: np.zeros((T1, 1, G), bool)})
    played = movers(rows)
    assert played[keys.OBS][keys.OBS][:, 0, 0].tolist() == [10 * t + g for t, g in enumerate(mover_of_row)]
    assert played[keys.REWARD].shape == (T1, 1, 1)


def test_the_buffer_keeps_the_search_fields_the_learner_reads_and_names_one_missing():
    T, envs = 8, 3
    rng = np.random.default_rng(0)
    trajectory = NamedArray({keys.OBS: {keys.OBS: rng.standard_normal((T + 1, envs, 4)).astype(np.float32)},
                             keys.ACTION: rng.integers(0, 2, (T + 1, envs)),
                             keys.REWARD: np.ones((T + 1, envs), np.float32),
                             keys.TERMINATED: np.zeros((T + 1, envs), bool),
                             keys.TRUNCATED: np.zeros((T + 1, envs), bool), keys.ALIVE: np.ones((T + 1, envs), bool),
                             keys.VALUE: rng.random((T + 1, envs), np.float32),
                             keys.SEARCH_POLICY: rng.random((T + 1, envs, 2), np.float32)})
    buffer = ReplayBuffer(100, T, unit="sequence", also_store=MuZero.searched)
    buffer.insert(trajectory)
    batch = buffer.sample(4, 2)
    assert batch[keys.SEARCH_POLICY].shape == (2, T + 1, 4, 1, 2) and batch[keys.VALUE].shape == (2, T + 1, 4, 1)
    column = batch[keys.REPLAY_INDEX][0, 0]
    assert np.array_equal(batch[keys.SEARCH_POLICY][0, :, 0, 0], trajectory[keys.SEARCH_POLICY][:, column])
    plain = ReplayBuffer(100, T, unit="sequence")
    plain.insert(trajectory)
    assert keys.SEARCH_POLICY not in plain.sample(4)  # value-based learners do not pay for them
    del trajectory[keys.SEARCH_POLICY]
    with pytest.raises(ValueError, match=r"reads \['search_policy'\] from stored trajectories"):
        buffer.insert(trajectory)


def _searched_trajectory(T: int, envs: int, seed: int = 0) -> NamedArray:
    rng = np.random.default_rng(seed)
    return NamedArray({keys.OBS: {keys.OBS: rng.standard_normal((T + 1, envs, 4)).astype(np.float32)},
                       keys.ACTION: rng.integers(0, 2, (T + 1, envs)), keys.REWARD: np.ones((T + 1, envs), np.float32),
                       keys.TERMINATED: np.zeros((T + 1, envs), bool), keys.TRUNCATED: np.zeros((T + 1, envs), bool),
                       keys.ALIVE: np.ones((T + 1, envs), bool), keys.VERSION: np.zeros((T + 1, envs), np.int64),
                       keys.VALUE: rng.random((T + 1, envs), np.float32),
                       keys.SEARCH_POLICY: rng.random((T + 1, envs, 2), np.float32)})


def test_reanalyse_searches_every_stored_row_again_and_the_buffer_keeps_what_it_found():
    T, envs = 6, 4
    buffer = ReplayBuffer(8 * T, T, unit="sequence", also_store=MuZero.searched, seed=1)
    trajectory = _searched_trajectory(T, envs)
    buffer.insert(trajectory)
    drawn = buffer.sample(3)
    batch = NamedArray({k: drawn[k][0] for k in (keys.OBS, keys.ALIVE, keys.VERSION, keys.REPLAY_INDEX)})
    policy = _muzero().policy
    fresh = reanalyse(policy, batch)
    assert fresh[keys.VALUE].shape == (T + 1, 3, 1) and fresh[keys.SEARCH_POLICY].shape == (T + 1, 3, 1, 2)
    assert np.allclose(fresh[keys.SEARCH_POLICY].sum(-1), 1.0)  # visit distributions of a search from every row
    assert buffer.refresh(fresh[keys.REPLAY_INDEX], NamedArray({k: fresh[k] for k in MuZero.searched})) == 3
    last_column = {serial: column for column, serial in enumerate(fresh[keys.REPLAY_INDEX].tolist())}  # drawn twice: last wins
    for serial, column in last_column.items():
        assert np.array_equal(buffer.store[keys.VALUE][serial, :, 0], fresh[keys.VALUE][:, column, 0])
        assert np.array_equal(buffer.store[keys.SEARCH_POLICY][serial, :, 0], fresh[keys.SEARCH_POLICY][:, column, 0])
    untouched = sorted(set(range(envs)) - set(fresh[keys.REPLAY_INDEX].tolist()))
    for serial in untouched:
        assert np.array_equal(buffer.store[keys.VALUE][serial, :, 0], trajectory[keys.VALUE][:, serial])
    # Sequences overwritten since they were drawn are not touched; fields the buffer does not keep are refused.
    for seed in range(2):
        buffer.insert(_searched_trajectory(T, envs, seed=seed + 1))
    assert buffer.refresh(fresh[keys.REPLAY_INDEX], NamedArray({k: fresh[k] for k in MuZero.searched})) == 0
    with pytest.raises(ValueError, match=r"cannot refresh \['reward'\]"):
        buffer.refresh(fresh[keys.REPLAY_INDEX], NamedArray({keys.REWARD: fresh[keys.VALUE]}))


def test_values_and_rewards_round_trip_through_their_categorical_supports():
    x = torch.tensor([-30.0, -1.0, 0.0, 0.4, 3.0, 97.0])
    two_hot = scalar_to_support(x, 10)
    assert torch.allclose(two_hot.sum(-1), torch.ones(6)) and ((two_hot > 0).sum(-1) <= 2).all()
    assert torch.allclose(support_to_scalar(torch.log(two_hot + 1e-12), 10), x, atol=1e-3)


def test_the_learner_fits_the_values_of_replayed_cartpole_play():
    """Random play on CartPole into a sequence buffer; 300 updates later the predicted value of a
    stored row tracks its target (the discounted steps left, up to 10, bootstrapped from 0)."""
    torch.manual_seed(0)
    muzero = _muzero(lr=0.003, unroll_steps=3, td_steps=10, value_loss_weight=1.0)
    slot = EnvSlot([make_env({"type": "gym", "id": "CartPole-v1"}) for _ in range(8)], list(range(8)))
    ring, rng = EnvRing([slot], 16), np.random.default_rng(0)
    buffer = ReplayBuffer(20_000, 16, unit="sequence", alpha=0.6, beta=0.4, also_store=MuZero.searched)
    request = ring.start(0)[DEFAULT_POLICY]
    while buffer.env_steps < 5_000:
        n = len(request[keys.OBS][keys.OBS])
        reply = NamedArray({keys.ACTION: rng.integers(0, 2, n), keys.LOGPROB: np.zeros(n, np.float32),
                            keys.VALUE: np.zeros(n, np.float32), keys.SEARCH_POLICY: np.full((n, 2), 0.5, np.float32)})
        requests, trajectories = ring.step(0, {DEFAULT_POLICY: reply})
        request = requests[DEFAULT_POLICY]
        if trajectories:
            buffer.insert(trajectories[DEFAULT_POLICY])
    for _ in range(75):
        batch = buffer.sample(16, 4)
        stats = muzero.step(batch)
        assert muzero.priorities().shape == (4, 16) and (muzero.priorities() >= 0).all()
        buffer.update_priorities(batch[keys.REPLAY_INDEX], muzero.priorities())
    assert muzero.policy.version == 75 and stats["updates"] == 300
    rows = buffer.sample(64)[0]
    columns = rows.map(lambda x: x.reshape(x.shape[0], -1, *x.shape[3:]))
    target = muzero.targets(columns)["value"][:, :, 0]
    with torch.no_grad():
        obs = torch.as_tensor(columns[keys.OBS][keys.OBS][:target.shape[0]].reshape(-1, 4))
        _, value_logits = muzero.model.predict(muzero.model.represent({keys.OBS: obs}))
        value = support_to_scalar(value_logits, 10).numpy().reshape(target.shape)
    alive = np.asarray(columns[keys.ALIVE][:target.shape[0]], bool)
    assert np.corrcoef(value[alive], target[alive])[0, 1] > 0.7


def test_a_policy_other_than_muzero_is_refused_by_name():
    from srl.models.q_network import QNetworkPolicy

    with pytest.raises(ValueError, match="learns a model policy .* not QNetworkPolicy"):
        MuZero(QNetworkPolicy(OBS_SPACE, gym.spaces.Discrete(2), hidden=[8]), MuZeroConfig())


@pytest.mark.integration
def test_cartpole_muzero_trains_in_its_graph_of_actors_a_buffer_and_a_trainer(tmp_path: Path):
    run_dir = tmp_path / "run"
    summary = train_inline(run_dir, "cartpole-muzero", "stop.env_steps=4000", "replay.learning_starts=1000",
                           "policy.args.simulations=8")
    assert summary["env_steps"] >= 4000 and summary["policy_version"] > 0, summary
    graph = (run_dir / "graph.yaml").read_text()
    assert "  buffer:\n    kind: buffer" in graph
    status = json.loads((run_dir / "status.json").read_text())
    assert {"actor", "buffer", "trainer"} <= {row["group"] for row in status["workers"]}


@pytest.mark.integration
def test_reanalyse_workers_refresh_the_buffers_targets_of_two_player_games(tmp_path: Path):
    run_dir = tmp_path / "run"
    summary = train_inline(run_dir, "tictactoe-muzero", "stop.env_steps=4000", "replay.learning_starts=1000",
                           "policy.args.simulations=8", "algorithm.args.reanalyse_fraction=0.1")
    assert summary["env_steps"] >= 4000 and summary["policy_version"] > 0, summary
    workers = {row["group"]: row for row in json.loads((run_dir / "status.json").read_text())["workers"]}
    assert {"reanalyse", "buffer"} <= set(workers)
    buffer, worker = workers["buffer"]["stats"], workers["reanalyse"]["stats"]
    assert buffer["refreshed"] > 0 and worker["reanalysed"] >= buffer["refreshed"], (buffer, worker)
    # At the fraction asked for: 0.1 of the sequences trained on, within a batch or two in flight.
    trained = buffer["updates_sent"] * 16
    assert 0.1 * trained - 3 * 16 <= buffer["reanalyse_sent"] <= 0.1 * trained, buffer
