"""The env ring, driven by hand with FakeEnv: which action reaches which env, trajectory layout, episodes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import start_one, step_one

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.fake import FakeEnv
from srl.envs.slot_builder import make_slots
from srl.envs.slots import EnvSlot
from srl.workers.env_ring import EnvRing

N_ACTIONS = 1000


def policy(tag: float, t: float) -> int:
    """An action that identifies the (env, agent) and the step it was computed for."""
    return (int(tag) * 31 + int(t)) % N_ACTIONS


def reply_for(request: NamedArray, version: int) -> NamedArray:
    obs = request[keys.OBS][keys.OBS]
    rows = obs.shape[0]
    return NamedArray({
        keys.ACTION: np.array([policy(o[0], o[1]) for o in obs], np.int64),
        keys.LOGPROB: -obs[:, 0].astype(np.float32),
        keys.VALUE: obs[:, 1].astype(np.float32) + 0.5,
        keys.VERSION: np.full(rows, version, np.int64),
    })


def build(n_slots: int, envs_per_slot: int, n_agents: int, episode_length: int, T: int):
    slots, envs = [], []
    for k in range(n_slots):
        slot_envs = [FakeEnv(n_agents=n_agents, n_actions=N_ACTIONS, episode_length=episode_length)
                     for _ in range(envs_per_slot)]
        # tags far apart so (env tag + agent index) is unique across every row of every slot
        seeds = [100 * (k * envs_per_slot + j + 1) for j in range(envs_per_slot)]
        slots.append(EnvSlot(slot_envs, seeds))
        envs += slot_envs
    return EnvRing(slots, T), envs


def drive(ring: EnvRing, steps: int, seed: int = 0):
    """Answer slots in a random interleaving; returns {slot: [trajectories]} and the number of replies."""
    rng = np.random.default_rng(seed)
    pending = {s: start_one(ring, s).copy() for s in range(ring.size)}
    trajectories: dict[int, list[NamedArray]] = {s: [] for s in range(ring.size)}
    version = 0
    for _ in range(steps):
        s = int(rng.integers(ring.size))
        version += 1
        request, trajectory = step_one(ring, s, reply_for(pending[s], version))
        pending[s] = request.copy()
        assert set(request.keys()) == {keys.OBS}  # no RNN state for a stateless policy
        if trajectory is not None:
            trajectories[s].append(trajectory)
    return trajectories


def test_first_request_is_the_reset_observation():
    ring, _ = build(n_slots=2, envs_per_slot=3, n_agents=2, episode_length=5, T=4)
    request = start_one(ring, 1)
    obs = request[keys.OBS][keys.OBS]
    assert obs.shape == (6, 3) and obs.dtype == np.float32
    tags = [400 + 0, 400 + 1, 500, 501, 600, 601]  # slot 1 holds envs 3..5: seeds 400, 500, 600
    np.testing.assert_array_equal(obs[:, 0], tags)
    np.testing.assert_array_equal(obs[:, 1], 0)
    np.testing.assert_array_equal(obs[:, 2], -1)


@pytest.mark.parametrize("n_slots,envs_per_slot,n_agents", [(1, 1, 1), (3, 2, 1), (2, 3, 2)])
def test_each_env_gets_the_action_for_its_own_observation(n_slots, envs_per_slot, n_agents):
    L, T = 7, 5
    ring, envs = build(n_slots, envs_per_slot, n_agents, episode_length=L, T=T)
    steps = 60 * n_slots
    drive(ring, steps)
    total = 0
    for env in envs:
        assert env.history, "an env was never stepped"
        for k, actions in enumerate(env.history):
            t = k % L  # the env's own clock: it restarts after each episode of L steps
            expected = {f"agent_{i}": policy(env.tag + i, t) for i in range(n_agents)}
            assert actions == expected, f"env {env.tag} step {k}"
        total += len(env.history)
    assert total == steps * envs_per_slot == ring.env_steps


@pytest.mark.parametrize("n_agents", [1, 2])
def test_trajectory_shape_overlap_and_contents(n_agents):
    L, T, envs_per_slot = 6, 4, 2
    ring, _ = build(n_slots=2, envs_per_slot=envs_per_slot, n_agents=n_agents, episode_length=L, T=T)
    trajectories = drive(ring, 80)
    rows = envs_per_slot * n_agents
    for s, trajs in trajectories.items():
        assert len(trajs) >= 3
        for traj in trajs:
            assert traj.shape[:2] == (T + 1, rows)
            assert traj[keys.OBS][keys.OBS].shape == (T + 1, rows, 3)
            for key in (keys.ACTION, keys.LOGPROB, keys.VALUE, keys.VERSION, keys.REWARD,
                        keys.TERMINATED, keys.TRUNCATED):
                assert traj[key].shape == (T + 1, rows), key
            obs = traj[keys.OBS][keys.OBS]
            # every row holds the reply computed from that row's observation
            expected = np.vectorize(policy)(obs[..., 0], obs[..., 1])
            np.testing.assert_array_equal(traj[keys.ACTION], expected)
            np.testing.assert_array_equal(traj[keys.LOGPROB], -obs[..., 0])
            np.testing.assert_array_equal(traj[keys.VALUE], obs[..., 1] + 0.5)
            # one reply per row, all rows of a step from the same reply, versions increase in time
            v = traj[keys.VERSION]
            assert (v == v[:, :1]).all() and (np.diff(v[:, 0]) > 0).all()
            # the env's answer to row t: its clock advances (or restarts), and obs[t+1] shows the action
            for t in range(T):
                clock, nxt = obs[t, :, 1], obs[t + 1, :, 1]
                ended = clock == L - 1
                np.testing.assert_array_equal(traj[keys.TRUNCATED][t], ended)
                assert not traj[keys.TERMINATED][t].any()
                np.testing.assert_array_equal(nxt, np.where(ended, 0, clock + 1))
                np.testing.assert_array_equal(obs[t + 1, :, 2], np.where(ended, -1, traj[keys.ACTION][t]))
                np.testing.assert_array_equal(obs[t + 1, :, 0], obs[t, :, 0])  # rows never move
                # FakeEnv rewards the action equal to t % n_actions
                np.testing.assert_array_equal(traj[keys.REWARD][t], (traj[keys.ACTION][t] == clock % N_ACTIONS))
        # consecutive trajectories of a slot overlap by one row
        for a, b in zip(trajs, trajs[1:]):
            for key in (keys.ACTION, keys.LOGPROB, keys.VALUE, keys.VERSION):
                np.testing.assert_array_equal(a[key][T], b[key][0])
            np.testing.assert_array_equal(a[keys.OBS][keys.OBS][T], b[keys.OBS][keys.OBS][0])
            # and the trajectory handed out is a copy, not the ring's live buffer
            assert not np.shares_memory(a[keys.ACTION], b[keys.ACTION])


def test_first_trajectory_starts_at_reset_and_time_is_contiguous():
    L, T = 100, 3
    ring, _ = build(n_slots=1, envs_per_slot=2, n_agents=1, episode_length=L, T=T)
    trajs = drive(ring, 3 * T + 1)[0]
    assert len(trajs) == 3
    clocks = [traj[keys.OBS][keys.OBS][:, 0, 1].tolist() for traj in trajs]
    assert clocks == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]


def test_episode_end_truncates_resets_and_reports_returns():
    L, T = 5, 4
    envs = [FakeEnv(n_actions=4, episode_length=L) for _ in range(4)]
    ring = EnvRing([EnvSlot(envs[:2], [10, 11]), EnvSlot(envs[2:], [12, 13])], T)

    def reply(request: NamedArray) -> NamedArray:
        obs = request[keys.OBS][keys.OBS]
        tag, t = obs[:, 0].astype(int), obs[:, 1].astype(int)
        # even tags always pick the rewarded action (t % 4); odd tags never do
        action = np.where(tag % 2 == 0, t % 4, (t + 1) % 4)
        zeros = np.zeros(len(obs), np.float32)
        return NamedArray({keys.ACTION: action, keys.LOGPROB: zeros, keys.VALUE: zeros,
                           keys.VERSION: np.zeros(len(obs), np.int64)})

    pending = {s: start_one(ring, s) for s in range(2)}
    assert ring.pop_episodes() == ([], [])
    for _ in range(L - 1):
        for s in range(2):
            pending[s], _ = step_one(ring, s, reply(pending[s]))
    assert ring.pop_episodes() == ([], [])  # nobody finished yet
    for s in range(2):
        pending[s], _ = step_one(ring, s, reply(pending[s]))
        # the envs were reset: the next request is a fresh first observation
        obs = pending[s][keys.OBS][keys.OBS]
        np.testing.assert_array_equal(obs[:, 1], 0)
        np.testing.assert_array_equal(obs[:, 2], -1)
    returns, lengths = ring.pop_episodes()
    assert sorted(returns) == [0.0, 0.0, float(L), float(L)]
    assert lengths == [L] * 4
    assert ring.pop_episodes() == ([], [])  # popped once only

    # the truncation is recorded in the row of the last step: step L = 5 came after a trajectory of
    # T = 4 steps shipped, so it is row 0 of the ring's current buffer
    for s in range(2):
        assert ring.buffers[s][keys.TRUNCATED][0].all()
        assert not ring.buffers[s][keys.TERMINATED][0].any()

    # a second round of episodes, same returns; env tags survive the reset
    for _ in range(L):
        for s in range(2):
            pending[s], _ = step_one(ring, s, reply(pending[s]))
    returns, lengths = ring.pop_episodes()
    assert sorted(returns) == [0.0, 0.0, float(L), float(L)]
    assert [env.tag for env in envs] == [10, 11, 12, 13]


def test_make_slots_distinct_seeds():
    slots = make_slots(lambda: FakeEnv(), ring_size=3, envs_per_slot=2, seed=5)
    assert [s.seeds for s in slots] == [[5, 6], [7, 8], [9, 10]]
    assert all(s.rows == 2 for s in slots)


def test_rnn_state_is_fed_forward_recorded_and_reset_at_episode_end():
    """The state a reply returns is the next request's state; done rows restart from the initial state."""
    initial = lambda rows: NamedArray({"h": np.full((rows, 2), -1.0, np.float32)})  # noqa: E731
    slot = EnvSlot([FakeEnv(n_agents=2, n_actions=N_ACTIONS, episode_length=3) for _ in range(2)], [100, 200])
    ring = EnvRing([slot], trajectory_length=4, initial_state=initial)
    request = start_one(ring, 0)
    assert (request[keys.RNN_STATE]["h"] == -1).all()
    for step in range(1, 9):
        reply = reply_for(request, step)
        # A counter state: every row's state is the number of steps since its episode began.
        reply[keys.RNN_STATE] = NamedArray({"h": np.maximum(request[keys.RNN_STATE]["h"], 0) + 1})
        request, trajectory = step_one(ring, 0, reply)
        t_in_episode = step % 3  # FakeEnv truncates after 3 steps, then resets
        expected = -1.0 if t_in_episode == 0 else float(t_in_episode)
        assert (request[keys.RNN_STATE]["h"] == expected).all(), (step, request[keys.RNN_STATE]["h"])
        if trajectory is not None:
            # The recorded state of row t is the state the policy was given for row t.
            assert trajectory[keys.RNN_STATE]["h"].shape == (5, 4, 2)
            assert (trajectory[keys.RNN_STATE]["h"][0] == -1).all()


def test_agents_that_finish_early_are_masked_until_the_env_resets():
    env = FakeEnv(n_agents=2, n_actions=N_ACTIONS, agent_lengths=[2, 4])
    ring = EnvRing([EnvSlot([env], [100])], trajectory_length=6)
    request = start_one(ring, 0)
    trajectory = None
    for step in range(1, 8):
        request, trajectory = step_one(ring, 0, reply_for(request, step))
        if trajectory is not None:
            break
    alive = trajectory[keys.ALIVE]
    # agent_1 lives 4 steps per episode; agent_0 only 2, then waits, masked, for the env to reset
    assert alive[:, 1].tolist() == [True] * 7
    assert alive[:, 0].tolist() == [True, True, False, False, True, True, False]
    assert trajectory[keys.REWARD][2:4, 0].tolist() == [0.0, 0.0]  # placeholders earn nothing
    returns, lengths = ring.pop_episodes()
    assert lengths == [4]


def test_env_reported_episode_returns_replace_summed_rewards():
    class Reporting(FakeEnv):
        reports_episodes = True

        def step(self, actions):
            steps = super().step(actions)
            if self.t >= self.episode_length:
                steps[self.agent_ids[0]].info["episode_return"] = 123.0
            return steps

    ring = EnvRing([EnvSlot([Reporting(episode_length=3, n_actions=N_ACTIONS)], [100])], trajectory_length=4)
    request = start_one(ring, 0)
    for step in range(1, 7):
        request, _ = step_one(ring, 0, reply_for(request, step))
    assert ring.pop_episodes()[0] == [123.0, 123.0]


class _Broken(FakeEnv):
    """A FakeEnv whose observation goes bad at step 3."""

    def __init__(self, fault: str, **kwargs):
        super().__init__(**kwargs)
        self.fault = fault

    def _steps(self, actions):
        steps = super()._steps(actions)
        if self.t == 3:
            agent = self.agent_ids[-1]
            if self.fault == "nan":
                steps[agent].obs[keys.OBS][1] = np.nan
            elif self.fault == "shape":
                steps[agent].obs[keys.OBS] = np.zeros(5, np.float32)
        return steps


@pytest.mark.parametrize("fault,message", [("nan", "NaN"), ("shape", "shape (5,)")])
def test_bad_env_output_names_env_agent_and_field(fault, message):
    from srl.envs.checks import BadEnvOutput

    slot = EnvSlot([_Broken(fault, n_agents=2, n_actions=N_ACTIONS)], [100], name="Broken-v0")
    ring = EnvRing([slot], trajectory_length=8)
    request = start_one(ring, 0)
    with pytest.raises(BadEnvOutput) as error:
        for step in range(1, 6):
            request, _ = step_one(ring, 0, reply_for(request, step))
    text = str(error.value)
    assert "Broken-v0" in text and "agent_1" in text and "'obs'" in text and message in text


def test_nan_output_can_skip_the_episode_instead():
    slot = EnvSlot([_Broken("nan", n_actions=N_ACTIONS, episode_length=100)], [100], on_bad_output="skip_episode")
    ring = EnvRing([slot], trajectory_length=8)
    request = start_one(ring, 0)
    for step in range(1, 6):
        request, _ = step_one(ring, 0, reply_for(request, step))
    assert slot.skipped_episodes == 1
    assert np.isfinite(request[keys.OBS][keys.OBS]).all()


def test_an_action_outside_the_space_is_a_clear_error():
    from srl.envs.checks import BadAction

    ring = EnvRing([EnvSlot([FakeEnv(n_actions=3)], [100], name="Fake-v0")], trajectory_length=4)
    request = start_one(ring, 0)
    reply = reply_for(request, 1)
    reply[keys.ACTION] = np.array([7])
    with pytest.raises(BadAction, match="Fake-v0.*outside the action space"):
        step_one(ring, 0, reply)
