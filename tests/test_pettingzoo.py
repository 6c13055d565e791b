"""PettingZoo adapter: spaces, reset/step semantics, agents that finish early, and MAPPO on simple_spread."""

import json

import gymnasium as gym
import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo", reason="needs the pettingzoo extra: pip install -e '.[pettingzoo]'")

from srl.api.agents import DEFAULT_POLICY
from srl.api.components import make_env  # noqa: E402
from srl.data.named_array import NamedArray  # noqa: E402
from srl.envs.pettingzoo import PettingZooEnv  # noqa: E402
from srl.envs.slots import EnvSlot, SlotStep  # noqa: E402

#: Mean return of the uniformly random policy on simple_spread (N=3, max_cycles=25, local_ratio
#: 0.5), averaged over agents: -27.5 +- 0.4 over 400 episodes; a 100-episode window wanders
#: between about -29 and -25.5.
RANDOM_SPREAD_RETURN = -27.0


def needs_mpe2():
    return pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2): pip install -e '.[pettingzoo]'")


class TwoAgents(pettingzoo.ParallelEnv):
    """Agent `a` terminates after `a_steps`; agent `b` is truncated after `b_steps`.

    Observations are `[t, agent index]`; each agent's reward is its action. `state_mode`
    picks how the global state is offered: a declared `state_space`, only a `state()`
    method, or none. Step checks that actions come only for live agents, as PettingZoo expects.
    """

    metadata = {"name": "two_agents"}

    def __init__(self, a_steps: int = 2, b_steps: int = 4, state_mode: str = "space", b_obs_size: int = 2) -> None:
        self.possible_agents = ["a", "b"]
        self.a_steps, self.b_steps, self.state_mode = a_steps, b_steps, state_mode
        self._spaces = {"a": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                        "b": gym.spaces.Box(-np.inf, np.inf, (b_obs_size,), np.float32)}
        if state_mode == "space":
            self.state_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.t = 0
        self.agents: list[str] = []

    def observation_space(self, agent):
        return self._spaces[agent]

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def state(self):
        if self.state_mode == "none":
            raise NotImplementedError
        return np.array([self.t, len(self.agents), 7], np.float32)

    def _obs(self, agent):
        return np.array([self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        terminated = {a: a == "a" and self.t >= self.a_steps for a in self.agents}
        truncated = {a: a == "b" and self.t >= self.b_steps for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {"t": self.t} for a in obs}


# ------------------------------------------------------------------------ the adapter, on a tiny env
def test_spaces_and_state_field():
    env = PettingZooEnv(TwoAgents())
    assert env.agent_ids == ("a", "b")
    space = env.observation_space("a")
    assert set(space.spaces) == {"obs", "state"}
    assert space["obs"].shape == (2,) and space["state"].shape == (3,) and space["obs"].dtype == np.float32
    assert env.action_space("b") == gym.spaces.Discrete(3)
    steps = env.reset(seed=0)
    assert set(steps) == {"a", "b"}
    for agent, st in steps.items():
        assert space.contains(st.obs), (agent, st.obs)
        assert not st.done
    np.testing.assert_array_equal(steps["a"].obs["state"], steps["b"].obs["state"])


@pytest.mark.parametrize("mode,has_state", [("space", True), ("method", True), ("none", False)])
def test_state_is_offered_only_when_the_env_has_one(mode, has_state):
    env = PettingZooEnv(TwoAgents(state_mode=mode))
    assert env.has_state is has_state
    assert ("state" in env.observation_space("a").spaces) is has_state
    assert ("state" in env.reset()["a"].obs) is has_state


def test_agent_finishing_early_gets_placeholder_steps():
    env = PettingZooEnv(TwoAgents(a_steps=2, b_steps=4))
    env.reset(seed=1)
    first = env.step({"a": np.int64(1), "b": np.int64(2)})
    assert (first["a"].reward, first["b"].reward) == (1.0, 2.0)
    assert not any(st.done for st in first.values())
    second = env.step({"a": np.int64(1), "b": np.int64(0)})
    assert second["a"].terminated and not second["a"].truncated  # termination, reported once by the env
    assert second["a"].obs["obs"][0] == 2  # the real last observation, not a placeholder
    assert not second["b"].done
    for t in (3, 4):
        # `a` is gone from env.agents: the adapter must not pass its action on (the env asserts it).
        steps = env.step({"a": np.int64(2), "b": np.int64(1)})
        placeholder = steps["a"]
        assert placeholder.terminated and not placeholder.truncated and placeholder.reward == 0.0
        for name, value in placeholder.obs.items():
            assert not value.any() and value.dtype == env.observation_space("a")[name].dtype
        assert steps["b"].reward == 1.0 and steps["b"].obs["obs"][0] == t
    assert steps["b"].truncated and not steps["b"].terminated  # truncation, not termination
    assert all(st.done for st in steps.values())


def test_env_ring_masks_the_finished_agent_and_resets_when_all_are_done():
    env = PettingZooEnv(TwoAgents(a_steps=2, b_steps=4))
    slot = EnvSlot([env], seeds=[0])
    obs = NamedArray({k: np.zeros((2, *s.shape), s.dtype) for k, s in env.observation_space("a").spaces.items()})
    alive = np.zeros(2, bool)
    slot.reset_all({DEFAULT_POLICY: obs}, {DEFAULT_POLICY: alive})
    assert alive.all()
    history = []
    for _ in range(5):
        out = SlotStep(np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, bool),
                       NamedArray({k: v.copy() for k, v in obs.items_flat()}))
        finished, _ = slot.step({DEFAULT_POLICY: np.array([1, 1])}, {DEFAULT_POLICY: out})
        history.append((out.alive.tolist(), out.terminated.tolist(), out.truncated.tolist(), list(out.reset_rows), finished))
    assert [h[0] for h in history] == [[True, True], [False, True], [False, True], [True, True], [True, True]]
    assert history[1][1] == [True, False]  # a terminated at step 2
    assert history[3][2] == [False, True] and history[3][3] == [0, 1]  # b truncated at step 4: the env resets
    assert history[3][4] == [(pytest.approx((2 * 1 + 4 * 1) / 2), 4)]  # mean over agents of their returns
    assert not any(h[4] for h in history[:3])


def test_agents_may_differ_in_spaces_but_one_policy_for_all_of_them_is_refused():
    env = PettingZooEnv(TwoAgents(b_obs_size=5))
    assert env.observation_space("a")["obs"].shape == (2,) and env.observation_space("b")["obs"].shape == (5,)
    with pytest.raises(ValueError, match="TwoAgents.*'a' and 'b' have different"):
        EnvSlot([env], [0], name="TwoAgents")


def test_kwargs_with_a_built_env_are_refused():
    with pytest.raises(ValueError, match="keyword arguments"):
        PettingZooEnv(TwoAgents(), max_cycles=3)


# ------------------------------------------------------------------------ the adapter, on mpe2
SPREAD = {"N": 3, "max_cycles": 25, "continuous_actions": False}


def test_simple_spread_spaces_dtypes_and_seeds():
    needs_mpe2()
    env = make_env({"type": "pettingzoo", "id": "mpe2.simple_spread_v3", "args": SPREAD})
    assert env.agent_ids == ("agent_0", "agent_1", "agent_2")
    space = env.observation_space("agent_1")
    assert space["obs"].shape == (18,) and space["state"].shape == (54,)
    assert space["obs"].dtype == np.float32 and space["state"].dtype == np.float32
    assert env.action_space("agent_0") == gym.spaces.Discrete(5)
    first = env.reset(seed=3)
    again = env.reset(seed=3)
    for agent in env.agent_ids:
        assert first[agent].obs["obs"].dtype == np.float32 and first[agent].obs["obs"].shape == (18,)
        np.testing.assert_array_equal(first[agent].obs["obs"], again[agent].obs["obs"])
        np.testing.assert_array_equal(first[agent].obs["state"], first["agent_0"].obs["state"])
    assert not np.array_equal(first["agent_0"].obs["obs"], first["agent_1"].obs["obs"])
    rng = np.random.default_rng(0)
    for t in range(1, 26):
        steps = env.step({a: rng.integers(0, 5) for a in env.agent_ids})
        done = [st.done for st in steps.values()]
        assert all(done) == (t == 25) and any(done) == (t == 25)
        assert all(np.isfinite(st.reward) and st.reward <= 0 for st in steps.values())
    assert all(st.truncated and not st.terminated for st in steps.values())  # max_cycles truncates
    env.close()


def test_ids_by_callable_and_aec_envs_are_converted():
    needs_mpe2()
    from mpe2 import simple_spread_v3

    by_callable = PettingZooEnv("mpe2.simple_spread_v3:parallel_env", N=2)
    from_aec = PettingZooEnv("mpe2.simple_spread_v3:env", N=2)
    built = PettingZooEnv(simple_spread_v3.parallel_env(N=2))
    for env in (by_callable, from_aec, built):
        assert env.agent_ids == ("agent_0", "agent_1") and env.has_state
        env.reset(seed=0)
        assert set(env.step({a: 0 for a in env.agent_ids})) == {"agent_0", "agent_1"}


def test_old_pettingzoo_mpe_path_fails_with_a_clear_error():
    needs_mpe2()
    from srl.api.registry import RegistryError

    with pytest.raises(RegistryError, match="pettingzoo.mpe"):
        PettingZooEnv("pettingzoo.mpe.simple_spread_v3")


# ------------------------------------------------------------------------ real runs
def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.integration
def test_spread_runs_through_actor_policy_worker_and_trainer(run_srl, tmp_path):
    """A few hundred env steps through remote inference (the dict observation crosses the streams)."""
    needs_mpe2()
    run_dir = tmp_path / "run"
    result = run_srl("train", "spread-mappo", "--run-dir", str(run_dir), "actors.count=1", "actors.inference=remote",
                     "actors.envs_per_slot=4", "actors.ring_size=2", "trainers.batch_steps=300", "stop.env_steps=400",
                     "log.tensorboard=false", "log.progress=false", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(run_dir)
    assert summary["env_steps"] >= 400 and summary["stop_reason"].startswith("env_steps"), summary
    assert summary["policy_version"] >= 1, summary
    assert summary["episode_return_mean"] is not None and summary["episode_return_mean"] < 0, summary


@pytest.mark.integration
def test_spread_mappo_beats_the_random_policy(run_srl, tmp_path):
    """The multi-agent path learns: -22.5 is ~4.5 points above random, reached by ~20k env steps (~20 s)."""
    needs_mpe2()
    run_dir = tmp_path / "run"
    result = run_srl("train", "spread-mappo", "--run-dir", str(run_dir), "stop.episode_return=-22.5",
                     "stop.env_steps=100000", "log.tensorboard=false", "log.progress=false", timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(run_dir)
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    assert summary["episode_return_mean"] >= RANDOM_SPREAD_RETURN + 4.5, summary
