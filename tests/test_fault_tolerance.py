"""Fault injection on real runs: killed workers are replaced and the run still reaches its goal."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import kill_run, metrics_lines, run_workers, srl_command, train_until, wait_for

pytestmark = pytest.mark.integration


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _best_return(run_dir: Path) -> float:
    """The best mean return the run reached. A fixed-length CartPole run can pass 475 and then
    lose some of it again (PPO at a constant learning rate, long after solving): what shows
    that the run kept learning through the faults is the best it reached, not where it ended."""
    return max((r["episode_return_mean"] for r in metrics_lines(run_dir) if r["episode_return_mean"] is not None),
               default=0.0)


def _worker(run_dir: Path, name: str) -> dict | None:
    for w in _status(run_dir).get("workers", []):
        if w["name"] == name:
            return w
    return None


def test_killed_actor_policy_worker_and_trainer_are_replaced(tmp_path):
    run_dir = tmp_path / "run"
    # Stopped by Ctrl-C once the kills are done and it learned on, not by a return to reach
    # (CartPole can reach 450 while the kills are still under way) nor by a time limit (a busy
    # machine can use one up before they are).
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "actors.inference=remote",
                    "stop.episode_return=null", "stop.env_steps=null", "stop.time_s=300", "checkpoint.every_s=2", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for name in ("actor.0", "policy.0", "trainer.0"):
            running = lambda: (_status(run_dir).get("state") == "running"  # noqa: E731
                               and (w := _worker(run_dir, name)) and w["state"] == "running" and w)
            victim = wait_for(running, 60, f"{name} running", process)
            try:
                os.kill(victim["pid"], signal.SIGKILL)
            except ProcessLookupError:
                raise AssertionError(f"{name} (pid {victim['pid']}) was gone before it was killed; "
                                     f"status: {_status(run_dir)}") from None
            replaced = lambda: ((w := _worker(run_dir, name)) and w["restarts"] >= 1  # noqa: E731
                                and w["state"] == "running" and w["pid"] != victim["pid"] and w)
            wait_for(replaced, 60, f"{name} replaced", process)
        wait_for(lambda: _best_return(run_dir) >= 200, 120, "a return of 200", process)  # learning went on (random: 22)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted", summary
        workers = {w["name"]: w for w in _status(run_dir)["workers"]}
        for name in ("actor.0", "policy.0", "trainer.0"):
            assert workers[name]["restarts"] == 1 and workers[name]["restart_latency_s"] is not None
    finally:
        kill_run(process, run_dir)


def test_crash_looping_env_stops_within_the_restart_budget(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "env.type=fake", "env.id=null",
                     "env.args={crash_after_steps: 50}", "actors.count=1", "actors.envs_per_slot=2",
                     "supervision.max_restarts=2", "stop.time_s=120", "log.tensorboard=false", timeout=120)
    assert result.returncode == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "restart budget" in summary["stop_reason"] and "actor.0" in summary["stop_reason"]
    assert summary["wall_time_s"] < 60
    assert "simulated simulator crash" in result.stderr  # the worker's last log lines are shown
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{_status(run_dir)['run_id']}_")]


def test_resume_after_sigkill_of_everything(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.time_s=200", "stop.episode_return=null",
                    "checkpoint.every_s=1", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def saved():
            infos = [json.loads(p.read_text()) for p in sorted((run_dir / "checkpoints").glob("ckpt-*.json"))]
            return [i for i in infos if i["env_steps"] > 0]
        wait_for(saved, 60, "a checkpoint with env steps", process)
        run_id = _status(run_dir)["run_id"]
        os.killpg(process.pid, signal.SIGKILL)  # the whole process group, no goodbye
        process.wait()
        time.sleep(1)
        checkpoint = saved()[-1]
        target = checkpoint["env_steps"] + 20000
        result = run_srl("train", "--resume", str(run_dir), f"stop.env_steps={target}")
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["env_steps"] >= target and summary["policy_version"] >= checkpoint["version"]
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]  # the killed run's, swept
    finally:
        kill_run(process, run_dir)  # after the assertions: it sweeps too


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its reaper has ended)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_workers_of_a_sigkilled_controller_exit_and_leave_no_shared_memory(tmp_path):
    from srl.api.worker import WorkerSpec

    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "actors.inference=remote",
                    "stop.episode_return=null", "stop.time_s=120", "log.tensorboard=false", "log.progress=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = wait_for(lambda: (s := _status(run_dir)).get("workers")
                           and all(w["state"] == "running" for w in s["workers"]) and s, 60, "every worker running",
                           process)
        run_id, pids = status["run_id"], [w["pid"] for w in status["workers"]]
        assert [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]  # the run's streams
        os.kill(status["controller_pid"], signal.SIGKILL)  # no goodbye, no sweep
        process.wait(timeout=10)
        deadline = time.monotonic() + WorkerSpec.orphan_timeout_s
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], "workers outlived their controller's orphan timeout"
        # Each worker removed the segments it made on its way out: nothing waits for a sweep.
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]
    finally:
        kill_run(process, run_dir)


def test_hostile_traffic_to_every_port_changes_nothing_but_the_rejection_counters(tmp_path):
    """Garbage, oversized messages, a captured valid message replayed, and a flood, at every
    TCP endpoint `srl status --json` lists: the run keeps learning and counts each by reason."""
    import random
    import socket

    import zmq

    run_dir = tmp_path / "run"
    # Stopped by Ctrl-C once it learned on after the attack, not by a return to reach: CartPole
    # can reach any return before the traffic is all sent, and a run that ended leaves the
    # forged messages no peer to go to. Small caps
    # (a CartPole trajectory is ~100 KB) keep the oversized messages cheap to send.
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "actors.inference=remote",
                    "streams.transport=zmq", "streams.max_message_mb.inference=1", "streams.max_message_mb.samples=4",
                    "stop.episode_return=null", "stop.env_steps=null", "stop.time_s=300", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    context = zmq.Context()
    try:
        def all_listening():
            workers = _status(run_dir).get("workers", [])
            servers = [w for w in workers if w["kind"] in ("policy", "trainer")]
            return workers and all(w["state"] == "running" for w in workers) and all(w["endpoints"] for w in servers)
        wait_for(all_listening, 60, "servers listening", process)
        status = json.loads(subprocess.run(srl_command("status", "--json", str(run_dir)), capture_output=True,
                                           text=True, check=True, timeout=60).stdout)
        listed = {w["name"]: w["endpoints"] for w in status["workers"]}
        # The policy worker serves inference; the trainer takes samples, then publishes parameters.
        routers = [listed["policy.0"][0], listed["trainer.0"][0]]
        (publisher,) = listed["trainer.0"][1:]
        assert all(e.startswith("tcp://127.0.0.1:") for e in [*routers, publisher])

        # Anyone on the host may subscribe to the parameters: capture one valid, sealed message.
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(publisher)
        assert sub.poll(5000), "no parameters published within 5 s"
        captured = [bytes(f) for f in sub.recv_multipart()]
        sub.close()

        rng = random.Random(0)
        for endpoint in routers:
            host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
            for _ in range(5):  # raw garbage: not even a ZeroMQ handshake
                with socket.create_connection((host, int(port)), timeout=2) as raw:
                    raw.sendall(rng.randbytes(rng.randint(1, 4096)))
            for messages in (
                [[rng.randbytes(rng.randint(0, 300)) for _ in range(rng.randint(1, 4))] for _ in range(20)],  # forged
                [[b"x" * (1 << 20)] * 5],  # 5 MiB in frames under the cap, over it in all: counted
                [[b"x" * (5 << 20)]],  # one frame over the cap: libzmq drops the peer unread
                [captured, captured],  # valid, but sealed for the parameter stream
                [[b"SRL1{", b"y" * 64]] * 2000,  # a flood
            ):
                dealer = context.socket(zmq.DEALER)  # a well-formed ZeroMQ peer
                dealer.setsockopt(zmq.SNDTIMEO, 5000)  # fail, not hang, if the server has gone
                dealer.connect(endpoint)
                for message in messages:
                    dealer.send_multipart(message)
                dealer.close(linger=5000)  # after what it queued is delivered (a loaded host connects slowly)
        version = max(w["policy_version"] or 0 for w in _status(run_dir)["workers"])
        # It learns to cartpole-ppo's threshold (random: 22) and goes on training after the attack.
        wait_for(lambda: _best_return(run_dir) >= 475
                  and max(w["policy_version"] or 0 for w in _status(run_dir).get("workers", [])) > version + 10,
                  150, "a return of 475 and ten versions after the attack", process)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted", summary
        assert summary["policy_version"] > version + 10, summary
        workers = {w["name"]: w for w in _status(run_dir)["workers"]}
        for name in ("policy.0", "trainer.0"):
            rejected = workers[name]["rejected"]
            assert rejected.get("bad_tag", 0) >= 2020 and rejected.get("oversized", 0) >= 1, (name, rejected)
            assert rejected.get("wrong_stream", 0) >= 2, (name, rejected)
        assert workers["policy.0"]["dropped"] >= 2020
        assert not any(w["rejected"] for w in workers.values() if w["kind"] == "actor")  # nothing aimed at them
        assert all(w["restarts"] == 0 for w in workers.values())
    finally:
        context.destroy(linger=0)
        kill_run(process, run_dir)


def test_a_training_step_longer_than_the_heartbeat_timeout_is_not_a_hang(tmp_path):
    run_dir = tmp_path / "run"
    train_until(run_dir, lambda run: (run_workers(run).get("trainer.0", {}).get("trained_steps") or 0) >= 2 * 2048,
                "two steps of 3 s",
                "cartpole-ppo", "algorithm.type=noop", "algorithm.args={step_sleep_s: 3}",
                "supervision.heartbeat_timeout_s=1.5", "stop.episode_return=null", "log.tensorboard=false", cwd=tmp_path)
    assert run_workers(run_dir)["trainer.0"]["restarts"] == 0


def test_a_worker_that_cannot_start_stops_the_run_at_once(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "env.id=NoSuchEnv-v0", "stop.time_s=60",
                     "log.tensorboard=false", timeout=120)
    assert result.returncode == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "failed to start" in summary["stop_reason"] and "NoSuchEnv" in summary["stop_reason"]
    assert all(w["restarts"] == 0 for w in _status(run_dir)["workers"])


def test_a_replaced_buffer_reloads_its_saved_contents(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-dqn", "--run-dir", str(run_dir), "replay.count=1", "trainers.count=1",
                    "actors.count=1", "replay.save_contents=true", "checkpoint.every_s=1",
                    "stop.episode_return=null", "stop.env_steps=null", "stop.time_s=60", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    contents = run_dir / "checkpoints" / "replay-0.npz"
    try:
        def saved_and_running():
            buffer = _worker(run_dir, "buffer.0")
            return contents.exists() and buffer and buffer["state"] == "running" and buffer["stats"] and buffer
        victim = wait_for(saved_and_running, 60, "buffer.0 saving its contents", process)
        os.kill(victim["pid"], signal.SIGKILL)
        # What it saved last before the kill, at least: held at once by its replacement,
        # before its actor could have refilled it (the saved trajectories, 16 env steps each).
        saved = int(np.load(contents, allow_pickle=False)["counters"][0]) * 16
        replaced = lambda: ((w := _worker(run_dir, "buffer.0")) and w["restarts"] == 1  # noqa: E731
                            and w["pid"] != victim["pid"] and w["stats"] and w)
        buffer = wait_for(replaced, 60, "buffer.0 replaced", process)
        assert buffer["stats"]["held_steps"] >= min(saved, 100_000) > 0
        assert buffer["stats"]["held_steps"] > buffer["stats"]["taken_steps"]  # not refilled by its actor
    finally:
        kill_run(process, run_dir)
