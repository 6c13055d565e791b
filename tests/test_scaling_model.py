"""The scaling model's `predict`: pure arithmetic on made-up costs, no process and no clock."""

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "scaling_model", Path(__file__).resolve().parents[1] / "benchmarks" / "scaling_model.py")
model = sys.modules["scaling_model"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(model)


def _costs(**changes) -> "model.Costs":
    exp = model.Experiment(name="toy", env_s=10e-6, inference_s={8: 4e-6, 64: 2e-6}, learner_s=5e-6,
                           sample_bytes=50.0, obs_bytes=16.0, param_bytes=40_000.0, envs_per_slot=64,
                           trajectory_length=16, batch_steps=2048, updates_per_batch=16)
    exp = replace(exp, **changes)
    free = model.Transport(0.0, 0.0)
    return model.Costs(experiments={"toy": exp}, samples={"shm": free, "zmq": free},
                       requests={"shm": free, "zmq": free}, heartbeat_s=0.0, heartbeat_per_worker_s=0.0)


def test_the_throughput_is_the_smallest_limit_and_names_its_resource():
    resources = [model.Resource("a", 4.0, 1e-5), model.Resource("b", 1.0, 1e-5), model.Resource("c", 10.0, 1e-6)]
    p = model.predict(resources)
    assert p.bottleneck == "b"
    assert p.throughput == pytest.approx(1e5)
    assert p.throughput == min(p.limits.values())
    assert list(p.limits) == ["b", "a", "c"]  # smallest first
    assert p.loads["b"] == pytest.approx(1.0) and p.loads["a"] == pytest.approx(0.25)


def test_a_resource_swamped_by_its_fixed_demand_stops_the_run():
    p = model.predict([model.Resource("cores", 8.0, 1e-5), model.Resource("controller", 1.0, 0.0, fixed=1.5)])
    assert (p.throughput, p.bottleneck) == (0.0, "controller")
    assert model.Resource("controller", 1.0, 0.0, fixed=0.5).limit == math.inf


def test_fixed_demand_takes_its_share_of_the_capacity_first():
    assert model.Resource("cpu", 2.0, 1e-5, fixed=0.5).limit == pytest.approx(1.5e5)


def test_doubling_cores_doubles_env_bound_throughput_until_the_trainer_tier_caps_it():
    costs = _costs()
    exp = costs.experiments["toy"]
    tier = model.Cluster(cores=1, trainer_workers=2, dp_efficiency=1.0, nic_gbps=1e6)
    per_core = 1.0 / (exp.env_s + exp.inference_at(64))
    learner_cap = 2 / exp.learner_s
    previous = None
    for cores in (1, 2, 4, 8, 16, 32):
        p = model.predict(replace(tier, cores=cores).resources(costs, exp))
        if cores * per_core < learner_cap:
            assert p.bottleneck == "actor cores"
            assert p.throughput == pytest.approx(cores * per_core)
            if previous is not None:
                assert p.throughput == pytest.approx(2 * previous)
        else:
            assert p.bottleneck == "trainer tier"
            assert p.throughput == pytest.approx(learner_cap)
        previous = p.throughput
    assert previous == pytest.approx(learner_cap)  # the sweep reached the cap


def test_one_host_shares_its_cores_and_one_trainer_process_caps_training():
    costs = _costs(learner_s=40e-6)
    exp = costs.experiments["toy"]
    per_step = exp.env_s + exp.inference_at(exp.envs_per_slot) + exp.learner_s
    one = model.predict(model.Host(cores=1).resources(costs, exp))
    assert one.throughput == pytest.approx(1 / per_step)
    two = model.predict(model.Host(cores=2).resources(costs, exp))
    # Two cores would carry 2 / per_step, but one single-threaded trainer learns at most 1 / learner_s.
    assert two.throughput == pytest.approx(min(2 / per_step, 1 / exp.learner_s))
    assert two.bottleneck == "trainer processes"
    sampling = model.predict(model.Host(cores=2, learning=False).resources(costs, exp))
    assert sampling.throughput == pytest.approx(2 / (exp.env_s + exp.inference_at(exp.envs_per_slot)))


def test_flat_supervision_grows_with_workers_squared_and_per_host_agents_relieve_it():
    costs = replace(_costs(), heartbeat_s=100e-6, heartbeat_per_worker_s=1e-6)
    exp = costs.experiments["toy"]
    flat = model.predict(model.Cluster(cores=10_000, supervision="flat").resources(costs, exp))
    assert flat.bottleneck == "controller core" and flat.throughput == 0.0
    per_host = model.predict(model.Cluster(cores=10_000, supervision="per_host").resources(costs, exp))
    assert per_host.bottleneck != "controller core" and per_host.throughput > 0


def _measured_controller() -> "model.Costs":
    return replace(_costs(), heartbeat_s=226e-6, heartbeat_per_worker_s=0.56e-6)


def test_paced_supervision_keeps_the_controller_below_one_core_at_ten_thousand_workers():
    costs = _measured_controller()
    assert model.controller_cores(costs, 10_000) < 1.0 < model.controller_cores(costs, 10_000, "flat")
    exp = costs.experiments["toy"]
    today = model.predict(model.Cluster(cores=10_000).resources(costs, exp))
    assert today.bottleneck != "controller core" and today.loads["controller core"] < 1.0
    assert model.saturating_workers(costs) > 20 * model.saturating_workers(costs, "flat")


def test_past_the_heartbeat_cap_the_paced_load_grows_with_workers_only_through_the_look():
    costs = _measured_controller()
    looks = replace(costs, heartbeat_s=0.0)
    for small, large in ((1_000, 10_000), (10_000, 20_000)):
        growth = model.controller_cores(costs, large) - model.controller_cores(costs, small)
        assert growth == pytest.approx(model.controller_cores(looks, large) - model.controller_cores(looks, small))
    assert model.controller_cores(looks, 10_000) == pytest.approx(10_000 * 0.56e-6 / model.CHECK_EVERY_S)
    # Below the cap every worker beats at the small run's rate: the heartbeats grow with W too.
    beats = replace(costs, heartbeat_per_worker_s=0.0)
    assert model.controller_cores(beats, 100) == pytest.approx(100 / model.heartbeat_period(100) * 226e-6)


def test_parameters_sent_once_per_host_cap_throughput_as_hosts_grow_and_a_tree_lifts_the_cap():
    costs = _costs(param_bytes=50e6)
    exp = costs.experiments["toy"]
    small = model.predict(model.Cluster(cores=640).resources(costs, exp)).limits["parameter NIC out"]
    large = model.predict(model.Cluster(cores=6400).resources(costs, exp)).limits["parameter NIC out"]
    assert small == pytest.approx(10 * large)
    tree = model.predict(model.Cluster(cores=6400, param_fanout=4).resources(costs, exp)).limits["parameter NIC out"]
    assert tree == pytest.approx(large * 100 / 4)


def test_remote_inference_adds_policy_workers_and_the_nearest_measured_batch_below():
    costs = _costs(inference="remote")
    exp = costs.experiments["toy"]
    assert exp.inference_at(100) == exp.inference_s[64] and exp.inference_at(4) == exp.inference_s[8]
    p = model.predict(model.Cluster(cores=100, policy_workers=1, policy_batch=64).resources(costs, exp))
    assert p.limits["policy workers"] == pytest.approx(1 / exp.inference_s[64])
    with pytest.raises(ValueError, match="GPU costs"):
        model.Host(cores=2, device="cuda").resources(costs, exp)


def test_a_multi_agent_step_costs_each_agents_row_and_a_batch_of_rows_is_fewer_env_steps():
    one, four = _costs(inference="remote"), _costs(inference="remote", agents=4)
    exp = four.experiments["toy"].per_env_step()
    assert (exp.learner_s, exp.sample_bytes, exp.obs_bytes, exp.batch_steps) == (20e-6, 200.0, 64.0, 512)
    assert exp.inference_s == {2: 16e-6, 16: 8e-6}  # keyed by env steps a batch (8 and 64 rows)
    assert exp.per_env_step() == exp and exp.env_s == 10e-6  # the env's step is already one env step
    cluster = model.Cluster(cores=100, trainer_workers=2, dp_efficiency=1.0, policy_workers=1, policy_batch=16)
    tier = {name: model.predict(cluster.resources(c, c.experiments["toy"])).limits for name, c in (("1", one), ("4", four))}
    assert tier["4"]["trainer tier"] == pytest.approx(tier["1"]["trainer tier"] / 4)
    assert tier["4"]["policy workers"] == pytest.approx(1 / 8e-6)  # 64 rows a pass, 4 rows an env step


def test_an_assumed_gpu_factor_divides_the_learner_and_forward_pass_alone():
    costs = model.assumed_gpu(_costs(), 50)
    gpu, cpu = costs.gpu["toy"], costs.experiments["toy"]
    assert gpu.learner_s == pytest.approx(cpu.learner_s / 50) and gpu.inference_s[8] == pytest.approx(cpu.inference_s[8] / 50)
    assert gpu.env_s == cpu.env_s


def test_the_all_reduce_crosses_each_trainer_host_once_per_gradient_step_of_the_whole_tier():
    costs = _costs(param_bytes=1e6)
    exp = costs.experiments["toy"]
    nic = 25e9 / 8
    for workers, hosts in ((8, 2), (64, 8)):
        limit = model.predict(model.Cluster(cores=64, trainer_workers=workers, trainer_hosts=hosts).resources(costs, exp))
        per_step = exp.sample_bytes / nic + hosts * 2 * 1e6 * exp.updates_per_batch / (exp.batch_steps * workers) / nic
        assert limit.limits["trainer NIC in"] == pytest.approx(hosts / per_step)


def test_costs_round_trip_through_json():
    data = {"experiments": {"toy": {"name": "toy", "env_s": 1e-5, "inference_s": {"8": 1e-6}, "learner_s": 1e-5,
                                    "sample_bytes": 1.0, "obs_bytes": 1.0, "param_bytes": 1.0, "envs_per_slot": 8,
                                    "trajectory_length": 4, "batch_steps": 32, "updates_per_batch": 1}},
            "samples": {"shm": {"message_s": 1e-4, "byte_s": 1e-10}, "zmq": {"message_s": 2e-4, "byte_s": 1e-9}},
            "requests": {"shm": {"message_s": 1e-4, "byte_s": 1e-10}, "zmq": {"message_s": 2e-4, "byte_s": 1e-9}},
            "controller": {"heartbeat_s": 1e-4, "heartbeat_per_worker_s": 1e-6}}
    costs = model.costs_from_json(data)
    assert costs.experiments["toy"].inference_s == {8: 1e-6}
    assert costs.samples["zmq"].cost(1000) == pytest.approx(2e-4 + 1e-6)
    assert costs.heartbeat(100) == pytest.approx(2e-4)


def test_the_controller_saturates_where_its_heartbeat_load_reaches_one_core():
    costs = replace(_costs(), heartbeat_s=150e-6, heartbeat_per_worker_s=0.7e-6)
    for pacing in ("paced", "flat"):
        w = model.saturating_workers(costs, pacing)
        assert model.controller_cores(costs, w - 1, pacing) < 1.0 <= model.controller_cores(costs, w, pacing)
    flat = model.saturating_workers(replace(costs, heartbeat_per_worker_s=0.0), "flat")
    assert flat == pytest.approx(1 / (4 * 150e-6), abs=1)


def test_the_cli_tables_come_from_the_committed_costs(capsys):
    costs = str(Path(__file__).resolve().parents[1] / "benchmarks" / "scaling_costs.json")
    model.main(["predict", costs, "--markdown", "--sizes", "1000", "10000"])
    out = capsys.readouterr().out
    assert "| pong-ppo | 10,000 |" in out and "first bottleneck" in out
    model.main(["fanin", costs])
    assert "saturated at" in capsys.readouterr().out
    model.main(["inputs", costs])
    assert "| samples, zmq |" in capsys.readouterr().out
