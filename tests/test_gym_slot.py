"""GymSlot, the fast path for plain Gymnasium envs, must behave exactly as the general EnvSlot."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import start_one, step_one

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.checks import BadEnvOutput
from srl.envs.fake import FakeEnv
from srl.envs.gym import GymEnv
from srl.envs.gym_slot import GymSlot
from srl.envs.slot_builder import make_slots
from srl.envs.slots import EnvSlot
from srl.workers.env_ring import EnvRing


class Faulty(gym.Env):
    """Counts steps in a Dict observation; at step `at` the observation goes bad (or not)."""

    observation_space = gym.spaces.Dict({"count": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                                         "flag": gym.spaces.Discrete(2)})
    action_space = gym.spaces.Discrete(3)

    def __init__(self, fault: str = "none", at: int = 3, episode_length: int = 5) -> None:
        self.fault, self.at, self.episode_length, self.t = fault, at, episode_length, 0

    def _obs(self) -> dict:
        count = np.array([self.t, -self.t], np.float32)
        if self.t == self.at and self.fault == "nan":
            count[1] = np.nan
        if self.t == self.at and self.fault == "shape":
            count = np.zeros(5, np.float32)
        return {"count": count, "flag": self.t % 2}

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), self.t >= self.episode_length, False, {}


def run(slot_type, make, n_envs: int, steps: int, actions, T: int = 8):
    envs = [make() for _ in range(n_envs)]
    ring = EnvRing([slot_type(envs, [10 + j for j in range(n_envs)], name="Test-v0")], T)
    request = start_one(ring, 0)
    trajectories = []
    for t in range(steps):
        action = actions(request[keys.OBS], t)
        reply = NamedArray({keys.ACTION: action, keys.LOGPROB: np.zeros(n_envs, np.float32),
                            keys.VALUE: np.zeros(n_envs, np.float32), keys.VERSION: np.full(n_envs, t)})
        request, trajectory = step_one(ring, 0, reply)
        if trajectory is not None:
            trajectories.append(trajectory)
    return trajectories, ring.pop_episodes()


class Echo(gym.Env):
    """Observes the action it was given last, exactly as given."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.asarray(action, np.float32), 0.0, False, False, {}


def push_towards_the_fall(obs: NamedArray, t: int) -> np.ndarray:
    return (obs[keys.OBS][:, 2] > 0).astype(np.int64)  # episodes end within a few dozen steps


@pytest.mark.parametrize("id,actions", [
    ("CartPole-v1", push_towards_the_fall),
    # Far outside [-2, 2] (Pendulum clips too, so `test_box_actions_are_clipped_...` checks that).
    ("Pendulum-v1", lambda obs, t: np.full((3, 1), 5.0 if t % 2 else -7.0, np.float32)),
])
def test_same_trajectories_and_episodes_as_the_general_path(id, actions):
    make = lambda: GymEnv(id, max_episode_steps=30)  # noqa: E731 (truncations as well as terminations)
    fast, fast_episodes = run(GymSlot, make, 3, 200, actions)
    general, general_episodes = run(EnvSlot, make, 3, 200, actions)
    assert len(fast) == len(general) == (200 - 1) // 8  # rows overlap by one
    for a, b in zip(fast, general):
        assert set(a.keys()) == set(b.keys())
        for path, leaf in a.items_flat():
            np.testing.assert_array_equal(leaf, b[path], err_msg=path)
    assert fast_episodes == general_episodes and len(fast_episodes[0]) >= 6
    if id == "Pendulum-v1":
        assert all(length == 30 for length in fast_episodes[1])  # truncated by the time limit
        assert any(t[keys.TRUNCATED].any() for t in fast)


def test_dict_observations_are_written_per_field():
    fast, (returns, lengths) = run(GymSlot, lambda: GymEnv("test_gym_slot:Faulty"), 2, 12,
                                   lambda obs, t: np.array([1, 2]))
    count = fast[0][keys.OBS]["count"]
    np.testing.assert_array_equal(count[:6, 0, 0], [0, 1, 2, 3, 4, 0])  # reset after 5 steps
    np.testing.assert_array_equal(fast[0][keys.OBS]["flag"][:6, 1], [0, 1, 0, 1, 0, 0])
    assert returns == [5.0, 10.0] * 2 and lengths == [5] * 4


@pytest.mark.parametrize("fault,message", [("nan", "NaN"), ("shape", "shape (5,)")])
def test_bad_output_is_the_same_clear_error(fault, message):
    with pytest.raises(BadEnvOutput) as error:
        run(GymSlot, lambda: GymEnv("test_gym_slot:Faulty", fault=fault), 2, 6, lambda obs, t: np.array([0, 0]))
    text = str(error.value)
    assert "Test-v0" in text and "'count'" in text and message in text


def test_nan_can_skip_the_episode():
    slot = GymSlot([GymEnv("test_gym_slot:Faulty", fault="nan", episode_length=100)], [1], on_bad_output="skip_episode")
    ring = EnvRing([slot], trajectory_length=8)
    request = start_one(ring, 0)
    for t in range(5):  # the observation goes bad at the third step
        reply = NamedArray({keys.ACTION: np.array([0]), keys.VERSION: np.array([t])})
        request, _ = step_one(ring, 0, reply)
    assert slot.skipped_episodes == 1 and np.isfinite(request[keys.OBS]["count"]).all()


def test_make_slots_takes_the_fast_path_only_for_plain_gym_envs():
    assert all(type(s) is GymSlot for s in make_slots(lambda: GymEnv("CartPole-v1"), 2, 2, seed=0))
    assert all(type(s) is EnvSlot for s in make_slots(lambda: FakeEnv(), 2, 2, seed=0))


def test_box_actions_are_clipped_at_the_env_and_recorded_as_sampled():
    raw = np.array([[5.0, -0.5], [-7.0, 0.25]], np.float32)
    [trajectory], _ = run(GymSlot, lambda: GymEnv("test_gym_slot:Echo"), 2, 9, lambda obs, t: raw)
    np.testing.assert_array_equal(trajectory[keys.OBS][keys.OBS][1], [[1.0, -0.5], [-1.0, 0.25]])
    np.testing.assert_array_equal(trajectory[keys.ACTION][0], raw)
