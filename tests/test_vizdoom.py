"""ViZDoom: spaces, reset/step semantics, termination vs truncation, a short real run."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vizdoom", reason="needs the vizdoom extra: pip install -e '.[vizdoom]'")

from srl.envs.vizdoom import VizDoomEnv, resize_matrix  # noqa: E402

AGENT = "agent"
NOOP = 0


@pytest.fixture(scope="module")
def doom_cwd(tmp_path_factory):
    """The engine writes `_vizdoom.ini` and `_vizdoom/` into the cwd: keep them in a temp dir."""
    cwd = tmp_path_factory.mktemp("doom_cwd")
    old = Path.cwd()
    before = sorted(os.listdir(old))
    os.chdir(cwd)
    yield cwd
    os.chdir(old)
    assert sorted(os.listdir(old)) == before, "the ViZDoom tests wrote into the directory pytest ran in"


@pytest.fixture(scope="module")
def env(doom_cwd):
    env = VizDoomEnv("basic")
    yield env
    env.close()


def _play(env, policy, max_steps=500):
    """Steps until the episode ends; returns the last AgentStep and the number of steps."""
    for t in range(1, max_steps + 1):
        step = env.step({AGENT: np.int64(policy(t))})[AGENT]
        if step.done:
            return step, t
    raise AssertionError("the episode did not end")


def test_resize_matrix_averages_areas():
    m = resize_matrix(160, 84)
    assert m.shape == (84, 160)
    np.testing.assert_allclose(m.sum(1), 1.0, rtol=1e-5)  # a flat image stays flat
    np.testing.assert_allclose(m.sum(0).sum(), 84, rtol=1e-5)
    assert np.array_equal(resize_matrix(4, 2), np.array([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]], np.float32))


def test_spaces_and_dtypes(env):
    assert env.agent_ids == (AGENT,)
    space = env.observation_space(AGENT)
    assert space["obs"].shape == (4, 84, 84) and space["obs"].dtype == np.uint8
    # Basic has MOVE_LEFT, MOVE_RIGHT, ATTACK: no-op plus one action per button.
    assert env.action_space(AGENT).n == 4
    first = env.reset(seed=3)[AGENT]
    assert first.obs["obs"].dtype == np.uint8 and space.contains(first.obs)
    assert first.reward == 0.0 and not first.done
    assert first.obs["obs"].std() > 0  # a real picture, not a blank screen
    # The stack starts as four copies of the first frame.
    assert all(np.array_equal(first.obs["obs"][0], first.obs["obs"][i]) for i in range(1, 4))


def test_step_shifts_the_frame_stack(env):
    before = env.reset(seed=4)[AGENT].obs["obs"]
    step = env.step({AGENT: np.int64(1)})[AGENT]  # move left: the view changes
    after = step.obs["obs"]
    assert np.array_equal(after[:3], before[1:])
    assert not np.array_equal(after[3], before[3])
    assert step.reward == -4.0  # living reward -1 per tic, 4 tics per action
    assert not step.done and step.info == {}


def test_timeout_is_truncation(env):
    env.reset(seed=5)
    step, length = _play(env, lambda t: NOOP)
    assert step.truncated and not step.terminated
    assert length == 300 // 4  # the scenario's 300-tic limit, 4 tics per action
    assert step.info == {"episode_return": -300.0, "episode_length": length}


def test_kill_is_termination(env):
    rng = np.random.default_rng(0)
    env.reset(seed=6)
    for _ in range(30):  # random play kills the monster in a fair share of episodes
        step, length = _play(env, lambda t: rng.integers(4))
        if step.terminated:
            break
        env.reset()
    assert step.terminated and not step.truncated
    assert step.reward > 50  # the kill's +101 is in the last step
    assert step.info["episode_length"] == length


def test_max_episode_steps_and_rgb(doom_cwd):
    env = VizDoomEnv("basic", frame_stack=2, grayscale=False, size=(64, 48), max_episode_steps=3)
    try:
        assert env.observation_space(AGENT)["obs"].shape == (6, 64, 48)
        env.reset(seed=1)
        step, length = _play(env, lambda t: NOOP)
        assert (length, step.truncated, step.terminated) == (3, True, False)
        assert step.obs["obs"].shape == (6, 64, 48) and step.obs["obs"].dtype == np.uint8
    finally:
        env.close()


def test_same_seed_same_episode(env):
    def frames(seed):
        out = [env.reset(seed=seed)[AGENT].obs["obs"]]
        out += [env.step({AGENT: np.int64(a)})[AGENT].obs["obs"] for a in (1, 3, 2, 3)]
        return np.stack(out)

    assert np.array_equal(frames(11), frames(11))


def test_engine_files_land_in_the_cwd(env, doom_cwd):
    assert (doom_cwd / "_vizdoom.ini").exists()


def test_unknown_scenario(doom_cwd):
    with pytest.raises(FileNotFoundError, match="no_such_map"):
        VizDoomEnv("no_such_map")


@pytest.mark.integration
def test_short_run_writes_only_into_its_run_dir(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "vizdoom-basic-ppo", "--run-dir", str(run_dir), "stop.env_steps=300",
                     "actors.ring_size=1", "actors.envs_per_slot=2", "actors.trajectory_length=32",
                     "trainers.batch_steps=64", "log.tensorboard=false", "log.progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 300 and summary["policy_version"] >= 1, summary
    assert summary["episodes"] >= 1 and summary["episode_return_mean"] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing in the cwd
    assert (run_dir / "workdir" / "_vizdoom.ini").exists()  # the engine's files stay in the run
