"""The Ray launcher on a real two-node cluster, on loopback only (127.0.0.2 and 127.0.0.3).

Deselect with `-m "not ray"`. The cluster (`srl.launch.loopback_ray`) gets its own temp dir;
teardown stops exactly the processes that carry that dir, by PID (never `ray stop`, which
would kill every Ray process on the machine), and fails if any outlive it.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.ray]
ray = pytest.importorskip("ray", reason="the ray tests need `pip install ray`")

from srl.launch.loopback_ray import HEAD, SECOND, loopback_ray_cluster  # noqa: E402  (after the skip)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The cluster runs in token mode with a token of its own; the drivers the tests start (`srl train
    ...`) carry it. Its nodes' home holds a stray default token (`~/.ray/auth_token`, not the cluster's),
    as on a machine where a bare `ray.init()` once ran: that must change nothing."""
    home = tmp_path_factory.mktemp("node-home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("f" * 64)
    # The nodes' workers keep their measurements for `auto` layouts in a cache of the cluster's own.
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("node-cache"))}
    with loopback_ray_cluster(env=env) as running, running.driver_environment():
        yield running


def test_cartpole_on_two_nodes_uses_zmq_across_shm_within_and_learns_past_a_sigkilled_worker(cluster, tmp_path):
    """Actors on the second node, the policy worker and the trainer on the head: samples and
    inference cross the nodes by ZeroMQ, parameters stay in shm on the head. Then a node fault
    as a worker sees it: an actor's process on the second node dies without a word. Ray reports
    the actor dead, the controller places a new one on that node, and the run learns on with the
    replacement's samples, to a mean return of 150."""
    from conftest import kill_run, metrics_lines, run_workers, srl_command, wait_for

    address = cluster.address
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray", f"ray.address={address}",
                    "actors.inference=remote", "actors.placement.resources={node2: 0.01}",
                    "policy_workers.placement.resources={node1: 0.01}", "trainers.placement.resources={node1: 0.01}",
                    "stop.episode_return=null", "stop.time_s=180", "log.tensorboard=false", "log.progress=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def workers() -> dict[str, dict]:
        return run_workers(run_dir)

    try:
        victim = wait_for(lambda: (w := workers().get("actor.0")) and w["state"] == "running"
                          and w["stats"].get("env_steps") and w, 90, "actor.0 stepping", process)
        assert victim["host"] == SECOND
        # Only a process of this test's cluster: the PID is checked against it before the kill.
        assert victim["pid"] in {p.pid for p in cluster.processes()}
        os.kill(victim["pid"], signal.SIGKILL)
        replaced = wait_for(lambda: (w := workers()) and w["actor.0"]["restarts"] == 1
                            and w["actor.0"]["state"] == "running" and w["actor.0"]["pid"] != victim["pid"] and w,
                            90, "actor.0 replaced", process)
        assert replaced["actor.0"]["host"] == SECOND and replaced["actor.0"]["restart_latency_s"] is not None
        version = replaced["trainer.0"]["policy_version"] or 0
        replaced_at = max((line["time_s"] for line in metrics_lines(run_dir)), default=0.0)
        # The replacement samples and the run learns on; then Ctrl-C (not a time limit, which a
        # slow start on a busy machine could use up before the kill).
        wait_for(lambda: (w := workers()) and w["actor.0"]["stats"].get("env_steps")
                 and (w["trainer.0"]["policy_version"] or 0) > version + 2 and w, 60, "training on after the restart", process)
        wait_for(lambda: any(line["time_s"] > replaced_at and (line["episode_return_mean"] or 0) >= 150
                             for line in metrics_lines(run_dir)), 150, "a mean return of 150 after the restart", process)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted", summary
        final = workers()
        assert final["actor.0"]["restarts"] == 1 and sum(w["restarts"] for w in final.values()) == 1
        assert {w["host"] for w in final.values()} == {HEAD, SECOND}
        for name in ("actor.0", "actor.1"):
            assert final[name]["host"] == SECOND
            assert final[name]["streams"] == {"samples": "zmq", "inference": "zmq"}
        assert final["trainer.0"]["host"] == final["policy.0"]["host"] == HEAD
        assert final["trainer.0"]["streams"]["parameters"] == final["policy.0"]["streams"]["parameters"] == "shm"
        assert all(e.startswith(("tcp://127.0.0.2:", "tcp://127.0.0.3:")) for w in final.values() for e in w["endpoints"])
        run_id = json.loads((run_dir / "status.json").read_text())["run_id"]
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]
        # every node's worker logs travelled to the driver's run directory
        for name in final:
            assert f"starting {name}" in (run_dir / "logs" / f"{name}.log").read_text()
    finally:
        kill_run(process, run_dir)


def test_a_population_on_two_nodes_copies_a_member_into_another(cluster, run_srl, tmp_path):
    """Population-based training on the cluster: each member's actors on the second node, its
    trainer on the head; the manager's commands reach the trainers through the controller."""
    address = cluster.address
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo-pbt", "--run-dir", str(run_dir), "launcher=ray", f"ray.address={address}",
                     "population.size=2", "population.hyperparameters.lr.values=[0.00001, 0.003]",
                     "population.interval_versions=2", "population.min_episodes=5", "population.margin=0",
                     "actors.count=1", "actors.envs_per_slot=16", "trainers.batch_steps=256",
                     "actors.placement.resources={node2: 0.01}", "trainers.placement.resources={node1: 0.01}",
                     "stop.env_steps=30000", "stop.time_s=90",
                     "log.tensorboard=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lineage = [json.loads(line) for line in (run_dir / "lineage.jsonl").read_text().splitlines()]
    copies = [r for r in lineage if r["event"] == "copy"]
    assert copies, lineage
    workers = {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
    for m in ("m0", "m1"):
        assert workers[f"{m}.actor.0"]["host"] == SECOND and workers[f"{m}.trainer.0"]["host"] == HEAD
    copied = copies[0]["member"]
    # the member's trainer log travelled into the member's directory on the driver
    log = (run_dir / "members" / copied / "logs" / f"{copied}.trainer.0.log").read_text()
    assert f"members/{copies[0]['copied']}/checkpoints/{copies[0]['checkpoint']}" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    now = {m["member"]: m["hyperparameters"]["lr"] for m in summary["members"]}
    assert now[copied] == pytest.approx([r for r in copies if r["member"] == copied][-1]["hyperparameters"]["lr"])


def test_self_play_on_two_nodes_shares_one_pool(cluster, run_srl, tmp_path):
    """The policy pool lives in the run directory: the league on the head node writes the frozen
    versions, the actors on the second node read their opponents from it."""
    from conftest import metrics_lines, run_workers, train_until
    from srl.api.run_paths import RunPaths
    from srl.league.pool import Pool

    def rated_and_drawn(run) -> bool:  # what the run must show before it is stopped
        actors = [w for n, w in run_workers(run).items() if n.startswith("actor.")]
        return (any("selfplay_rating" in line for line in metrics_lines(run))
                and bool(actors) and all(w["stats"].get("opponent_draws", 0) > 1 for w in actors)
                and RunPaths(run).pool.exists() and len(Pool(RunPaths(run).pool).entries()) >= 2)

    run_dir = tmp_path / "run"
    train_until(run_dir, rated_and_drawn, "a rating round, two versions and opponents drawn", "duel-selfplay",
                "launcher=ray", f"ray.address={cluster.address}", "actors.placement.resources={node2: 0.01}",
                "trainers.placement.resources={node1: 0.01}", "workers.league.placement.resources={node1: 0.01}",
                "actors.envs_per_slot=16", "trainers.batch_steps=1024", "self_play.every_s=3",
                "self_play.snapshot_every_versions=3", "self_play.episodes=8", "self_play.envs=8",
                "self_play.opponents_per_round=2", "stop.env_steps=null", "log.tensorboard=false", cwd=tmp_path)
    # The head node froze versions; the actors on the second node drew their opponents among them.
    final = run_workers(run_dir)
    assert final["league.0"]["host"] == HEAD and final["actor.0"]["host"] == SECOND


def test_several_policies_on_two_nodes_with_one_policy_worker_serving_both(cluster, run_srl, tmp_path):
    """Speaker and listener, each with its own trainer on the head node; the actors and the one
    policy worker serving both policies on the second node, which gets each policy's
    parameters through a relay of its own."""
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2): pip install -e '.[pettingzoo]'")
    address = cluster.address
    run_dir = tmp_path / "run"
    trainers = [f"policies.{p}.trainers.placement.resources={{node1: 0.01}}" for p in ("speaker", "listener")]
    result = run_srl("train", "speaker-listener-mappo", "--run-dir", str(run_dir), "launcher=ray",
                     f"ray.address={address}", "actors.inference=remote", "actors.placement.resources={node2: 0.01}",
                     "policy_workers.placement.resources={node2: 0.01}", *trainers,
                     "stop.env_steps=5000", "stop.time_s=90", "log.tensorboard=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("env_steps"), summary
    workers = {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
    assert {n for n in workers if n.startswith("policy")} == {"policy.0"}
    for policy in ("speaker", "listener"):
        assert summary[f"{policy}/policy_version"] >= 2 and summary[f"{policy}/episode_return_mean"] is not None
        assert workers[f"trainer-{policy}.0"]["host"] == HEAD
        assert workers["policy.0"]["stats"][f"{policy}/policy_version"] >= 1, workers["policy.0"]
        assert any((run_dir / "checkpoints" / policy).glob("ckpt-*.pt"))
    assert workers["policy.0"]["host"] == workers["actor.0"]["host"] == SECOND
    assert workers["actor.0"]["streams"] == {"samples/speaker": "zmq", "samples/listener": "zmq",
                                             "inference/speaker": "shm", "inference/listener": "shm"}
    relays = [w for n, w in workers.items() if n.startswith("relay.")]
    assert len(relays) == 2 and all(w["host"] == SECOND for w in relays)  # one per policy's parameters
    run_id = json.loads((run_dir / "status.json").read_text())["run_id"]
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]


def test_inline_actors_and_an_eval_worker_on_the_second_node_read_parameters_through_one_relay(cluster, tmp_path):
    """Parameters cross the network once per node: a relay beside the inline actors and the
    evaluation worker on the second node re-publishes the trainer's versions in shm. The actors
    learn from them (a mean return of 150) and the evaluation worker's scores of two versions
    reach the driver's metrics."""
    from conftest import metrics_lines, train_until

    def evaluated(run) -> list[dict]:
        return [line for line in metrics_lines(run) if "eval_return_mean" in line]

    def learned_and_evaluated(run) -> bool:
        return (bool(e := evaluated(run)) and e[-1]["eval_version"] > e[0]["eval_version"]
                and any((line.get("episode_return_mean") or 0) >= 150 for line in metrics_lines(run)))

    run_dir = tmp_path / "run"
    train_until(run_dir, learned_and_evaluated, "a mean return of 150 and two evaluations of different versions",
                "cartpole-ppo", "launcher=ray", f"ray.address={cluster.address}", "actors.inference=inline",
                "actors.placement.resources={node2: 0.01}", "trainers.placement.resources={node1: 0.01}",
                "trainers.count=1", "evaluation.count=1", "evaluation.placement.resources={node2: 0.01}",
                "evaluation.every_s=1", "evaluation.episodes=4", "evaluation.envs=4", "stop.episode_return=null",
                "log.tensorboard=false", cwd=tmp_path, timeout=240)
    workers = {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
    assert workers["eval.0"]["host"] == workers["relay.0"]["host"] == SECOND and workers["trainer.0"]["host"] == HEAD
    assert workers["relay.0"]["streams"] == {"source": "zmq", "sink": "shm"}
    assert workers["actor.0"]["streams"]["parameters"] == workers["eval.0"]["streams"]["parameters"] == "shm"
    assert [n for n in workers if n.startswith("relay.")] == ["relay.0"]  # actors and eval read one copy
    assert all(line["eval_episodes"] == 4 for line in evaluated(run_dir))
    assert (run_dir / "checkpoints" / "best.pt").exists()


def test_muzero_with_its_buffer_and_reanalyse_worker_on_the_second_node(cluster, tmp_path):
    """cartpole-muzero: the searching actor and the trainer on the head node, the buffer and its
    reanalyse worker on the second; the reanalyse worker reads the trainer's newest parameters
    through that node's relay and its fresh targets reach the buffer beside it."""
    from conftest import run_workers, train_until

    def refreshed(run) -> bool:
        workers = run_workers(run)
        return "buffer.0" in workers and workers["buffer.0"]["stats"].get("refreshed", 0) > 0

    run_dir = tmp_path / "run"
    train_until(run_dir, refreshed, "stored targets refreshed by the reanalyse worker", "cartpole-muzero",
                "launcher=ray", f"ray.address={cluster.address}", "actors.placement.resources={node1: 0.01}",
                "trainers.placement.resources={node1: 0.01}", "replay.placement.resources={node2: 0.01}",
                "algorithm.args.reanalyse_fraction=0.25", "policy.args.simulations=8",
                "replay.learning_starts=1000", "stop.episode_return=null", "log.report_interval_s=1",
                "log.tensorboard=false", cwd=tmp_path)
    workers = run_workers(run_dir)
    assert workers["reanalyse.0"]["host"] == workers["buffer.0"]["host"] == SECOND
    assert workers["actor.0"]["host"] == workers["trainer.0"]["host"] == HEAD
    assert workers["reanalyse.0"]["streams"] == {"segments": "shm", "parameters": "shm"}  # the relay's copy
    assert [n for n in workers if n.startswith("relay.")] == ["relay.0"]
    assert workers["buffer.0"]["streams"]["samples"] == workers["buffer.0"]["streams"]["replay"] == "zmq"
    # (each worker's stats are its own last report: counts on either side of the stream, not compared)
    assert workers["reanalyse.0"]["stats"]["reanalysed"] > 0 and workers["buffer.0"]["stats"]["refreshed"] > 0


def test_auto_measures_and_lays_out_the_node_the_groups_are_pinned_to(cluster, run_srl, tmp_path):
    """`actors.count=auto` on a cluster: the rates are measured by a Ray task on the second node (the
    driver runs on the head), on the CPUs Ray gives that node, and the chosen layout runs there."""
    run_dir = tmp_path / "run"
    pinned = [f"{section}.placement.resources={{node2: 0.01}}" for section in ("actors", "policy_workers", "trainers")]
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray", f"ray.address={cluster.address}",
                     "actors.count=auto", "trainers.batch_steps=512", *pinned,
                     "stop.env_steps=10000", "log.tensorboard=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((run_dir / "layout.json").read_text())
    assert record["node"]["ip"] == SECOND and record["cores"] == 2 and not record["from_cache"]
    assert record["measured"]["cores"] == 2 and record["measured"]["env"] > 0
    count = record["chosen"]["actors.count"]
    assert f"srl: layout actors.count={count} " in result.stderr and f"on 2 cores of node {SECOND}" in result.stderr
    workers = json.loads((run_dir / "status.json").read_text())["workers"]
    assert {w["host"] for w in workers} == {SECOND}
    assert sum(w["kind"] == "actor" for w in workers) == count


def test_a_hand_layout_no_node_can_hold_is_refused_at_once(cluster, run_srl, tmp_path):
    """Four actors of one CPU each pinned to a 2-CPU node: Ray would wait for them for ever."""
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray",
                     f"ray.address={cluster.address}", "actors.count=4", "actors.placement.num_cpus=1",
                     "actors.placement.resources={node2: 0.01}", "log.tensorboard=false", timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    why = (f"placement: the 4 workers that fit only on node(s) {SECOND} (groups actor) ask for 4 CPU in all, "
           "and those nodes have 2")
    assert f"srl: config error: {why}" in result.stderr
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"].startswith(f"config error: {why}")


def test_auto_whose_measuring_fails_on_the_node_says_why_in_one_line(cluster, run_srl, tmp_path):
    """The env crashes inside the measuring task on the second node: the task's error comes back as
    one line naming the node and the cause (not Ray's wrapped remote traceback), and no run starts."""
    run_dir = tmp_path / "run"
    pinned = [f"{section}.placement.resources={{node2: 0.01}}" for section in ("actors", "policy_workers", "trainers")]
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray", f"ray.address={cluster.address}",
                     "actors.count=auto", "env.type=fake", "env.id=null", "env.args={crash_after_steps: 50}", *pinned,
                     "log.tensorboard=false", timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    why = (f"srl: train: the layout's measurements failed: measuring on node {SECOND} failed: "
           "the env (E): RuntimeError: simulated simulator crash after 50 steps")
    assert why in result.stderr.splitlines(), result.stderr[-3000:]
    assert not run_dir.exists()


def _without_token(**extra: str) -> dict[str, str]:
    """This process's environment less Ray's token settings (which the cluster fixture set), plus `extra`."""
    from srl.launch.loopback_ray import AUTH_VARIABLES

    return {**{k: v for k, v in os.environ.items() if k not in AUTH_VARIABLES}, **extra}


def test_a_driver_without_the_clusters_token_is_refused_in_one_line(cluster, tmp_path):
    """The cluster runs in token mode; a driver that sends no token, or another token, is told in
    one line what to set, before any run starts (Ray alone retries for 20 s, then a traceback)."""
    from conftest import srl_command

    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    cases = {"no token": ({}, "sends no token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH"),
             "another token": ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)},
                               f"refuses the token from RAY_AUTH_TOKEN_PATH ({wrong})")}
    for case, (env, said) in cases.items():
        run_dir = tmp_path / case.replace(" ", "_")
        result = subprocess.run(srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "launcher=ray",
                                            f"ray.address={cluster.address}", "log.tensorboard=false"),
                                cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_without_token(**env))
        assert result.returncode == 2, (case, result.stderr[-3000:])
        lines = [line for line in result.stderr.splitlines() if line.startswith("srl: config error:")]
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr, (case, result.stderr[-3000:])
        assert "InvalidAuthToken" not in result.stderr  # Ray's own retry lines are not shown


def test_a_private_cluster_keeps_its_token_out_of_home(tmp_path):
    """`launcher=ray` with no address starts a private cluster in token mode with a token of its
    own; Ray's default would write ~/.ray/auth_token, after which every `ray start --head` on the
    machine demands it of the nodes joining."""
    home = tmp_path / "home"
    home.mkdir()
    script = ("import os, ray\nfrom srl.launch.ray_launcher import connect\nconnect(None)\n"
              "print(os.environ['RAY_AUTH_MODE'], len(ray.nodes()))\nray.shutdown()\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                            env=_without_token(HOME=str(home), RAY_USAGE_STATS_ENABLED="0"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["token", "1"]
    assert not (home / ".ray" / "auth_token").exists()
