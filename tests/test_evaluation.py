"""Evaluation during training: when to evaluate, the best score and its checkpoint, the eval
group in the graph, eval metrics in the run's metrics and the stop rule on them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import metrics_lines, train_inline

from srl.api.config import ComponentConfig, ConfigError, EnvConfig, EvaluationConfig, validate
from srl.prepare import resolve_graph as resolve
from srl.envs.fake import FakeEnv
from srl.envs.slots import EnvSlot
from srl.launch.graph import wire
from srl.launch.metrics import RunMetrics, StopRules
from srl.launch.supervision import WorkerState
from srl.learn import checkpoint
from srl.api.worker import StreamEnd
from srl.api.components import make_policy
from srl.workers.evaluator import BestScore, EvalSchedule, Evaluator
from srl.workers.play import play_policy

ENV = EnvConfig(type="fake", args={"n_actions": 3, "episode_length": 6})
POLICY = ComponentConfig(type="actor_critic", args={"hidden": [16]})


def _config(**sections):
    data = {"name": "t", "env": {"type": "gym", "id": "CartPole-v1"}, "stop": {"env_steps": 1000}}
    data.update(sections)
    return validate(data)


# ---------------------------------------------------------------------------- scheduling and best
def test_schedule_by_time_evaluates_each_newer_version_at_most_every_s():
    schedule = EvalSchedule(every_s=10.0, every_versions=None)
    assert schedule.due(0, now=0.0)  # the first version held: at once
    schedule.started(0, 0.0)
    assert not schedule.due(0, now=100.0)  # never the same version twice
    assert not schedule.due(5, now=9.9)
    assert schedule.due(5, now=10.0)
    schedule.started(5, 10.0)
    assert not schedule.due(6, now=15.0)


def test_schedule_by_versions_and_by_both():
    schedule = EvalSchedule(every_s=None, every_versions=3)
    schedule.started(2, 0.0)
    assert not schedule.due(4, now=1e9)  # time alone never triggers
    assert schedule.due(5, now=0.0)
    both = EvalSchedule(every_s=60.0, every_versions=3)
    both.started(0, 0.0)
    assert both.due(3, now=1.0) and both.due(1, now=60.0) and not both.due(2, now=59.0)


def test_best_score_takes_only_strictly_better_scores():
    best = BestScore()
    assert best.offer(10.0, 1)
    assert not best.offer(10.0, 2) and not best.offer(float("nan"), 3) and not best.offer(9.0, 4)
    assert best.offer(11.0, 5) and (best.score, best.version) == (11.0, 5)


def test_evaluation_needs_a_schedule_and_the_eval_stop_rule_needs_evaluation():
    with pytest.raises(ConfigError, match="evaluation: set every_s or every_versions"):
        validate(_config().model_dump() | {"evaluation": {"count": 1, "every_s": None}})
    with pytest.raises(ConfigError, match=r"stop.eval_return: needs an evaluation worker"):
        _config(stop={"eval_return": 500})
    assert _config(stop={"eval_return": 500}, evaluation={"count": 1}).stop.eval_return == 500


# ---------------------------------------------------------------------------- playing
class UnevenEnv(FakeEnv):
    """Episodes of 3 steps from even seeds, 20 from odd ones."""

    def reset(self, seed=None):
        if seed is not None:
            self.agent_lengths = [3 if seed % 2 == 0 else 20]
        return super().reset(seed)


def test_each_env_plays_its_share_so_short_episodes_are_not_favoured():
    slot = EnvSlot([UnevenEnv(), UnevenEnv()], seeds=[0, 1])
    policy = make_policy(POLICY, *slot.spaces)
    for _ in range(2):  # played again, the slot starts its episodes afresh (none half-counted from before)
        result = play_policy(slot, policy, episodes=4, deterministic=True)
        # Whichever end first would be four 3-step episodes of env 0; each env plays two instead.
        assert result.episodes == 4 and result.length_mean == (3 + 3 + 20 + 20) / 4


def test_evaluator_reports_metrics_and_keeps_the_best_weights_with_their_score(tmp_path):
    settings = EvaluationConfig(count=1, envs=2, episodes=4, deterministic=True, every_s=1.0, every_versions=None)
    evaluator = Evaluator(ENV, POLICY, settings, tmp_path, seed=7)
    trained = make_policy(POLICY, *evaluator.slot.spaces)
    assert not evaluator.due(0.0)  # nothing held yet
    evaluator.hold(3, trained.get_params())
    assert evaluator.due(0.0)
    report = evaluator.evaluate(0.0, env_steps=1234)
    assert report["eval_version"] == 3 and report["eval_episodes"] == 4 and report["eval_best_version"] == 3
    assert 0 <= report["eval_return_mean"] <= 6
    saved = checkpoint.info(tmp_path / "best.pt")
    assert saved["version"] == 3 and saved["eval_return_mean"] == report["eval_return_mean"]
    assert saved["env_steps"] == 1234 and saved["policy_only"]
    assert checkpoint.latest(tmp_path) is None  # outside the rotation: never taken for a resume
    loaded = make_policy(POLICY, *evaluator.slot.spaces)
    loaded.load_state_dict(checkpoint.load(tmp_path / "best.pt")["policy"])
    for (_, a), (_, b) in zip(loaded.get_params().items_flat(), trained.get_params().items_flat()):
        np.testing.assert_array_equal(a, b)  # the very weights that scored
    # A version that scores no better leaves `best` alone; a restarted evaluator knows the score to beat.
    evaluator.best.score = math.inf
    evaluator.hold(4, make_policy(POLICY, *evaluator.slot.spaces).get_params())
    assert evaluator.evaluate(2.0)["eval_best_version"] == 3
    assert checkpoint.info(tmp_path / "best.pt")["version"] == 3
    evaluator.close()
    again = Evaluator(ENV, POLICY, settings, tmp_path, seed=7)
    assert (again.best.score, again.best.version) == (report["eval_return_mean"], 3)
    again.close()


# ---------------------------------------------------------------------------- graph and metrics
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_evaluation_adds_an_eval_group_reading_parameters(algorithm):
    assert "eval" not in resolve(_config(algorithm={"type": algorithm})).graph.groups  # off by default
    config = _config(algorithm={"type": algorithm}, evaluation={"count": 1, "episodes": 3})
    graph = resolve(config)
    group = graph.graph.groups["eval"]
    assert group.kind == "eval" and group.placement.nice == 10 and group.settings.evaluation.episodes == 3
    assert "eval" in graph.describe()["streams"]["parameters"]["consumers"]
    specs = {s.name: s for s in wire(graph, "auto", lambda name: "h", seed=1, run_dir="/tmp/x",
                                     control=StreamEnd("control", "shm"))}
    assert specs["eval.0"].streams["parameters"] == specs["trainer.0"].streams["parameters"]


def test_eval_metrics_land_once_in_the_next_line_and_can_stop_the_run():
    config = _config(stop={"eval_return": 400}, evaluation={"count": 1})
    specs = {s.name: s for s in wire(resolve(config), "auto", lambda name: "h", seed=1, run_dir="/tmp/x",
                                     control=StreamEnd("control", "shm"))}
    evaluator, actor = WorkerState(specs["eval.0"], None), WorkerState(specs["actor.0"], None, ("env_steps",))
    metrics, rules = RunMetrics(), StopRules(config.stop)
    metrics.take(evaluator, {"evaluations": 1, "metrics": {"eval_return_mean": 350.0, "eval_version": 4}})
    metrics.take(actor, {"env_steps": 100})
    line = metrics.record([evaluator, actor], elapsed=1.0, fps=1.0)
    assert (line["eval_return_mean"], line["eval_version"], line["env_steps"]) == (350.0, 4, 100)
    json.dumps(line)
    assert "eval_return_mean" not in metrics.record([evaluator, actor], elapsed=2.0, fps=1.0)  # once
    assert rules.reason(metrics, 100, 2.0) is None
    metrics.take(evaluator, {"metrics": {"eval_return_mean": 400.0, "eval_version": 9}})
    assert rules.reason(metrics, 100, 3.0) == "eval_return_mean 400.0 >= 400.0"
    metrics.freeze()  # an evaluation that ends while the run stops still reaches the summary (as best.pt does)
    metrics.take(evaluator, {"metrics": {"eval_best_return": 420.0}})
    assert metrics.reported["eval_best_return"] == 420.0


# ---------------------------------------------------------------------------- a real run
def _evaluations(run_dir: Path) -> list[dict]:
    return [line for line in metrics_lines(run_dir) if "eval_return_mean" in line]


@pytest.mark.integration
def test_cartpole_run_reports_evaluations_on_schedule_and_keeps_a_best_checkpoint(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    every_s = 2.0
    train_inline(run_dir, "cartpole-ppo", "evaluation.count=1", f"evaluation.every_s={every_s}",
                 "evaluation.episodes=4", "evaluation.envs=4", "stop.episode_return=null", "log.tensorboard=true",
                 until=lambda run: len(_evaluations(run)) >= 3, what="three evaluations")
    evals = _evaluations(run_dir)
    assert len(evals) >= 3, evals
    versions = [line["eval_version"] for line in evals]
    assert versions == sorted(set(versions))  # each version once, newer each time
    # Never more often than declared: a result reaches a line up to a heartbeat and a report late, so
    # two lines may come closer than every_s, but n of them span at least (n - 1) intervals, less that.
    span = evals[-1]["time_s"] - evals[0]["time_s"]
    assert span >= (len(evals) - 1) * every_s - 2.0, [line["time_s"] for line in evals]
    assert all(line["eval_episodes"] == 4 for line in evals)
    best = max(line["eval_return_mean"] for line in evals)
    assert evals[-1]["eval_best_return"] >= best
    summary = json.loads((run_dir / "summary.json").read_text())
    # At least the last reported best: an evaluation that ends while the run stops reaches the
    # summary and best.pt, not metrics.jsonl, whose lines stop with the window that met the stop
    # (RunMetrics.freeze, tested above). The sidecar pins the summary to the best checkpoint.
    assert summary["eval_best_return"] >= evals[-1]["eval_best_return"]
    sidecar = json.loads((run_dir / "checkpoints" / "best.json").read_text())
    assert sidecar["eval_return_mean"] == summary["eval_best_return"]
    assert sidecar["version"] == summary["eval_best_version"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert {"eval_return_mean", "eval_version", "eval_episodes"} <= set(events.Tags()["scalars"])
    played = run_srl("evaluate", str(run_dir), "best", "--episodes", "4", "--envs", "4", "--deterministic",
                     "--json", str(tmp_path / "best.json"))
    assert played.returncode == 0, played.stderr[-3000:]
    assert json.loads((tmp_path / "best.json").read_text())["agents"] == {"agent": "best.pt"}


@pytest.mark.integration
def test_the_final_version_is_evaluated_so_best_is_the_best_of_the_whole_run(run_srl, tmp_path):
    """`srl train cartpole-ppo evaluation.count=1` solves CartPole in seconds, long before the
    30 s schedule comes round again: the version the run stops with is evaluated as it stops,
    and that evaluation competes for `best` like any other."""
    run_dir = tmp_path / "run"
    summary = train_inline(run_dir, "cartpole-ppo", "evaluation.count=1")
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    assert summary["eval_version"] == summary["policy_version"] > 0, summary
    assert summary["eval_best_return"] >= summary["eval_return_mean"], summary
    sidecar = json.loads((run_dir / "checkpoints" / "best.json").read_text())
    assert (sidecar["version"], sidecar["eval_return_mean"]) == (summary["eval_best_version"],
                                                                  summary["eval_best_return"])
    # `best` plays as a balancing policy; not to 475, as the run stops on its sampled return and a
    # deterministic replay of that version on other seeds may fall short of it.
    played = run_srl("evaluate", str(run_dir), "best", "--deterministic", "--episodes", "20",
                     "--json", str(tmp_path / "best.json"))
    assert played.returncode == 0, played.stderr[-3000:]
    assert json.loads((tmp_path / "best.json").read_text())["return_mean"] >= 300
