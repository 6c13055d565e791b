"""Population-based training: the exploit/explore rule, the config, the graph, the controller's
relay of commands, live hyper-parameters, and one small population that really copies."""

import json
import random
from pathlib import Path

import pytest
import torch
from conftest import train_inline

from srl.api.config import ConfigError, load
from srl.api.run_paths import RunPaths
from srl.launch.modes.population import POPULATION_GROUP
from srl.prepare import resolve_graph as resolve
from srl.api.worker import Supervision
from srl.launch.graph import wire
from srl.launch.modes.population import Population
from srl.launch.supervision import WorkerState
from srl.api.worker import CONTROL_KEY, StreamEnd
from srl.workers.population import PBT, Member

LR = {"lr": (1e-4, 1e-2)}


def _rule(seed: int = 0, quantile: float = 0.25, factors=(0.8, 1.25)) -> PBT:
    return PBT(quantile, LR, {"lr": list(factors)}, random.Random(seed))


def _members(scores, ready=True, lrs=None):
    lrs = lrs or [1e-3] * len(scores)
    return [Member(f"m{i}", s, {"lr": lr}, ready) for i, (s, lr) in enumerate(zip(scores, lrs))]


def test_the_worst_member_copies_the_best_and_explores():
    copies = _rule().decide(_members([10.0, 400.0, 200.0, 30.0], lrs=[1e-5 * 100, 2e-3, 1e-3, 5e-4]))
    assert len(copies) == 1
    (copy,) = copies
    assert (copy.member, copy.source) == ("m0", "m1")
    assert copy.hyperparameters["lr"] in (pytest.approx(2e-3 * 0.8), pytest.approx(2e-3 * 1.25))


def test_half_of_the_population_copies_with_quantile_one_half():
    copies = _rule(quantile=0.5).decide(_members([10.0, 400.0, 200.0, 30.0]))
    assert {c.member for c in copies} == {"m0", "m3"}
    assert {c.source for c in copies} <= {"m1", "m2"}


def test_members_not_ready_unscored_or_no_worse_do_not_copy():
    assert _rule().decide(_members([10.0, 400.0, 200.0, 30.0], ready=False)) == []
    # The worst has no score yet (too few episodes): the worst of the rest is m3, not ready-checked away.
    copies = _rule().decide(_members([None, 400.0, 200.0, 30.0]))
    assert [(c.member, c.source) for c in copies] == [("m3", "m1")]
    assert _rule().decide(_members([None, None, None, 30.0])) == []
    assert _rule().decide(_members([500.0, 500.0, 500.0, 500.0])) == []  # nothing better to copy


def test_a_margin_keeps_members_about_as_good_as_the_best_from_copying():
    rule = PBT(0.25, LR, {"lr": [0.8, 1.25]}, random.Random(0), margin=10.0)
    assert rule.decide(_members([495.0, 500.0, 498.0, 499.0])) == []
    assert [(c.member, c.source) for c in rule.decide(_members([480.0, 500.0, 498.0, 499.0]))] == [("m0", "m1")]


def test_explore_stays_within_bounds():
    rule = _rule(seed=3, factors=(0.1, 10.0))
    for _ in range(200):
        value = rule.explore({"lr": rule.rng.choice([1e-4, 1e-3, 1e-2])})["lr"]
        assert 1e-4 <= value <= 1e-2
    # Both factors are drawn over many tries (the draw is random, not always the first).
    seen = {round(_rule(seed=s).explore({"lr": 1e-3})["lr"], 8) for s in range(20)}
    assert seen == {round(1e-3 * 0.8, 8), round(1e-3 * 1.25, 8)}


def _population_config(*overrides: str):
    return load("cartpole-ppo-pbt", list(overrides))


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"population.hyperparameters.lr.values: 3 values for 4 members"):
        _population_config("population.hyperparameters.lr.values=[0.001, 0.001, 0.001]")
    with pytest.raises(ConfigError, match=r"population.hyperparameters.lr: .*outside \[min, max\]"):
        _population_config("population.hyperparameters.lr.max=0.0005")
    with pytest.raises(ConfigError, match=r"population.hyperparameters.momentum: not a numeric field of algorithm.args"):
        _population_config("population.hyperparameters.momentum={min: 0.1, max: 0.9}")
    with pytest.raises(ConfigError, match=r"population.size"):
        _population_config("population.size=1")
    with pytest.raises(ConfigError, match=r"population: set interval_s or interval_versions"):
        _population_config("population.interval_versions=null")
    # A starting value the algorithm itself refuses (PPO's lr must be positive).
    with pytest.raises(ConfigError, match=r"population.hyperparameters.lr.values: member 0"):
        resolve(_population_config("population.hyperparameters.lr.values=[0, 0.001, 0.001, 0.001]",
                                   "population.hyperparameters.lr.min=0"))


def _specs(config, run_dir):
    graph = resolve(config)
    return graph, wire(graph, "auto", lambda name: "here", seed=1, run_dir=run_dir,
                       control=StreamEnd(CONTROL_KEY, "shm"))


def test_each_member_is_the_experiment_graph_with_its_own_names_directory_and_values(tmp_path):
    graph, specs = _specs(_population_config(), str(tmp_path))
    groups = graph.graph.groups
    assert set(groups) == {f"m{i}.{g}" for i in range(4) for g in ("trainer", "actor")} | {POPULATION_GROUP}
    assert groups["m2.actor"].streams == {"samples": "m2.samples", "parameters": "m2.parameters"}
    assert [groups[f"m{i}.trainer"].settings.algorithm.args["lr"] for i in range(4)] == [1e-5, 1e-4, 3e-4, 1e-3]
    by_name = {s.name: s for s in specs}
    assert by_name["m1.trainer.0"].run_dir == str(RunPaths(tmp_path).member("m1").root)
    assert by_name["m1.actor.1"].streams["samples"].key == "m1.samples/0"
    assert by_name["population.0"].run_dir == str(tmp_path)
    assert {g["home"] for name, g in graph.describe()["groups"].items() if name != POPULATION_GROUP} == {
        f"members/m{i}" for i in range(4)}
    # The baseline: the same members, no manager.
    baseline, _ = _specs(_population_config("population.exploit=false"), str(tmp_path))
    assert POPULATION_GROUP not in baseline.graph.groups and len(baseline.graph.groups) == 8


def _state(spec) -> WorkerState:
    return WorkerState(spec, Supervision(), ("env_steps", "episode_returns") if "actor" in spec.name else ())


def test_the_controller_hands_each_command_once_to_the_trainers_of_the_member_it_names(tmp_path):
    config = _population_config("population.size=2", "population.hyperparameters.lr.values=[0.001, 0.002]")
    graph, specs = _specs(config, str(tmp_path))
    population = Population(config, graph, RunPaths(tmp_path), resume=False)
    try:
        workers = {s.name: _state(s) for s in specs}
        everyone = list(workers.values())
        manager, trainer1, actor1 = workers["population.0"], workers["m1.trainer.0"], workers["m1.actor.0"]
        command = {"id": "0.1", "to": "m1", "hyperparameters": {"lr": 0.004}}
        for _ in range(2):  # the manager repeats a command until it is done: it is handed over once
            population.take(manager, {"commands": [command]}, everyone)
        assert population.answer(trainer1, everyone)["commands"] == [command]
        assert "commands" not in population.answer(trainer1, everyone)
        assert "commands" not in population.answer(actor1, everyone)
        assert "commands" not in population.answer(workers["m0.trainer.0"], everyone)
        assert "members" not in population.answer(trainer1, everyone)  # only workers outside the members
        population.take(trainer1, {"commands_done": {"0.1": "ok"}, "hyperparameters": {"lr": 0.004, "epochs": 4},
                                   "policy_version": 7}, everyone)
        population.take(actor1, {"env_steps": 256, "episode_returns": [200.0]}, everyone)
        view = population.answer(manager, everyone)["members"]
        assert view["m1"]["commands_done"] == {"0.1": "ok"}
        # A member that loads another's weights starts a new return window.
        load = {"id": "0.2", "to": "m1", "load_checkpoint": str(tmp_path / "members" / "m0" / "checkpoints"),
                "source": "m0", "hyperparameters": {"lr": 0.004}}
        population.take(manager, {"commands": [load]}, everyone)
        assert population.answer(trainer1, everyone)["commands"] == [load]
        population.take(trainer1, {"commands_done": {"0.1": "ok", "0.2": "ok"}, "hyperparameters": {"lr": 0.004},
                                   "policy_version": 8}, everyone)
        assert population.answer(manager, everyone)["members"]["m1"]["episode_return_mean"] is None
        rows = {r["member"]: r for r in population.rows(everyone)}
        assert (rows["m1"]["copies"], rows["m1"]["copied_from"], rows["m0"]["copies"]) == (1, "m0", 0)
        population.report(everyone, 2.5)  # writes the lineage's new lines
        lineage = [json.loads(line) for line in (tmp_path / "lineage.jsonl").read_text().splitlines()]
        assert [(r["event"], r["member"]) for r in lineage] == [("start", "m0"), ("start", "m1"), ("copy", "m1")]
        assert lineage[0]["hyperparameters"] == {"lr": 0.001} and lineage[1]["hyperparameters"] == {"lr": 0.002}
        assert (lineage[2]["copied"], lineage[2]["version"], lineage[2]["hyperparameters"]) == ("m0", 8, {"lr": 0.004})
        population.take(actor1, {"env_steps": 512, "episode_returns": [20.0, 30.0]}, everyone)
        view = population.answer(manager, everyone)["members"]
        assert view["m1"]["hyperparameters"] == {"lr": 0.004}
        assert (view["m1"]["env_steps"], view["m1"]["episode_return_mean"], view["m1"]["policy_version"]) == (512, 25.0, 8)
        assert view["m0"]["env_steps"] == 0 and view["m0"]["episode_return_mean"] is None
        assert population.answer(trainer1, everyone)["env_steps"] == 512  # its member's, for its checkpoints
        # Each member stops on its own numbers; the population once all have.
        assert population.stop_reason(None, everyone, 1.0) is None
        budget = config.stop.env_steps
        population.take(workers["m0.actor.0"], {"env_steps": budget}, everyone)
        assert population.stop_reason(None, everyone, 1.5) is None  # m1 has not met it yet
        population.take(actor1, {"env_steps": budget}, everyone)
        assert population.stop_reason(None, everyone, 2.0).startswith("every member: m0 env_steps reached")
    finally:
        population.close(population.summary(list(workers.values())))


@pytest.mark.parametrize("algorithm_type,policy_type,other", [("ppo", "actor_critic", {"clip": 0.1}),
                                                             ("dqn", "q_network", {"gamma": 0.9})])
def test_an_algorithm_takes_new_hyperparameters_live(algorithm_type, policy_type, other):
    from srl.api.env import spaces_of
    from srl.api.components import make_algorithm, make_env, make_policy

    env = make_env({"type": "gym", "id": "CartPole-v1"})
    policy = make_policy({"type": policy_type, "args": {"hidden": [8]}}, *spaces_of(env))
    env.close()
    algorithm = make_algorithm({"type": algorithm_type, "args": {"lr": 1e-3}}, policy)
    algorithm.set_hyperparameters({"lr": 5e-4, **other})
    assert algorithm.config.lr == 5e-4 and all(getattr(algorithm.config, k) == v for k, v in other.items())
    assert isinstance(algorithm.optimizer, torch.optim.Optimizer)
    assert {g["lr"] for g in algorithm.optimizer.param_groups} == {5e-4}  # the optimiser follows
    with pytest.raises(Exception, match="greater than 0"):
        algorithm.set_hyperparameters({"lr": -1.0})
    assert algorithm.config.lr == 5e-4


@pytest.mark.integration
def test_a_small_population_copies_and_explores(run_srl, tmp_path):
    run_dir = tmp_path / "run"

    def copied_and_reported_back(run: Path) -> bool:  # a copy, and each member's trainer reports its newest values
        try:
            events = [json.loads(line) for line in (run / "lineage.jsonl").read_text().splitlines()]
            rows = {m["member"]: m for m in json.loads((run / "status.json").read_text()).get("population", [])}
        except (OSError, ValueError):
            return False
        newest = {r["member"]: r["hyperparameters"]["lr"] for r in events if r["event"] in ("start", "copy")}
        return (any(r["event"] == "copy" for r in events) and set(rows) == set(newest)
                and all(rows[m]["hyperparameters"]["lr"] == pytest.approx(lr) for m, lr in newest.items()))

    train_inline(run_dir, "cartpole-ppo-pbt", "population.size=2", "population.hyperparameters.lr.values=[0.00001, 0.003]",
                 "population.interval_versions=2", "population.min_episodes=5", "population.margin=0",
                 "actors.count=1", "actors.envs_per_slot=16", "trainers.batch_steps=256", "stop.env_steps=null", "stop.time_s=300",
                 until=copied_and_reported_back, what="a copy that the trainers report back")
    lineage = [json.loads(line) for line in (run_dir / "lineage.jsonl").read_text().splitlines()]
    starts = {r["member"]: r["hyperparameters"]["lr"] for r in lineage if r["event"] == "start"}
    assert starts == {"m0": 0.00001, "m1": 0.003}
    copies = [r for r in lineage if r["event"] == "copy"]
    assert copies, lineage
    first = copies[0]
    assert {first["member"], first["copied"]} == {"m0", "m1"} and first["return"] < first["source_return"]
    # the source's learning rate, explored
    assert first["hyperparameters"]["lr"] / starts[first["copied"]] in (pytest.approx(0.8), pytest.approx(1.25))
    member, source = first["member"], first["copied"]
    trainer_log = (RunPaths(run_dir).member(member).root / "logs" / f"{member}.trainer.0.log").read_text()
    assert f"{run_dir}/members/{source}/checkpoints/{first['checkpoint']}" in trainer_log
    summary = json.loads((run_dir / "summary.json").read_text())
    members_now = {m["member"]: m for m in summary["members"]}
    now = {m: row["hyperparameters"]["lr"] for m, row in members_now.items()}
    last = [r for r in copies if r["member"] == member][-1]
    # changed live, and reported back by the trainer
    assert now[member] == pytest.approx(last["hyperparameters"]["lr"]) and now[member] != starts[member]
    for m in ("m0", "m1"):
        assert (RunPaths(run_dir).member(m).root / "metrics.jsonl").read_text().strip()
        assert json.loads((RunPaths(run_dir).member(m).root / "summary.json").read_text()) == members_now[m]
        assert list((RunPaths(run_dir).member(m).root / "checkpoints").glob("ckpt-*.pt"))
    status = json.loads((run_dir / "status.json").read_text())
    assert [m["member"] for m in status["population"]] == ["m0", "m1"]
    assert sum(m["copies"] for m in status["population"]) == len(copies)
    shown = run_srl("status", str(run_dir))
    assert "population" in shown.stdout and "lr=" in shown.stdout and "last copied" in shown.stdout
