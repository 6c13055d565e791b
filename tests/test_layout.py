"""The layout `auto` chooses: the model on made-up measurements, `auto` in the config, the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srl import layout
from srl.api import config as cfg
from srl.api.config import AUTO_FIELDS, ConfigError
from srl.layout import Layout, Measured, Shape, choose, predict

#: CartPole-like rates per core (docs/benchmarks.md): the learner is the slowest part.
CARTPOLE = Measured(2, env=194_000, inference={1: 20_000, 8: 150_000, 32: 450_000, 64: 603_000, 128: 700_000},
                    learner={1: 113_500, 2: 137_000})


def fits(chosen: Layout, shape: Shape) -> bool:
    envs = chosen.actors * chosen.ring_size * chosen.envs_per_slot
    return envs * shape.trajectory_length <= shape.batch_steps and shape.batch_steps % (
        chosen.envs_per_slot * shape.trajectory_length) == 0


def test_learner_bound_keeps_one_trainer_thread_when_a_second_gains_little():
    shape = Shape(trajectory_length=16, batch_steps=2048)
    choice = choose(CARTPOLE, shape)
    best = choice.best
    assert best.bound == "learner" and best.trained == pytest.approx(113_500)
    # One trainer thread (a second buys 1.2x for a whole core); inline; one actor on the other
    # core samples faster than the learner learns, so a second would only add a process; the
    # largest slots that keep every env in flight within one batch.
    assert best.layout == Layout(actors=1, envs_per_slot=128, ring_size=1, inference="inline", policy_workers=1,
                                 trainer_threads=1)
    assert fits(best.layout, shape)
    assert "bound by the learner" in choice.reason and "\n" not in choice.reason
    # A learner twice as fast outruns one actor: two share the cores.
    faster = Measured(2, CARTPOLE.env, CARTPOLE.inference, {1: 227_000, 2: 274_000})
    assert choose(faster, shape).best.layout.actors == 2


def test_equal_predictions_go_to_the_layout_with_headroom():
    # Envs per slot fixed at 64: one actor's slots hold exactly one batch (2 x 1,024 steps), two
    # actors' two. Both are predicted learner-bound; the one with room to spare is chosen.
    fixed = {"actors.envs_per_slot": 64, "actors.inference": "inline", "trainers.placement.threads": 1}
    choice = choose(CARTPOLE, Shape(trajectory_length=16, batch_steps=2048, fixed=fixed))
    one = next(p for p in choice.ranked if p.layout.actors == 1)
    assert one.trained == choice.best.trained and one.headroom == pytest.approx(1.0)
    assert choice.best.layout.actors == 2 and choice.best.headroom > 1.2


def test_full_sample_slots_make_the_trainer_wait():
    shape = Shape(trajectory_length=16, batch_steps=2048, sample_slots=1)
    few = predict(CARTPOLE, Layout(2, 16, 1, "inline", 1, 1), shape)  # 2 actors x 2 trajectories x 256 steps
    assert few.bound == "sample slots" and few.trained < 0.9 * CARTPOLE.learner[1]


def test_learner_bound_takes_threads_that_scale():
    # Pong-like: a CNN learner that gains 1.74x from a second thread, slow env and forward pass.
    pong = Measured(2, env=2_551, inference={1: 1_500, 4: 4_000, 8: 5_635, 16: 6_000}, learner={1: 361, 2: 628})
    best = choose(pong, Shape(trajectory_length=128, batch_steps=2048)).best
    assert best.layout.trainer_threads == 2 and best.layout.inference == "inline"
    assert best.layout.actors == 2 and best.layout.envs_per_slot == 8
    assert best.trained > predict(pong, Layout(2, 8, 1, "inline", 1, 1), Shape(128, 2048)).trained * 1.3


def test_env_bound_fills_every_core_with_actors_and_leaves_the_trainer_one_thread():
    slow_env = Measured(4, env=1_000, inference={1: 100_000, 64: 1_000_000}, learner={1: 500_000, 2: 900_000,
                                                                                       4: 1_600_000})
    choice = choose(slow_env, Shape(trajectory_length=8, batch_steps=4096))
    best = choice.best
    assert best.bound in ("cores", "actors")
    assert best.layout.processes >= 4 and best.layout.trainer_threads == 1  # threads would take cores from the envs


def test_inference_bound_batches_across_actors_in_a_policy_worker():
    # A forward pass of fixed cost per call (2 ms, whatever the rows) on 8 cores: one policy worker
    # batching every actor's slots spends far less CPU on it than eight actors each with their
    # own smaller batches, and the cores it frees step envs.
    per_call = Measured(8, env=20_000, inference={b: 500.0 * b for b in (1, 8, 64, 512)},
                        learner={1: 10_000_000, 2: 15_000_000, 4: 20_000_000, 8: 25_000_000})
    shape = Shape(trajectory_length=8, batch_steps=4096)
    best = choose(per_call, shape).best
    assert best.layout.inference == "remote" and best.layout.policy_workers < best.layout.actors
    assert best.layout.ring_size >= 2  # the actors step while their requests are answered
    inline = choose(per_call, Shape(8, 4096, fixed={"actors.inference": "inline"})).best
    assert best.trained > 1.2 * inline.trained and fits(best.layout, shape)


def test_fixed_fields_are_kept():
    fixed = {"actors.envs_per_slot": 16, "actors.inference": "inline", "trainers.placement.threads": 2}
    shape = Shape(trajectory_length=16, batch_steps=2048, fixed=fixed)
    best = choose(CARTPOLE, shape).best.layout
    assert best.envs_per_slot == 16 and best.inference == "inline" and best.trainer_threads == 2
    assert fits(best, shape)


def test_inference_rates_interpolate_between_measured_batches():
    m = Measured(1, 1.0, {8: 100.0, 32: 400.0}, {1: 1.0})
    assert m.inference_at(16) == pytest.approx(200.0)
    assert m.inference_at(1) == 100.0 and m.inference_at(1024) == 400.0


# ------------------------------------------------------------------------ the config
def test_take_auto_leaves_the_layout_fields_to_their_defaults():
    data = cfg.apply_overrides(cfg.read_config_file("cartpole-ppo"),
                               ["actors.count=auto", "trainers.placement.threads=auto"])
    stripped, auto = cfg.take_auto(data)
    assert auto == ["actors.count", "trainers.placement.threads"]
    assert "count" not in stripped["actors"] and data["actors"]["count"] == "auto"  # the input is not changed
    assert cfg.validate_structure(stripped).actors.envs_per_slot == 64


def test_auto_elsewhere_is_one_clear_error():
    for override in ("trainers.batch_steps=auto", "workers.actor.count=auto"):
        with pytest.raises(ConfigError) as info:
            cfg.load("cartpole-ppo", [override])
        message = str(info.value)
        assert "\n" not in message and "may set only" in message and "actors.count" in message
    with pytest.raises(ConfigError, match="actors.count: `auto` is chosen by `srl train`"):
        cfg.load("cartpole-ppo", ["actors.count=auto"])  # validated without take_auto
    assert cfg.load("cartpole-ppo", ["streams.transport=auto"]).streams.transport == "auto"  # a value of its own


def test_auto_is_refused_where_the_model_does_not_hold():
    data, auto = cfg.take_auto(cfg.apply_overrides(cfg.read_config_file("cartpole-ppo"),
                                                   ["actors.count=auto", "trainers.device=cuda"]))
    with pytest.raises(ConfigError, match="actors.count: `auto` measures CPU workers"):
        layout.refuse(cfg.validate_structure(data), auto)


def _node(ip, cpus, *labels, alive=True):
    return {"NodeManagerAddress": ip, "NodeID": ip, "Alive": alive,
            "Resources": {"CPU": cpus, f"node:{ip}": 1.0, **{label: 1.0 for label in labels}}}


def _ray_config(*overrides):
    data, auto = cfg.take_auto(cfg.apply_overrides(cfg.read_config_file("cartpole-ppo"),
                                                   ["actors.count=auto", "launcher=ray", *overrides]))
    return cfg.validate(data), auto


def test_on_a_ray_cluster_auto_lays_out_the_one_node_the_groups_are_pinned_to():
    nodes = [_node("10.0.0.1", 8.0, "head"), _node("10.0.0.2", 16.0, "big"),
             _node("10.0.0.3", 16.0, "big", alive=False)]
    pinned = [f"{section}.placement.resources={{big: 0.01}}" for section in layout.LAID_OUT]
    config, auto = _ray_config(*pinned)
    assert layout.ray_node(config, auto, nodes)["NodeManagerAddress"] == "10.0.0.2"  # the dead one does not count
    single = [_node("10.0.0.9", 4.0)]
    config, auto = _ray_config()
    assert layout.ray_node(config, auto, single)["NodeManagerAddress"] == "10.0.0.9"  # unpinned on a one-node cluster
    with pytest.raises(ConfigError, match="matches 2 of the cluster's 2 alive nodes"):
        layout.ray_node(config, auto, nodes[:2])  # unpinned, two nodes: the workers could spread over both
    config, auto = _ray_config("actors.placement.resources={big: 0.01}")
    with pytest.raises(ConfigError, match="actors, trainers must name the same placement.resources"):
        layout.ray_node(config, auto, nodes)
    # Inline inference as the config fixes it: no policy worker runs, so none need be pinned ...
    config, auto = _ray_config(*pinned[::2])
    assert layout.ray_node(config, auto, nodes)["NodeManagerAddress"] == "10.0.0.2"
    # ... but where `auto` may choose remote inference, the policy workers must be on the node too.
    config, auto = _ray_config(*pinned[::2], "actors.inference=auto")
    with pytest.raises(ConfigError, match="actors, policy_workers, trainers must name the same"):
        layout.ray_node(config, auto, nodes)
    config, auto = _ray_config(*[p.replace("big", "gpu") for p in pinned])
    with pytest.raises(ConfigError, match=r"placement.resources \{'gpu': 0.01\} matches 0 of"):
        layout.ray_node(config, auto, nodes)


def test_a_layout_chosen_for_a_ray_node_asks_no_more_cpus_than_the_node_has(monkeypatch):
    # Four actors and a trainer on 2 CPUs: 0.5 CPU each would not fit.
    node = {"ip": "10.0.0.2", "id": "n2", "cpus": 2}
    monkeypatch.setattr(layout, "measure_on_ray_node", lambda config, auto, threads_on, say: (
        Measured(2, 20_000, {1: 1e6, 64: 1e6}, {t: 1e6 for t in threads_on(2)}), Path("cache.json"), False, node))
    config, auto = _ray_config("ray.address=10.0.0.1:6379", "actors.count=4", "actors.envs_per_slot=auto")
    chosen, record = layout.resolve(config, auto)
    processes = chosen.actors.count + chosen.trainers.count
    assert processes == 5 and record["node"] == node and record["cores"] == 2
    assert chosen.actors.placement.num_cpus * processes <= 2 and chosen.trainers.placement.num_cpus <= 0.4
    assert "on 2 cores of node 10.0.0.2" in layout.describe(record)


def test_measurements_are_cached_per_config_and_cores(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def fake_measure(config, cores, threads):
        calls.append(cores)
        return Measured(cores, 194_000, {1: 20_000, 64: 603_000}, {t: 100_000.0 * t for t in threads})

    monkeypatch.setattr(layout, "measure", fake_measure)
    data, auto = cfg.take_auto(cfg.apply_overrides(cfg.read_config_file("cartpole-ppo"), ["actors.count=auto"]))
    config = cfg.validate(data)
    first, record = layout.resolve(config, auto, cores=2)
    again, record_again = layout.resolve(config, auto, cores=2)  # a restarted run: no new measurement
    assert calls == [2] and not record["from_cache"] and record_again["from_cache"]
    assert first == again and record["chosen"]["actors.count"] == first.actors.count
    assert first.actors.envs_per_slot == 64  # not `auto`: as the config gives it
    layout.resolve(config, auto, cores=1)  # other cores: measured anew
    assert calls == [2, 1]
    json.dumps(record)  # layout.json is plain data


@pytest.mark.integration
def test_train_with_auto_prints_and_records_its_layout(run_srl, tmp_path, monkeypatch):
    # Measurements seeded into the cache, as an earlier run leaves them: the run starts at once.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(layout, "measure", lambda config, cores, threads: Measured(
        cores, 194_000, {1: 20_000, 64: 603_000}, {t: 100_000.0 for t in threads}))
    data, auto = cfg.take_auto(cfg.apply_overrides(cfg.read_config_file("cartpole-ppo"), ["actors.count=auto"]))
    layout.resolve(cfg.validate(data), auto)
    result = run_srl("train", "cartpole-ppo", "actors.count=auto", "stop.time_s=3", "--run-dir", "run", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "layout.json").read_text())
    count = record["chosen"]["actors.count"]
    assert f"srl: layout actors.count={count} " in result.stderr and "bound by the" in result.stderr
    assert record["from_cache"] and f"count: {count}" in (tmp_path / "run" / "config.yaml").read_text()
    assert set(record["chosen"]) == set(AUTO_FIELDS)


@pytest.mark.parametrize("membership, files, quota", [
    # cgroup v2: one hierarchy, cpu.max "QUOTA PERIOD"
    ("0::/jobs/run\n", {"jobs/run/cpu.max": "150000 100000\n"}, 1.5),
    ("0::/jobs/run\n", {"jobs/run/cpu.max": "max 100000\n"}, None),
    # v2 in a container without a cgroup namespace: its own group is the mount's root
    ("0::/host/path\n", {"cpu.max": "50000 100000\n"}, 0.5),
    # cgroup v1: the cpu controller's hierarchy (here shared with cpuacct), -1 for no quota
    ("4:memory:/x\n3:cpu,cpuacct:/jobs/run\n", {"cpu,cpuacct/jobs/run/cpu.cfs_quota_us": "250000\n",
                                                "cpu,cpuacct/jobs/run/cpu.cfs_period_us": "100000\n"}, 2.5),
    ("3:cpu,cpuacct:/jobs/run\n", {"cpu,cpuacct/jobs/run/cpu.cfs_quota_us": "-1\n",
                                   "cpu,cpuacct/jobs/run/cpu.cfs_period_us": "100000\n"}, None),
    ("", {}, None),
])
def test_the_cgroup_cpu_quota_is_read_from_v1_and_v2(tmp_path, membership, files, quota):
    (tmp_path / "cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    assert layout.cgroup_cpu_quota(tmp_path / "fs", tmp_path / "cgroup") == quota
