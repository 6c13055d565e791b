"""Google Research Football: spaces, reset/step semantics, the shared done, a short real run."""

import importlib.util
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from srl.envs.extras import MissingExtra

needs_gfootball = pytest.mark.skipif(importlib.util.find_spec("gfootball") is None,
                                     reason="needs gfootball: bash scripts/install_football.sh")

PLAYERS = ("player_0", "player_1", "player_2")


@pytest.fixture(scope="module")
def env():
    from srl.envs.football import FootballEnv

    env = FootballEnv("academy_3_vs_1_with_keeper", players=3, state=True)
    yield env
    env.close()


def _random_actions(rng):
    return {a: np.int64(rng.integers(19)) for a in PLAYERS}


def _play_episode(env, rng, max_steps=500):
    for t in range(1, max_steps + 1):
        steps = env.step(_random_actions(rng))
        if steps[PLAYERS[0]].done:
            return steps, t
    raise AssertionError("the episode did not end")


def test_missing_package_names_the_install_script(monkeypatch):
    from srl.envs.football import FootballEnv

    monkeypatch.setitem(sys.modules, "gfootball.env", None)  # makes the import fail
    with pytest.raises(MissingExtra, match="scripts/install_football.sh"):
        FootballEnv()


@needs_gfootball
def test_spaces_and_dtypes(env):
    assert env.agent_ids == PLAYERS
    for agent in PLAYERS:
        space = env.observation_space(agent)
        assert space["obs"].shape == (115,) and space["obs"].dtype == np.float32
        assert space["state"].shape == (3 * 115,)
        assert env.action_space(agent).n == 19
    first = env.reset(seed=1)
    assert set(first) == set(PLAYERS)
    for agent, step in first.items():
        assert step.obs["obs"].dtype == np.float32 and step.obs["obs"].shape == (115,)
        assert step.reward == 0.0 and not step.done and step.info == {}
    # Every player sees the same global state: the concatenation of the three views.
    state = first[PLAYERS[0]].obs["state"]
    np.testing.assert_array_equal(state, np.concatenate([first[a].obs["obs"] for a in PLAYERS]))
    # The views differ in which player is the active one.
    assert not np.array_equal(first[PLAYERS[0]].obs["obs"], first[PLAYERS[1]].obs["obs"])


@needs_gfootball
def test_episodes_end_together_and_report_the_score(env):
    rng = np.random.default_rng(0)
    env.reset(seed=2)
    for _ in range(3):
        steps, length = _play_episode(env, rng)
        done = [(s.terminated, s.truncated) for s in steps.values()]
        assert len(set(done)) == 1, done  # one shared done for the whole team
        info = steps[PLAYERS[0]].info
        assert all(s.info == info for s in steps.values())
        left, right = info["score"]
        assert info["episode_return"] == left - right and info["win"] == (left > right)
        assert info["episode_length"] == length
        if info["episode_return"] != 0:  # a goal ends an academy episode as a termination
            assert steps[PLAYERS[0]].terminated
        assert all(s.reward == info["episode_return"] for s in steps.values())  # scoring rewards
        first = env.reset()
        assert not first[PLAYERS[0]].done


@needs_gfootball
def test_same_seed_same_game(env):
    def play(seed):
        rng = np.random.default_rng(0)
        out = [env.reset(seed=seed)[PLAYERS[0]].obs["obs"]]
        out += [env.step(_random_actions(rng))[PLAYERS[1]].obs["obs"] for _ in range(20)]
        return np.stack(out)

    np.testing.assert_array_equal(play(7), play(7))


@needs_gfootball
def test_max_episode_steps_truncates(env):
    env.max_episode_steps = 3
    try:
        env.reset(seed=3)
        steps = [env.step({a: np.int64(0) for a in PLAYERS}) for _ in range(3)]  # idle: nothing happens
        assert not any(s.done for s in steps[1].values())
        assert all(s.truncated and not s.terminated for s in steps[2].values())
        assert steps[2][PLAYERS[0]].info["score"] == [0, 0]
    finally:
        env.max_episode_steps = None


class _ScriptedGame:
    """Stands in for the engine: the game ends after `end_at` steps, optionally on a goal.

    Player 0 carries the ball and earns 0.3 of shaping per step; a goal pays every player.
    """

    def __init__(self, end_at: int, goal_at_end: int) -> None:
        self.end_at, self.goal_at_end, self.t = end_at, goal_at_end, 0
        self.unwrapped = SimpleNamespace(_config={})  # where the env puts per-episode engine seeds

    def reset(self):
        self.t = 0
        return np.zeros((3, 115), np.float32)

    def step(self, actions):
        self.t += 1
        done = self.t >= self.end_at
        goal = self.goal_at_end if done else 0
        return np.zeros((3, 115), np.float32), np.array([0.3, 0, 0]) + goal, done, {"score_reward": goal}


@pytest.fixture
def scripted(env):
    """The module's env with its engine swapped for a `_ScriptedGame` (restored afterwards)."""
    real, duration = env.env, env.game_duration
    yield env
    env.env, env.game_duration, env.shared_reward = real, duration, False


@needs_gfootball
@pytest.mark.parametrize("goal,terminated", [(0, False), (1, True)])
def test_the_clock_running_out_is_truncation(scripted, goal, terminated):
    env = scripted
    env.env, env.game_duration = _ScriptedGame(end_at=5, goal_at_end=goal), 4  # the engine ends at duration + 1
    env.reset()
    steps, length = _play_episode(env, np.random.default_rng(0))
    assert length == 5
    last = steps[PLAYERS[2]]
    assert (last.terminated, last.truncated) == (terminated, not terminated)
    assert last.info["episode_return"] == goal and last.info["win"] == bool(goal)


@needs_gfootball
@pytest.mark.parametrize("shared,expected", [(False, [0.3, 0.0, 0.0]), (True, [0.1, 0.1, 0.1])])
def test_shared_reward(scripted, shared, expected):
    env = scripted
    env.env, env.shared_reward = _ScriptedGame(end_at=10, goal_at_end=0), shared
    env.reset()
    steps = env.step({a: np.int64(0) for a in PLAYERS})
    np.testing.assert_allclose([steps[a].reward for a in PLAYERS], expected, rtol=1e-6)


@needs_gfootball
@pytest.mark.integration
def test_short_run_through_the_ring(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "football-3v1-mappo", "--run-dir", str(run_dir), "stop.env_steps=400",
                     "actors.count=1", "actors.envs_per_slot=2", "actors.trajectory_length=32",
                     "trainers.batch_steps=192", "log.tensorboard=false", "log.progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 400 and summary["policy_version"] >= 1, summary
    assert summary["episodes"] >= 1 and -1 <= summary["episode_return_mean"] <= 1, summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing in the cwd
