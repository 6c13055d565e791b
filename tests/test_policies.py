"""Several policies in one run: the config's `policies:`/`agents:`, routing agents' rows to their
policy, one trainer group per policy, and learning on an env whose agents' spaces differ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import train_inline

from srl.api import config as cfg
from srl.api.agents import AgentRouter
from srl.api.config import ConfigError
from srl.prepare import resolve_graph as resolve
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.fake import TeamsEnv
from srl.envs.slots import EnvSlot
from srl.workers.env_ring import EnvRing
from srl.workers.play import play

USER_CODE = Path(__file__).resolve().parent / "user_code"
TEAMS = "srl.envs.fake:TeamsEnv"
#: Mean return of uniformly random actions on simple_speaker_listener (max_cycles 25), the
#: same for both agents (a shared reward): -38.3 +- 1.7 over 400 episodes (`srl evaluate
#: --agents speaker=random listener=random`), -40.9 +- 1.6 over another 400.
RANDOM_SPEAKER_LISTENER_RETURN = -38.3


def teams_config(**changes) -> dict:
    data = {"name": "teams", "env": {"type": TEAMS},
            "policies": {"scouts": {"trainers": {"batch_steps": 64}}, "guards": {"trainers": {"batch_steps": 128}}},
            "agents": [{"match": "scout_*", "policy": "scouts"}, {"match": "guard_*", "policy": "guards"}],
            "actors": {"count": 1, "ring_size": 1, "envs_per_slot": 8, "trajectory_length": 8, "inference": "inline"},
            "stop": {"env_steps": 1000}}
    data.update(changes)
    return data


def error(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(cfg.validate(data))
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------------------ config
def test_two_policies_make_a_trainer_group_and_streams_each_and_one_actor_group_joined_to_both():
    graph = resolve(cfg.validate(teams_config())).describe()
    assert set(graph["groups"]) == {"trainer-scouts", "trainer-guards", "actor"}
    assert graph["groups"]["actor"]["streams"] == {
        "samples/scouts": "samples-scouts", "parameters/scouts": "parameters-scouts",
        "samples/guards": "samples-guards", "parameters/guards": "parameters-guards"}
    assert graph["streams"]["samples-guards"] == {"kind": "samples", "producers": ["actor"],
                                                  "consumers": ["trainer-guards"]}
    remote = resolve(cfg.validate(teams_config(actors={"count": 2, "inference": "remote"}))).describe()
    assert remote["groups"]["actor"]["streams"]["inference/guards"] == "inference-guards"
    # one policy group serves both policies, its ports joined once per policy ...
    assert set(remote["groups"]) == {"trainer-scouts", "trainer-guards", "policy", "actor"}
    assert remote["groups"]["policy"]["streams"] == {
        "inference/scouts": "inference-scouts", "parameters/scouts": "parameters-scouts",
        "inference/guards": "inference-guards", "parameters/guards": "parameters-guards"}
    # ... or each policy has policy workers of its own
    separate = resolve(cfg.validate(teams_config(actors={"count": 2, "inference": "remote"},
                                                 policy_workers={"shared": False}))).describe()
    assert {"policy-scouts", "policy-guards"} <= set(separate["groups"]) and "policy" not in separate["groups"]
    assert separate["groups"]["policy-guards"]["streams"] == {"inference": "inference-guards",
                                                              "parameters": "parameters-guards"}


def test_the_one_policy_config_is_unchanged():
    graph = resolve(cfg.load("cartpole-ppo")).describe()
    assert set(graph["groups"]) == {"trainer", "actor"}
    assert graph["groups"]["actor"]["streams"] == {"samples": "samples", "parameters": "parameters"}


@pytest.mark.parametrize("changes, message", [
    ({"agents": [{"match": "scout_*", "policy": "scouts"}, {"match": "guard_*", "policy": "gaurds"}]},
     "agents[1].policy: no policy 'gaurds' (policies: scouts, guards)"),
    ({"agents": [{"match": "scout_*", "policy": "scouts"}, {"match": "guard_0", "policy": "guards"}]},
     "agents: the env's agent 'guard_1' matches no rule (patterns: scout_*, guard_0)"),
    ({"agents": [{"match": "*", "policy": "scouts"}, {"match": "guard_*", "policy": "guards"}]},
     "policies.guards: no agent of the env maps to it"),
    ({"agents": [{"match": "scout_*", "policy": "scouts"}, {"match": "guard_0", "policy": "guards"},
                 {"match": "guard_1", "policy": "scouts"}]},
     "agents: 'scout_0' and 'guard_1' both act with policy 'scouts' but have different observation or action spaces"),
    ({"agents": []}, "agents: required with `policies:`"),
    ({"policy": {"type": "actor_critic"}}, "policy: with `policies:` each policy has its own"),
    ({"policies": {"bad-name": {}}}, "policies.bad-name: a policy name is letters, digits and _"),
    ({"evaluation": {"count": 1}}, "evaluation.count: the evaluation worker plays one policy"),
    ({"policies": {"scouts": {"algorithm": {"type": "dqn"}}, "guards": {}}},
     "policies.scouts.algorithm.type: 'dqn' trains in a graph with buffer workers"),
    ({"policies": {"scouts": {"algorithm": {"type": "ppo", "args": {"lr": -1}}}, "guards": {}}},
     "policies.scouts.algorithm.args.lr"),
    ({"policies": {"scouts": {"trainers": {"count": 2}}, "guards": {}}},
     "policies.scouts.trainers.count: 2 trainers cannot be placed with 1 actors"),
])
def test_a_bad_policies_section_is_one_line_naming_the_field(changes, message):
    assert message in error(teams_config(**changes))


def test_agents_without_policies_is_an_error():
    data = {**cfg.read_config_file("cartpole-ppo"), "agents": [{"match": "*", "policy": "x"}]}
    assert "agents: maps agents to the policies of a `policies:` section" in error(data)


def test_the_dumped_config_loads_again():
    config = cfg.validate(teams_config())
    again = cfg.validate(yaml.safe_load(cfg.dump(config)))
    assert again.policies == config.policies and again.agents == config.agents


def test_one_policy_for_agents_whose_spaces_differ_is_refused_naming_them():
    with pytest.raises(ValueError, match="agents 'scout_0' and 'guard_0' have different observation or action"):
        EnvSlot([TeamsEnv()], [0], name="teams")


# ------------------------------------------------------------------------ routing
def test_rules_first_match_wins_and_rows_follow_the_env_order():
    router = AgentRouter.from_rules(["seeker_0", "hider_0", "seeker_1", "hider_1"],
                                    [("seeker_1", "special"), ("seeker_*", "seeker"), ("*", "hider")])
    assert router.policy_of == {"seeker_0": "seeker", "hider_0": "hider", "seeker_1": "special", "hider_1": "hider"}
    assert router.policies == ("seeker", "hider", "special")
    assert router.agents_of("hider") == ("hider_0", "hider_1")
    assert router.rows_of("hider", n_envs=2).tolist() == [1, 3, 5, 7]
    assert router.rows_of("special", n_envs=2).tolist() == [2, 6]


def test_each_policys_rows_get_its_agents_observations_and_its_actions_reach_its_agents():
    """Two envs of one scout and two guards, stepped through the ring: every trajectory
    of a policy holds only its team's rows (marker, observation size), and each policy's
    actions reach its own agents (the right action earns 1, so every reward is 1)."""
    envs = [TeamsEnv(scouts=1, guards=2, episode_length=5) for _ in range(2)]
    router = AgentRouter.from_rules(envs[0].agent_ids, [("scout_*", "scouts"), ("guard_*", "guards")])
    slot = EnvSlot(envs, [0, 1], name="teams", policy_of=router.policy_of)
    assert {p: (g.rows, g.obs_fields[keys.OBS][0]) for p, g in slot.groups.items()} == {
        "scouts": (2, (3,)), "guards": (4, (5,))}
    ring = EnvRing([slot], trajectory_length=4)
    requests = ring.start(0)
    trajectories = {"scouts": [], "guards": []}
    n_actions = {"scouts": 2, "guards": 4}
    for _ in range(13):
        replies = {}
        for policy, request in requests.items():
            obs = request[keys.OBS][keys.OBS]
            t = obs[:, 1].astype(int)  # every row's own time step: the rewarded action is t % n_actions
            replies[policy] = NamedArray({keys.ACTION: t % n_actions[policy],
                                          keys.VERSION: np.zeros(len(obs), np.int64)})
        requests, done = ring.step(0, replies)
        for policy, trajectory in (done or {}).items():
            trajectories[policy].append(trajectory)
    assert len(trajectories["scouts"]) == len(trajectories["guards"]) == 3
    for policy, marker, rows, size in (("scouts", 1.0, 2, 3), ("guards", 2.0, 4, 5)):
        for trajectory in trajectories[policy]:
            obs = trajectory[keys.OBS][keys.OBS]
            assert obs.shape == (5, rows, size)
            assert (obs[..., 0] == marker).all()
            assert (trajectory[keys.REWARD][:-1] == 1.0).all()
    assert ring.env_steps == 13 * 2
    by_policy = ring.pop_policy_episodes()
    assert by_policy["scouts"] == by_policy["guards"] == [5.0] * 4  # each env: two episodes of 5 rewarded steps


class _TimeKeeper(Policy):
    """Plays TeamsEnv perfectly (the action is the step number, an observation, modulo its
    actions), or always `constant`."""

    def __init__(self, observation_space, action_space, constant: int | None = None) -> None:
        self.n, self.constant = action_space.n, constant

    def initial_state(self, batch):
        return NamedArray()

    def rollout(self, obs, state, deterministic=False):
        action = obs[keys.OBS][:, 1].astype(np.int64) % self.n
        if self.constant is not None:
            action[:] = self.constant
        zeros = np.zeros(len(action), np.float32)
        return NamedArray({keys.ACTION: action, keys.LOGPROB: zeros, keys.VALUE: zeros})

    def analyze(self, batch, entropy=True):
        raise NotImplementedError

    def get_params(self):
        return NamedArray()

    def set_params(self, params, version):
        self.version = version


def test_playing_several_policies_reports_each_policys_return():
    """Scouts play perfectly and guards badly (always action 3, right one step in four): each
    policy's return is its own agents'; the episode's is the mean over all agents."""
    envs = [TeamsEnv(scouts=1, guards=2, episode_length=8) for _ in range(3)]
    router = AgentRouter.from_rules(envs[0].agent_ids, [("scout_*", "scouts"), ("guard_*", "guards")])
    slot = EnvSlot(envs, [0, 1, 2], name="teams", policy_of=router.policy_of)
    scouts = _TimeKeeper(*slot.groups["scouts"].spaces)
    guards = _TimeKeeper(*slot.groups["guards"].spaces, constant=3)
    played = play(slot, {"s": ("scouts", scouts, np.arange(3)), "g": ("guards", guards, np.arange(6))},
                  episodes=6, deterministic=True, labels={})
    assert played.episodes == 6 and played.length_mean == 8
    assert played.policy_returns == {"scouts": 8.0, "guards": 2.0}  # actions right at t = 4 and 8: (t - 1) % 4 == 3
    assert played.return_mean == pytest.approx((8 + 2 * 2) / 3)


# ------------------------------------------------------------------------ real runs
@pytest.mark.integration
@pytest.mark.parametrize("inference", ["inline", "remote"])
def test_two_policies_on_differing_spaces_each_train_on_their_own_agents(run_srl, tmp_path, monkeypatch, inference):
    """Each trainer's version advances and it trains only on its own team's rows (`MarkerPPO`
    reports the team marker and observation size of every batch). Remote: one policy worker
    serves both policies, and holds each one's newer versions as they come."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(USER_CODE), os.environ.get("PYTHONPATH")])))
    data = teams_config()
    for spec in data["policies"].values():
        spec["algorithm"] = {"type": "marker_ppo:MarkerPPO", "args": {"epochs": 1, "minibatches": 1}}
    data["actors"].update({"count": 2, "inference": inference, "ring_size": 2 if inference == "remote" else 1})
    if inference == "remote":  # and two data-parallel trainers for one policy, beside the other's one
        data["policies"]["guards"]["trainers"]["count"] = 2
    data["stop"] = {"env_steps": 3000}
    data["log"] = {"tensorboard": False, "progress": False, "report_interval_s": 0.5}
    path = tmp_path / "teams.yaml"
    path.write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "run"
    if inference == "inline":  # and the launcher: every worker in this process
        monkeypatch.syspath_prepend(str(USER_CODE))
        train_inline(run_dir, str(path), "log.progress=false")
    else:
        result = run_srl("train", str(path), "--run-dir", str(run_dir), timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    for policy, marker, size in (("scouts", 1.0, 3), ("guards", 2.0, 5)):
        assert summary[f"{policy}/policy_version"] >= 2, summary
        train = summary[f"{policy}/train"]
        assert train["marker_min"] == train["marker_max"] == marker and train["obs_size"] == size, summary
        assert summary[f"{policy}/episode_return_mean"] is not None
        assert any((run_dir / "checkpoints" / policy).glob("ckpt-*.pt"))
    assert not list((run_dir / "checkpoints").glob("ckpt-*.pt"))  # only per-policy checkpoints
    if inference == "remote":
        workers = {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
        assert [n for n in workers if n.startswith("policy")] == ["policy.0"]
        served = workers["policy.0"]["stats"]
        assert served["scouts/policy_version"] >= 2 and served["guards/policy_version"] >= 2, served
    if inference == "inline":  # each agent plays its own policy's checkpoint, or another source
        from srl.evaluate import evaluate

        played = evaluate(run_dir, episodes=4, envs=2, agents={"guard": "initial"})
        assert played.episodes == 4 and played.agents["scout_0"].startswith("scouts/ckpt-")
        assert played.agents["guard_1"] == "guards/initial"
        assert set(played.policy_returns) == {"scouts", "guards"}


@pytest.mark.integration
def test_speaker_listener_with_a_policy_each_beats_the_random_policy(run_srl, tmp_path):
    """Speaker (3 observations, 3 actions) and listener (11, 5): -25 is 13 points above random
    (8 standard errors of a 100-episode window), passed after 10.9k-14.1k env steps (27-44 s
    on 2 busy cores)."""
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2): pip install -e '.[pettingzoo]'")
    run_dir = tmp_path / "run"
    result = run_srl("train", "speaker-listener-mappo", "--run-dir", str(run_dir), "stop.episode_return=-25",
                     "stop.env_steps=80000", "log.tensorboard=false", "log.progress=false", timeout=170)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    for policy in ("speaker", "listener"):
        assert summary[f"{policy}/episode_return_mean"] >= RANDOM_SPEAKER_LISTENER_RETURN + 13, summary


@pytest.mark.integration
def test_adversary_mappo_trains_both_teams(tmp_path):
    """The bundled two-team config runs: both policies train and report their own returns."""
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2): pip install -e '.[pettingzoo]'")
    summary = train_inline(tmp_path / "run", "adversary-mappo", "stop.env_steps=4000")
    for team in ("adversary", "good"):
        assert summary[f"{team}/policy_version"] >= 1 and summary[f"{team}/episode_return_mean"] is not None, summary
    assert summary["episode_return_mean"] == pytest.approx(summary["good/episode_return_mean"])  # score_agents: good
