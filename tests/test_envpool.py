"""The EnvPool backend: one ring slot is one EnvPool batch, with the same outputs as Python slots."""

import json

import numpy as np
import pytest

pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e '.[envpool]')")

from srl.api.agents import DEFAULT_POLICY
from srl.data.named_array import NamedArray  # noqa: E402
from srl.envs.envpool_slot import EnvPoolSlot, envpool_task  # noqa: E402
from srl.envs.slots import SlotStep  # noqa: E402

ATARI = {"type": "atari", "id": "ALE/SpaceInvaders-v5", "args": {}}


def _buffers(slot: EnvPoolSlot) -> tuple[NamedArray, np.ndarray]:
    obs = NamedArray({k: np.zeros((slot.rows, *shape), dtype) for k, (shape, dtype) in slot.obs_fields.items()})
    return obs, np.zeros(slot.rows, bool)


def _step(slot: EnvPoolSlot, actions: np.ndarray) -> tuple[SlotStep, list[tuple[float, int]]]:
    obs, alive = _buffers(slot)
    out = SlotStep(np.zeros(slot.rows, np.float32), np.zeros(slot.rows, bool), np.zeros(slot.rows, bool), alive, obs)
    finished, _ = slot.step({DEFAULT_POLICY: actions}, {DEFAULT_POLICY: out})
    return out, finished


def test_atari_ids_and_args_translate():
    task, kwargs, atari = envpool_task({"type": "atari", "id": "PongNoFrameskip-v4", "args": {"clip_rewards": False}})
    assert (task, atari) == ("Pong-v5", True)
    assert kwargs["reward_clip"] is False and kwargs["episodic_life"] is True and kwargs["stack_num"] == 4
    assert kwargs["repeat_action_probability"] == 0.0 and kwargs["img_height"] == 84
    assert envpool_task({"type": "gym", "id": "CartPole-v1", "args": {}}) == ("CartPole-v1", {}, False)
    with pytest.raises(ValueError, match="no EnvPool equivalent"):
        envpool_task({"type": "atari", "id": "ALE/Pong-v5", "args": {"render_mode": "human"}})
    with pytest.raises(ValueError, match="env.type"):
        envpool_task({"type": "fake", "args": {}})


def test_atari_slot_interface_life_loss_and_true_score():
    slot = EnvPoolSlot(ATARI, n_envs=2, seed=0)
    assert slot.rows == slot.n_envs == 2
    assert slot.obs_fields == {"obs": ((4, 84, 84), np.dtype(np.uint8))}
    assert slot.spaces[1].n == 6
    obs, alive = _buffers(slot)
    slot.reset_all({DEFAULT_POLICY: obs}, {DEFAULT_POLICY: alive})
    assert alive.all() and obs["obs"].any()

    rng = np.random.default_rng(0)
    pending, life_ends, games = np.zeros(2, bool), 0, []
    for _ in range(3000):
        out, finished = _step(slot, rng.integers(6, size=2))
        assert out.next_obs["obs"].dtype == np.uint8
        assert set(np.unique(out.reward)) <= {-1.0, 0.0, 1.0}  # clipped for training
        # The step after an episode's end is EnvPool's reset: a masked placeholder row.
        assert out.reset_rows == np.flatnonzero(pending).tolist()
        assert (out.reward[pending] == 0).all() and out.terminated[pending].all()
        ended = (out.terminated | out.truncated) & ~pending
        np.testing.assert_array_equal(out.alive, ~ended)
        life_ends += int(ended.sum())
        games += finished
        pending = ended
        if len(games) >= 2:
            break
    assert len(games) >= 2 and life_ends >= 3 * len(games)  # three lives per game
    assert all(score % 5 == 0 and length > 0 for score, length in games)  # the unclipped game score
    assert any(score > 0 for score, _ in games)
    slot.close()


def test_gym_id_returns_are_reward_sums():
    slot = EnvPoolSlot({"type": "gym", "id": "CartPole-v1", "args": {}}, n_envs=4, seed=0)
    assert slot.obs_fields["obs"][0] == (4,)
    obs, alive = _buffers(slot)
    slot.reset_all({DEFAULT_POLICY: obs}, {DEFAULT_POLICY: alive})
    episodes = []
    for _ in range(200):
        _, finished = _step(slot, np.zeros(4, np.int64))  # always left: short episodes
        episodes += finished
    assert episodes and all(ret == length for ret, length in episodes)
    slot.close()


@pytest.mark.integration
def test_pong_run_with_envpool_backend(run_srl, tmp_path):
    pytest.importorskip("ale_py", reason="the policy worker and trainer build an AtariEnv for the spaces")
    run_dir = tmp_path / "run"
    result = run_srl("train", "pong-ppo", "--run-dir", str(run_dir), "env.backend=envpool", "actors.ring_size=2",
                     "actors.envs_per_slot=2", "actors.trajectory_length=16", "trainers.batch_steps=64",
                     "stop.env_steps=400", "log.tensorboard=false", "log.progress=false", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 400 and summary["policy_version"] >= 1, summary
