"""The Atari suite: DeepMind preprocessing, episodic life vs the true game score, reward clipping, a real run."""

import json

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="the atari extra is not installed (pip install -e '.[atari]')")
pytest.importorskip("cv2", reason="the atari extra is not installed (pip install -e '.[atari]')")

from srl.envs.atari import AGENT, AtariEnv  # noqa: E402


def _play(env: AtariEnv, seed: int, max_steps: int = 5000):
    """Random play until game over; yields (step, lives after it, frame number after the next reset)."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(max_steps):
        step = env.step({AGENT: rng.integers(env.action_space(AGENT).n)})[AGENT]
        yield step, env.ale.lives()
        if step.info.get("episode_return") is not None:
            return
        if step.done:
            env.reset()
    raise AssertionError("no game over")


def test_spaces_dtypes_and_reset():
    env = AtariEnv("ALE/Pong-v5")
    space = env.observation_space(AGENT)["obs"]
    assert (space.shape, space.dtype) == ((4, 84, 84), np.uint8)
    assert env.action_space(AGENT).n == 6
    first = env.reset(seed=3)[AGENT]
    assert first.obs["obs"].shape == (4, 84, 84) and first.obs["obs"].dtype == np.uint8
    step = env.step({AGENT: np.int64(2)})[AGENT]
    assert step.obs["obs"].dtype == np.uint8 and not step.done and step.info == {}
    again = AtariEnv("ALE/Pong-v5").reset(seed=3)[AGENT]
    np.testing.assert_array_equal(first.obs["obs"], again.obs["obs"])  # seeded: the same no-ops
    env.close()


def test_life_loss_ends_the_training_episode_not_the_game():
    env = AtariEnv("ALE/Breakout-v5")
    lives_before, life_losses, frames = 5, 0, []
    for step, lives in _play(env, seed=0):
        if "episode_return" in step.info:
            assert lives == 0 and step.terminated
            assert step.info["episode_length"] > 0
            break
        if step.terminated:  # a lost life: the training episode ends, the game does not
            assert lives == lives_before - 1
            lives_before, life_losses = lives, life_losses + 1
            frames.append(env.ale.getEpisodeFrameNumber())
    assert life_losses == 4
    assert frames == sorted(frames) and frames[0] > 0  # the emulator never restarted between lives

    whole = AtariEnv("ALE/Breakout-v5", episodic_life=False)
    dones = [step for step, _ in _play(whole, seed=0) if step.done]
    assert len(dones) == 1 and "episode_return" in dones[0].info


def test_rewards_clipped_for_training_true_score_reported():
    clipped, raw = AtariEnv("ALE/SpaceInvaders-v5"), AtariEnv("ALE/SpaceInvaders-v5", clip_rewards=False)
    pairs = list(zip(_play(clipped, seed=1), _play(raw, seed=1)))  # same seed, same actions: same game
    clipped_rewards = np.array([c.reward for (c, _), _ in pairs])
    raw_rewards = np.array([r.reward for _, (r, _) in pairs])
    assert raw_rewards.max() > 1  # the game pays 5-30 points per invader
    np.testing.assert_array_equal(clipped_rewards, np.sign(raw_rewards))
    (last_clipped, _), (last_raw, _) = pairs[-1]
    assert last_clipped.info == last_raw.info
    assert last_clipped.info["episode_return"] >= raw_rewards.sum() > clipped_rewards.sum()


@pytest.mark.integration
@pytest.mark.parametrize("config", ["pong-ppo", "pong-appo"])
def test_pong_local_run(run_srl, tmp_path, config):
    """Actor + policy worker + trainer with the Nature CNN on Pong, a few hundred steps (no learning asserted)."""
    run_dir = tmp_path / "run"
    result = run_srl("train", config, "--run-dir", str(run_dir), "actors.ring_size=2", "actors.envs_per_slot=2",
                     "actors.trajectory_length=16", "trainers.batch_steps=64", "stop.env_steps=400",
                     "log.tensorboard=false", "log.progress=false", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 400 and summary["policy_version"] >= 1, summary
    assert summary["stop_reason"].startswith("env_steps"), summary
