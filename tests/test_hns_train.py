"""hns-mappo runs end to end: the hide-and-seek env through the PettingZoo adapter and an entity-attention policy."""

import json

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("mujoco", reason="hide-and-seek needs the mujoco extra")
pytest.importorskip("pettingzoo", reason="hide-and-seek runs through the pettingzoo extra")


def test_hns_mappo_runs_cleanly(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "hns-mappo", "--run-dir", str(run_dir), "actors.count=1", "actors.envs_per_slot=1",
                     "actors.trajectory_length=40", "trainers.batch_steps=80", "stop.env_steps=800",
                     "log.tensorboard=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 800 and summary["policy_version"] >= 1
    assert summary["episode_return_mean"] is not None  # the seekers' return of finished 240-step episodes
    # The env's tool-use statistics reach the metrics lines and the summary, averaged over episodes.
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    env_stats = lines[-1]["env"]
    assert {"box_move_max_m", "ramp_locked_prep", "locks_by_hiders", "seeker_on_ramp_frac",
            "hider_seen_frac"} <= set(env_stats)
    assert 0.0 <= env_stats["hider_seen_frac"] <= 1.0 and env_stats["box_move_max_m"] >= env_stats["box_move_mean_m"]
    assert summary["env"] == env_stats


def test_hns_with_a_policy_per_side_runs_and_checkpoints_each(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    per_side = [f"policies.{side}.trainers.batch_steps=80" for side in ("seeker", "hider")]
    result = run_srl("train", "hns-mappo-2p", "--run-dir", str(run_dir), "actors.count=1", "actors.envs_per_slot=1",
                     "actors.trajectory_length=40", *per_side, "stop.env_steps=800", "log.tensorboard=false",
                     timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 800
    for side in ("seeker", "hider"):
        assert summary[f"{side}/policy_version"] >= 1, summary
        assert list((run_dir / "checkpoints" / side).glob("ckpt-*.pt")), side


def test_score_agents_report_one_teams_return():
    from srl.envs.pettingzoo import PettingZooEnv

    env = PettingZooEnv("srl.envs.hide_and_seek", score_agents=["seeker_0", "seeker_1"])
    assert env.reports_episodes
    steps = env.reset(seed=0)
    total, reported = 0.0, None
    while reported is None:
        steps = env.step({a: env.action_space(a).sample() for a in env.agent_ids})
        total += (steps["seeker_0"].reward + steps["seeker_1"].reward) / 2
        reported = steps[env.agent_ids[0]].info.get("episode_return")
    assert reported == pytest.approx(total)
    with pytest.raises(ValueError, match="score_agents"):
        PettingZooEnv("srl.envs.hide_and_seek", score_agents=["nobody"])
