"""Runs on a three-node loopback Ray cluster whose nodes die whole and join mid-run (`ray.elastic`).

The head (127.0.0.2) is never killed; the other nodes carry the resource `spot`, so a group that
asks for it may run on any of them. A node is killed as a preempted cloud node
dies: every process of it at once, by PID (`LoopbackCluster.kill_node`).
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.ray]
ray = pytest.importorskip("ray", reason="the ray tests need `pip install ray`")

from srl.launch.loopback_ray import HEAD, SECOND, loopback_ray_cluster  # noqa: E402  (after the skip)

THIRD = "127.0.0.4"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("node-cache"))}
    with loopback_ray_cluster(nodes=3, env=env, worker_resources={"spot": 1}, quick_node_deaths=True) as running, \
            running.driver_environment():
        yield running


def _train(cluster, tmp_path, *overrides: str) -> tuple[subprocess.Popen, Path, Path]:
    """`srl train cartpole-ppo` on the cluster in a session of its own; (process, run dir, stderr log)."""
    from conftest import srl_command

    run_dir, log = tmp_path / "run", tmp_path / "stderr.log"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray",
                    f"ray.address={cluster.address}", "actors.inference=inline", *overrides, "log.tensorboard=false",
                    "log.progress=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)
    return process, run_dir, log


def test_actors_follow_a_node_that_dies_and_one_that_joins_and_the_run_reaches_475(cluster, tmp_path, run_srl):
    """Three actors of one CPU each, spread over the two spot nodes of two CPUs: two on one, one on
    the other. The node with two dies whole: one of its actors is placed again on the other node,
    where one CPU is left, and the other is dropped (`min_actors` allows it); what they had not
    delivered is counted as lost. A fourth node joins: actors are added on it up to `max_actors`.
    The run reaches a mean return of 475 after both."""
    from conftest import kill_run, metrics_lines, run_workers, wait_for

    process, run_dir, log = _train(cluster, tmp_path, "ray.elastic={min_actors: 1, max_actors: 3}", "actors.count=3",
                                   "actors.placement={num_cpus: 1, resources: {spot: 0.01}}",
                                   "trainers.placement.resources={node1: 0.01}", "stop.episode_return=null",
                                   "stop.time_s=400")
    actors = ["actor.0", "actor.1", "actor.2"]

    def stepping(workers: dict, name: str) -> bool:
        return name in workers and workers[name]["state"] == "running" and bool(workers[name]["stats"].get("env_steps"))

    try:
        workers = wait_for(lambda: (w := run_workers(run_dir)) and all(stepping(w, a) for a in actors) and w, 120,
                           "three actors stepping", process, log)
        hosts = [workers[a]["host"] for a in actors]
        assert sorted(hosts.count(ip) for ip in (SECOND, THIRD)) == [1, 2] and workers["trainer.0"]["host"] == HEAD
        doomed = max((SECOND, THIRD), key=hosts.count)
        survivor = ({SECOND, THIRD} - {doomed}).pop()
        victims = [a for a in actors if workers[a]["host"] == doomed]
        killed = cluster.kill_node(doomed)
        assert {workers[a]["pid"] for a in victims} <= set(killed)

        after = wait_for(lambda: (w := run_workers(run_dir))
                         and sorted(w[a]["state"] for a in victims) == ["dropped", "running"]
                         and all(w[a]["state"] == "dropped" or stepping(w, a) for a in victims) and w,
                         90, "one actor placed again, one dropped", process, log)
        moved, dropped = sorted(victims, key=lambda a: after[a]["state"] == "dropped")
        assert after[moved]["host"] == survivor and after[moved]["restarts"] == 1

        fourth = cluster.add_node()
        grown = wait_for(lambda: (w := run_workers(run_dir)) and stepping(w, "actor.3") and w, 90,
                         "an actor added on the new node", process, log)
        assert grown["actor.3"]["host"] == fourth and "actor.4" not in grown  # max_actors: 3 alive

        # CartPole may have learnt before the node died: the run must reach 475 after the changes too.
        changed = _status(run_dir)["nodes"][-1]["at_s"]
        wait_for(lambda: any(row["time_s"] > changed and (row["episode_return_mean"] or 0) >= 475
                             for row in metrics_lines(run_dir)), 240, "475 after the nodes changed", process, log)
        status = json.loads(run_srl("status", str(run_dir), "--json").stdout)
        assert [(e["event"], e["node"]) for e in status["nodes"]] == [("left", doomed), ("joined", fourth)]
        assert status["nodes"][1]["actors_added"] == 1
        assert f"node {doomed} left at" in run_srl("status", str(run_dir)).stdout
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        stderr = log.read_text()
        assert process.returncode == 0, stderr[-3000:]
        why = f"srl: worker {dropped} fits on no node left (it asks for CPU 1, spot 0.01): dropped, 2 actors go on"
        assert why in stderr
        assert "srl: group actor grew by 1 on a node that joined (actor.3)" in stderr
        assert run_workers(run_dir)[dropped]["state"] == "dropped"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted" and summary["lost_env_steps"] > 0, summary
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{status['run_id']}_")]
    finally:
        kill_run(process, run_dir)


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _spot_nodes(cluster, count: int) -> list[str]:
    """`count` alive nodes besides the head (an earlier test may have killed one): added as needed."""
    alive = [ip for ip in cluster.nodes[1:] if cluster.node_processes(ip)]
    while len(alive) < count:
        alive.append(cluster.add_node())
    return alive[:count]


def test_the_trainer_of_a_node_that_dies_restarts_on_another_from_its_checkpoint(cluster, tmp_path):
    """The trainer on a spot node, the actors on the head. Its node dies whole: the trainer starts
    again on the other spot node from the last checkpoint, the actors find it there, and the run
    reaches 475 after the loss."""
    from conftest import kill_run, metrics_lines, run_workers, wait_for

    spot = _spot_nodes(cluster, 2)
    process, run_dir, log = _train(cluster, tmp_path, "ray.elastic={min_actors: 1, max_actors: 2}", "actors.count=2",
                                   "actors.placement.resources={node1: 0.01}",
                                   "trainers.placement.resources={spot: 0.01}",
                                   "checkpoint.every_s=1", "stop.episode_return=null", "stop.time_s=400")
    try:
        workers = wait_for(lambda: (w := run_workers(run_dir)) and w.get("trainer.0", {}).get("state") == "running"
                           and list((run_dir / "checkpoints").glob("*.pt")) and w, 120, "a checkpoint", process, log)
        doomed = workers["trainer.0"]["host"]
        assert doomed in spot
        cluster.kill_node(doomed)
        moved = wait_for(lambda: (w := run_workers(run_dir)) and w["trainer.0"]["restarts"] == 1
                         and w["trainer.0"]["state"] == "running" and w, 90, "the trainer placed again", process, log)
        assert moved["trainer.0"]["host"] in set(spot) - {doomed}
        assert "restored" in (run_dir / "logs" / "trainer.0.log").read_text()
        # Ray declares the node dead seconds after the trainer has moved: the run notes it then.
        left = wait_for(lambda: _status(run_dir).get("nodes"), 60, "the node noted as left", process, log)[-1]["at_s"]
        wait_for(lambda: any(row["time_s"] > left and (row["episode_return_mean"] or 0) >= 475
                             for row in metrics_lines(run_dir)), 240, "475 after the node died", process, log)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        assert process.returncode == 0, log.read_text()[-3000:]
        final = run_workers(run_dir)
        assert final["trainer.0"]["restarts"] == 1 and final["trainer.0"]["policy_version"] > 1
    finally:
        kill_run(process, run_dir)


def test_two_data_parallel_trainers_on_two_nodes_reach_475_with_equal_weights(cluster, tmp_path):
    """`trainers.count=2`, one trainer on each spot node: gradients are averaged over TCP (gloo)
    between the hosts. Each trainer reports the digest of its weights at each of its last versions;
    read as the run goes, they agree at every version, from the first to the last."""
    from conftest import kill_run, run_workers

    spot = _spot_nodes(cluster, 2)
    # Two CPUs a trainer: a node of two holds one.
    process, run_dir, log = _train(cluster, tmp_path, "actors.count=2", "actors.placement.resources={node1: 0.01}",
                                   "trainers.count=2", "trainers.placement={num_cpus: 2, resources: {spot: 0.01}}",
                                   "stop.time_s=300")
    digests: list[dict[int, str]] = [{}, {}]

    def gather() -> bool:
        for rank in (0, 1):
            reported = run_workers(run_dir).get(f"trainer.{rank}", {}).get("param_digests") or {}
            digests[rank].update({int(v): d for v, d in reported.items()})
        return process.poll() is not None

    try:
        while not gather():
            time.sleep(0.2)
        assert process.returncode == 0, log.read_text()[-3000:]
        gather()
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"].startswith("episode_return_mean"), summary
        workers = run_workers(run_dir)
        assert {workers["trainer.0"]["host"], workers["trainer.1"]["host"]} == set(spot)
        final = summary["policy_version"]
        assert set(digests[0]) == set(digests[1]) == set(range(1, final + 1)), (sorted(digests[0]), final)
        assert digests[0] == digests[1]
    finally:
        kill_run(process, run_dir)


def test_a_worker_pinned_to_a_node_that_dies_stops_the_run_in_one_line(cluster, tmp_path):
    """The trainer may run only on one node (its `node<k>` resource): when that node dies there is
    nowhere to restart it, and the run stops at once saying so, rather than wait for the node."""
    from conftest import kill_run, run_workers, wait_for

    node = _spot_nodes(cluster, 1)[0]
    resource = f"node{cluster.nodes.index(node) + 1}"
    process, run_dir, log = _train(cluster, tmp_path, "ray.elastic={min_actors: 1, max_actors: 2}", "actors.count=1",
                                   "actors.placement.resources={node1: 0.01}",
                                   f"trainers.placement.resources={{{resource}: 0.01}}", "stop.episode_return=null",
                                   "stop.time_s=400")
    try:
        wait_for(lambda: run_workers(run_dir).get("trainer.0", {}).get("state") == "running", 120, "the trainer",
                 process, log)
        cluster.kill_node(node)
        process.wait(timeout=120)
        why = f"worker trainer.0 fits on no node left (it asks for CPU 0.5, {resource} 0.01): nowhere to restart it"
        assert process.returncode != 0 and f"srl: {why}" in log.read_text(), log.read_text()[-3000:]
        assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == why
    finally:
        kill_run(process, run_dir)


def test_without_elastic_a_worker_whose_node_died_stops_the_run_in_one_line(cluster, tmp_path):
    """No `ray.elastic`: the actor may run only on its node, which dies; the run stops at once,
    saying so and how to follow nodes, rather than wait for Ray to place it."""
    from conftest import kill_run, run_workers, wait_for

    node = _spot_nodes(cluster, 1)[0]
    resource = f"node{cluster.nodes.index(node) + 1}"
    process, run_dir, log = _train(cluster, tmp_path, "actors.count=1",
                                   f"actors.placement.resources={{{resource}: 0.01}}",
                                   "trainers.placement.resources={node1: 0.01}", "stop.episode_return=null",
                                   "stop.time_s=400")
    try:
        wait_for(lambda: run_workers(run_dir).get("actor.0", {}).get("stats", {}).get("env_steps"), 120,
                 "the actor stepping", process, log)
        cluster.kill_node(node)
        process.wait(timeout=120)
        stopped = json.loads((run_dir / "summary.json").read_text())["stop_reason"]
        assert process.returncode == 1 and stopped.startswith("worker actor.0 cannot start again: "), stopped
        assert stopped.endswith("ray.elastic lets workers follow the cluster's nodes (docs/cluster.md)")
        assert f"srl: {stopped}" in log.read_text()
    finally:
        kill_run(process, run_dir)
