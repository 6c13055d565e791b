"""The replay buffer as pure compute: n-step returns, sum-tree sampling, priorities, wrap-around."""

from __future__ import annotations

import numpy as np
import pytest

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.data.returns import nstep_targets
from srl.replay.buffer import ReplayBuffer
from srl.replay.sum_tree import SumTree


def trajectory(T: int, envs: int, agents: int = 1, start: float = 0.0, done_at: dict | None = None,
               truncated_at: dict | None = None, lstm: int = 0) -> NamedArray:
    """Obs value = start + 1000 * column + row, so every stored row is recognisable."""
    B = envs * agents
    rows = np.arange(T + 1, dtype=np.float32)[:, None] + 1000 * np.arange(B, dtype=np.float32)[None] + start
    traj = NamedArray({keys.OBS: {"x": rows[..., None].repeat(2, -1)}})
    traj[keys.ACTION] = np.zeros((T + 1, B), np.int64)
    traj[keys.REWARD] = np.ones((T + 1, B), np.float32)
    traj[keys.TERMINATED] = np.zeros((T + 1, B), bool)
    traj[keys.TRUNCATED] = np.zeros((T + 1, B), bool)
    for (t, b) in (done_at or {}):
        traj[keys.TERMINATED][t, b] = True
    for (t, b) in (truncated_at or {}):
        traj[keys.TRUNCATED][t, b] = True
    traj[keys.ALIVE] = np.ones((T + 1, B), bool)
    traj[keys.VERSION] = np.zeros((T + 1, B), np.int64)
    traj[keys.LOGPROB] = np.zeros((T + 1, B), np.float32)
    if lstm:
        traj[keys.RNN_STATE] = {"h": rows[..., None].repeat(lstm, -1), "c": np.zeros((T + 1, B, lstm), np.float32)}
    return traj


def test_nstep_returns_stop_at_episode_and_segment_ends() -> None:
    T, gamma = 6, 0.5
    reward = np.arange(1, T + 1, dtype=np.float32)[None]  # 1..6
    terminated = np.zeros((1, T), bool)
    truncated = np.zeros((1, T), bool)
    terminated[0, 1] = True  # the episode ends after row 1's step
    truncated[0, 3] = True   # and the next one is cut off after row 3's
    ret, discount, boot = nstep_targets(reward, terminated, truncated, n=3, gamma=gamma)
    # row 0: r0 + g r1, terminal
    assert ret[0, 0] == pytest.approx(1 + 0.5 * 2) and discount[0, 0] == 0
    # row 2: r2 + g r3, truncated after row 3: bootstrap from row 3 itself with g^2
    assert ret[0, 2] == pytest.approx(3 + 0.5 * 4) and discount[0, 2] == pytest.approx(0.25) and boot[0, 2] == 3
    # row 4: r4 + g r5, then the segment ends: bootstrap from row 6 (the next trajectory's first)
    assert ret[0, 4] == pytest.approx(5 + 0.5 * 6) and discount[0, 4] == pytest.approx(0.25) and boot[0, 4] == 6
    # row 5: one step left
    assert ret[0, 5] == pytest.approx(6) and discount[0, 5] == pytest.approx(0.5) and boot[0, 5] == 6
    # full n-step on a clean stretch
    clean = nstep_targets(reward, np.zeros((1, T), bool), np.zeros((1, T), bool), n=3, gamma=gamma)
    assert clean[0][0, 0] == pytest.approx(1 + 0.5 * 2 + 0.25 * 3) and clean[1][0, 0] == pytest.approx(0.125)
    assert clean[2][0, 0] == 3


def nstep_by_rows(reward, terminated, truncated, n, gamma):
    """The n-step targets of one segment [T], row by row: the definition `nstep_targets` vectorises."""
    T = len(reward)
    ret, discount, boot = np.zeros(T), np.ones(T), np.arange(T)
    for t in range(T):
        for k in range(min(n, T - t)):
            ret[t] += gamma ** k * reward[t + k]
            discount[t] = gamma ** (k + 1)
            boot[t] = t + k + 1 - truncated[t + k]
            if terminated[t + k]:
                discount[t] = 0.0
            if terminated[t + k] or truncated[t + k]:
                break
    return ret, discount, boot


@pytest.mark.parametrize("n", [1, 3, 20])
def test_nstep_targets_match_the_row_by_row_definition(n: int) -> None:
    rng = np.random.default_rng(n)
    S, T, G = 8, 16, 2
    reward = rng.standard_normal((S, T, G)).astype(np.float32)
    terminated, truncated = rng.random((S, T, G)) < 0.1, rng.random((S, T, G)) < 0.05
    ret, discount, boot = nstep_targets(reward, terminated, truncated, n=n, gamma=0.9)
    for s in range(S):
        for g in range(G):
            want = nstep_by_rows(reward[s, :, g], terminated[s, :, g], truncated[s, :, g], n, 0.9)
            np.testing.assert_allclose(ret[s, :, g], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(discount[s, :, g], want[1], rtol=1e-6)
            np.testing.assert_array_equal(boot[s, :, g], want[2])


def test_sum_tree_repairs_runs_and_scattered_leaves_alike() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(1000)
    for _ in range(50):
        if rng.random() < 0.5:  # a run of leaves, as a buffer stores segments
            lo = int(rng.integers(0, 1000))
            index = np.arange(lo, int(rng.integers(lo + 1, 1001)))
        else:
            index = rng.integers(0, 1000, int(rng.integers(1, 20)))
        tree.set(index, rng.random(len(index)))
        inner = np.arange(1, tree.size)
        np.testing.assert_allclose(tree.tree[inner], tree.tree[2 * inner] + tree.tree[2 * inner + 1])
    for index in (np.arange(990, 1000), np.array([999]), np.array([0, 1]), np.array([5, 6, 6, 7])):
        tree.set(index, rng.random(len(index)))  # runs at either end, one leaf, a repeat in a run
        np.testing.assert_allclose(tree.tree[inner], tree.tree[2 * inner] + tree.tree[2 * inner + 1])
    assert tree.total == pytest.approx(tree.get(np.arange(1000)).sum())


def test_sum_tree_samples_in_proportion_and_repairs_sums() -> None:
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 0.0, 3.0, 0.0, 6.0]))
    assert tree.total == pytest.approx(10)
    draws = tree.find(np.random.default_rng(0).random(20_000) * tree.total)
    freq = np.bincount(draws, minlength=5) / draws.size
    assert freq[1] == 0 and freq[3] == 0
    assert freq[[0, 2, 4]] == pytest.approx([0.1, 0.3, 0.6], abs=0.02)
    tree.set(np.array([4, 4]), np.array([0.0, 0.0]))
    assert tree.total == pytest.approx(4)
    assert set(tree.find(np.linspace(0, 4, 50, endpoint=False))) == {0, 2}
    # a mass at (or past) the total never lands on an empty leaf
    assert tree.find(np.array([4.0, 1e9]))[0] == 2


def test_transitions_carry_nstep_targets_and_the_right_next_observation() -> None:
    T = 4
    buffer = ReplayBuffer(capacity=40, trajectory_length=T, n_step=2, gamma=0.9)
    stored = buffer.insert(trajectory(T, envs=3, done_at={(1, 0): True}))
    assert stored == 12 and buffer.env_steps == 12
    batch = buffer.sample(batch_size=64, updates=2)
    assert batch[keys.OBS]["x"].shape == (2, 64, 1, 2)
    assert batch[keys.REPLAY_WEIGHT].shape == (2, 64)
    obs, nxt = batch[keys.OBS]["x"][..., 0, 0], batch[keys.NEXT_OBS]["x"][..., 0, 0]
    column, row = np.divmod(obs, 1000)
    boot_row = np.divmod(nxt, 1000)[1]
    assert (np.divmod(nxt, 1000)[0] == column).all()  # same env
    terminal = (column == 0) & (row <= 1)
    assert (batch[keys.DISCOUNT][..., 0][terminal] == 0).all()
    assert np.allclose(batch[keys.DISCOUNT][..., 0][~terminal], np.where(row[~terminal] == T - 1, 0.9, 0.81))
    assert (boot_row[~terminal] == np.minimum(row[~terminal] + 2, T)).all()
    assert (batch[keys.NSTEP_RETURN][..., 0][~terminal & (row < T - 1)] == pytest.approx(1.9))


def test_the_ring_overwrites_the_oldest_segments_and_ignores_late_priorities() -> None:
    T = 4
    buffer = ReplayBuffer(capacity=8, trajectory_length=T, alpha=1.0)  # two segments
    buffer.insert(trajectory(T, envs=2, start=0))
    old = buffer.sample(8)[keys.REPLAY_INDEX]
    buffer.insert(trajectory(T, envs=2, start=0.5))
    assert buffer.filled == 2 and buffer.inserted == 4
    assert (buffer.sample(64)[keys.OBS]["x"] % 1 == 0.5).all()  # only the new data remains
    assert buffer.update_priorities(old, np.full(old.shape, 100.0)) == 0
    assert buffer.tree.total == pytest.approx(8.0)


def test_prioritized_sampling_prefers_high_error_units_and_weights_correct_for_it() -> None:
    T = 4
    buffer = ReplayBuffer(capacity=400, trajectory_length=T, alpha=1.0, beta=1.0)
    buffer.insert(trajectory(T, envs=10))
    first = buffer.sample(40)
    index = first[keys.REPLAY_INDEX].ravel()
    target = index[0]
    buffer.update_priorities(np.unique(index), np.ones(np.unique(index).size))
    buffer.update_priorities(np.array([target]), np.array([40.0]))  # 40 of the ~80 total
    batch = buffer.sample(256)
    picked = batch[keys.REPLAY_INDEX][0]
    assert 0.35 < (picked == target).mean() < 0.65
    w = batch[keys.REPLAY_WEIGHT][0]
    assert w.max() == pytest.approx(1.0)
    assert w[picked == target].max() < w[picked != target].min()


def test_joint_transitions_group_the_agents_of_an_env() -> None:
    T = 3
    buffer = ReplayBuffer(capacity=30, trajectory_length=T, agents=3)
    buffer.insert(trajectory(T, envs=2, agents=3))
    batch = buffer.sample(16)
    x = batch[keys.OBS]["x"][0, :, :, 0]  # [16, 3]
    column = x // 1000
    assert ((column[:, 1] == column[:, 0] + 1) & (column[:, 2] == column[:, 0] + 2)).all()
    assert set(np.unique(column[:, 0])) <= {0, 3}
    with pytest.raises(ValueError, match="whole envs of 3 agents"):
        buffer.insert(trajectory(T, envs=1, agents=2))


def test_sequences_are_time_major_segments_with_their_first_recurrent_state() -> None:
    T = 5
    buffer = ReplayBuffer(capacity=50, trajectory_length=T, unit="sequence")
    buffer.insert(trajectory(T, envs=4, lstm=3))
    batch = buffer.sample(batch_size=6, updates=2)
    x = batch[keys.OBS]["x"]
    assert x.shape == (2, T + 1, 6, 1, 2)
    assert (np.diff(x[..., 0, 0], axis=1) == 1).all()  # consecutive rows of one env
    h = batch[keys.RNN_STATE]["h"]
    assert h.shape == (2, 6, 1, 3) and (h[..., 0] == x[:, 0, :, :, 0]).all()
    with pytest.raises(ValueError, match="trajectory_length"):
        buffer.insert(trajectory(T + 1, envs=1))


def test_contents_survive_a_save_and_load() -> None:
    T = 4
    buffer = ReplayBuffer(capacity=40, trajectory_length=T, n_step=3, alpha=0.6, seed=1)
    buffer.insert(trajectory(T, envs=3))
    batch = buffer.sample(8)
    buffer.update_priorities(batch[keys.REPLAY_INDEX], np.arange(8.0))
    state = {k: np.array(v) for k, v in buffer.state_dict().items()}
    copy = ReplayBuffer(capacity=40, trajectory_length=T, n_step=3, alpha=0.6, seed=1)
    copy.load_state_dict(state)
    copy.rng = np.random.default_rng(5)
    buffer.rng = np.random.default_rng(5)
    a, b = buffer.sample(32), copy.sample(32)
    for path, leaf in a.items_flat():
        assert np.array_equal(leaf, b.get_path(path)), path
    with pytest.raises(ValueError, match="segments"):
        ReplayBuffer(capacity=80, trajectory_length=T).load_state_dict(state)
