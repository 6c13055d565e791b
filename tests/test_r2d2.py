"""R2D2: the burn-in only warms the state, episode starts come from the done flags, one
priority per sequence, and recurrent replay learns what a feed-forward Q-network cannot."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.algorithms.r2d2 import R2D2
from srl.api.registry import ALGORITHMS
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.q_network import QNetworkPolicy
from srl.replay.buffer import ReplayBuffer

SPACE = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-1, 1, (2,), np.float32)})
T, WIDTH = 10, 8


def trajectory(envs: int, seed: int = 0, ends: dict[tuple[int, int], str] | None = None) -> NamedArray:
    """A time-major trajectory [T + 1, envs] as actors send it; `ends` {(row, column): "terminated" | "truncated"}."""
    rng = np.random.default_rng(seed)
    flags = {keys.TERMINATED: np.zeros((T + 1, envs), bool), keys.TRUNCATED: np.zeros((T + 1, envs), bool)}
    for (row, column), kind in (ends or {}).items():
        flags[kind][row, column] = True
    state = lambda: rng.normal(size=(T + 1, envs, WIDTH)).astype(np.float32)
    return NamedArray({keys.OBS: {keys.OBS: rng.uniform(-1, 1, (T + 1, envs, 2)).astype(np.float32)},
                       keys.ACTION: rng.integers(0, 2, (T + 1, envs)), **flags,
                       keys.REWARD: rng.normal(size=(T + 1, envs)).astype(np.float32),
                       keys.ALIVE: np.ones((T + 1, envs), np.float32),
                       keys.VERSION: np.zeros((T + 1, envs), np.int64),
                       keys.RNN_STATE: {"h": state(), "c": state()}})


def sequences(batch: int, updates: int = 1, agents: int = 1, **kw: Any) -> NamedArray:
    buffer = ReplayBuffer(capacity=T * 8, trajectory_length=T, agents=agents, unit="sequence")
    buffer.insert(trajectory(4 * agents, **kw))
    return buffer.sample(batch, updates)


def r2d2(**args: Any) -> R2D2:
    torch.manual_seed(0)
    policy = QNetworkPolicy(SPACE, gym.spaces.Discrete(2), hidden=[16], lstm=WIDTH)
    return ALGORITHMS.resolve("r2d2")(policy, R2D2.Config(**args))


def record_unrolls(algorithm: R2D2) -> list[dict[str, Any]]:
    """Wrap both nets' `unroll` to note, per call, the net, its rows, starts, start state and grad mode."""
    calls: list[dict[str, Any]] = []
    for name, net in (("online", algorithm.q), ("target", algorithm.target)):
        def unroll(batch: Any, name: str = name, inner: Any = net.unroll) -> Any:
            q, state = inner(batch)
            calls.append({"net": name, "rows": len(batch[keys.EPISODE_START]), "grad": torch.is_grad_enabled(),
                          "starts": np.asarray(batch[keys.EPISODE_START]), "state_in": batch[keys.RNN_STATE],
                          "state_out": state})
            return q, state
        net.unroll = unroll
    return calls


def test_burn_in_rows_get_no_gradient_and_the_loss_reads_only_the_rows_after_them() -> None:
    b = 4
    algorithm = r2d2(burn_in=b)
    calls = record_unrolls(algorithm)
    batch = sequences(batch=6)[0]
    loss, priority, _ = algorithm.update(batch)
    online = [c for c in calls if c["net"] == "online"]
    # Online: burn-in rows without gradient, then the rest with it, from the burn-in's final state.
    assert [(c["rows"], c["grad"]) for c in online] == [(b, False), (T + 1 - b, True)]
    assert all(not c["grad"] for c in calls if c["net"] == "target")
    assert sum(c["rows"] for c in calls if c["net"] == "target") == T + 1
    assert online[1]["state_in"] is online[0]["state_out"]
    assert not any(x.requires_grad for x in online[0]["state_out"].values())

    # Actions and rewards of the burn-in rows change neither the loss nor the priorities ...
    changed = batch.map(np.copy)
    changed[keys.ACTION][:b] = 1 - changed[keys.ACTION][:b]
    changed[keys.REWARD][:b] += 5.0
    same = r2d2(burn_in=b).update(changed)
    assert same[0] == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(same[1], priority, rtol=1e-5)
    # ... their observations do (they warm the state), and so does a later row's reward.
    for key, rows in ((keys.OBS, slice(0, b)), (keys.REWARD, slice(b, b + 1))):
        changed = batch.map(np.copy)
        target = changed[keys.OBS][keys.OBS] if key == keys.OBS else changed[key]
        target[rows] += 1.0
        assert r2d2(burn_in=b).update(changed)[0] != pytest.approx(loss, rel=1e-5)


def test_episode_starts_follow_the_previous_rows_done_flags_and_row_0_keeps_the_stored_state() -> None:
    ends = {(0, c): "terminated" for c in range(4)}  # row 0 ended everywhere: row 1 starts, row 0 does not
    ends |= {(2, c): "terminated" for c in range(4)} | {(5, c): "truncated" for c in range(4)}
    algorithm = r2d2(burn_in=3)
    calls = record_unrolls(algorithm)
    algorithm.update(sequences(batch=4, ends=ends)[0])
    online = [c for c in calls if c["net"] == "online"]
    starts = np.concatenate([c["starts"] for c in online])  # burn-in rows, then the rest
    assert starts.shape == (T + 1, 4)
    np.testing.assert_array_equal(np.flatnonzero(starts.all(1)), [1, 3, 6])
    assert not starts[[0, 2, 4, 5, 7, 8, 9, 10]].any()
    # The unroll starts from the stored state of row 0.
    np.testing.assert_array_equal(online[0]["state_in"]["h"].numpy(), sequences(batch=4, ends=ends)[0][keys.RNN_STATE]["h"][:, 0])


@pytest.mark.parametrize("agents", [1, 2])
def test_priorities_are_one_per_sampled_sequence_between_mean_and_max_td(agents: int) -> None:
    algorithm = r2d2(burn_in=2)
    batch = sequences(batch=5, updates=3, agents=agents)
    stats = algorithm.step(batch)
    priority = algorithm.priorities()
    assert priority is not None and priority.shape == batch[keys.REPLAY_INDEX].shape == (3, 5)
    assert np.isfinite(priority).all() and (priority > 0).all() and stats["updates"] == 3
    # eta 1 is the max |td|, eta 0 the mean: the default 0.9 lies between them, for the same weights.
    bounds = [r2d2(burn_in=2, priority_eta=eta).update(batch[0])[1] for eta in (0.0, 0.9, 1.0)]
    np.testing.assert_allclose(bounds[1], 0.9 * bounds[2] + 0.1 * bounds[0], rtol=1e-5)
    assert (bounds[0] <= bounds[2] + 1e-7).all()


def test_burn_in_must_leave_rows_to_learn_from() -> None:
    with pytest.raises(ValueError, match="burn_in"):
        r2d2(burn_in=T).update(sequences(batch=2)[0])


@pytest.mark.integration
def test_r2d2_learns_to_recall_and_a_feed_forward_q_network_does_not(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "recall-r2d2", "--run-dir", str(run_dir), "log.tensorboard=false", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    assert summary["wall_time_s"] < 60, summary
    # The control: the same run without the LSTM stays at chance (0.5) over as many env steps again.
    control = tmp_path / "control"
    result = run_srl("train", "recall-r2d2", "--run-dir", str(control), "log.tensorboard=false",
                     "policy.args.lstm=0", f"stop.env_steps={2 * summary['env_steps']}", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((control / "summary.json").read_text())
    assert not summary["stop_reason"].startswith("episode_return_mean") and summary["episode_return_mean"] < 0.7, summary
