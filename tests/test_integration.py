"""Real local runs: worker processes, streams over each transport, learning, clean shutdown."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import kill_run, srl_command, train_inline

pytestmark = pytest.mark.integration

RANDOM_CARTPOLE_RETURN = 22.0


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _segments(run_id: str) -> list[str]:
    return [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{run_id}_")]


@pytest.mark.parametrize("transport,inference", [("shm", "remote"), ("zmq", "remote"), ("shm", "inline")])
def test_cartpole_learns(run_srl, tmp_path, transport, inference):
    run_dir = tmp_path / "run"
    # One variant also checks that each group's placement (CPU priority, torch threads) is applied.
    placement = (["trainers.placement.threads=2", "actors.placement.nice=7", "actors.placement.idle=true"]
                 if inference == "inline" else [])
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), f"streams.transport={transport}",
                     f"actors.inference={inference}", "stop.episode_return=200", "stop.env_steps=400000",
                     "log.tensorboard=false", *placement)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(run_dir)
    assert summary["episode_return_mean"] >= 8 * RANDOM_CARTPOLE_RETURN, summary
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
    status = json.loads((run_dir / "status.json").read_text())
    used = {t for w in status["workers"] for t in w["streams"].values()}
    assert used == {transport}
    assert not _segments(status["run_id"])
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    assert {"time_s", "env_steps", "fps", "episode_return_mean", "policy_version"} <= record.keys()
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert {p.name for p in (run_dir / "logs").iterdir()} >= {"trainer.0.log", "actor.0.log"}
    if placement:
        base = os.nice(0)  # `nice` adds to the niceness the run started with
        assert f"nice {base}, 2 torch threads" in (run_dir / "logs" / "trainer.0.log").read_text()
        idle = ", idle" if hasattr(os, "SCHED_IDLE") else ""
        assert f"nice {min(base + 7, 19)}{idle}, 1 torch threads" in (run_dir / "logs" / "actor.0.log").read_text()


def test_sigint_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.time_s=120",
                                           "log.tensorboard=false"),
                               cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        status = {}
        while time.monotonic() < deadline:
            if (run_dir / "status.json").exists():
                status = json.loads((run_dir / "status.json").read_text())
                if status["workers"] and all(w["state"] == "running" for w in status["workers"]):
                    break
            time.sleep(0.2)
        assert status and all(w["state"] == "running" for w in status["workers"]), status
        assert _segments(status["run_id"])  # the run really uses shared memory
        family = [process.pid] + [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        process.wait(timeout=20)
        time.sleep(0.5)
        alive = [pid for pid in family if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"processes left behind: {alive}"
        assert not _segments(status["run_id"])
        assert _summary(run_dir)["stop_reason"] == "interrupted"
    finally:
        kill_run(process, run_dir)


def test_resume_continues_from_checkpoint(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    train_inline(run_dir, "cartpole-ppo", "stop.env_steps=20000", "stop.episode_return=null")  # then resumed by processes
    before = _summary(run_dir)
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt-*.json"))
    saved = json.loads(checkpoints[-1].read_text())
    assert saved["env_steps"] >= 20000 and saved["version"] == before["policy_version"]
    reports_before = len((run_dir / "metrics.jsonl").read_text().splitlines())

    second = run_srl("train", "--resume", str(run_dir), "stop.env_steps=40000")
    assert second.returncode == 0, second.stderr[-3000:]
    after = _summary(run_dir)
    assert after["env_steps"] >= 40000
    assert after["policy_version"] > before["policy_version"]
    new_reports = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[reports_before:]]
    assert new_reports[0]["env_steps"] >= saved["env_steps"]  # counting continues, not restarts
    # Versions continue too (the summary above shows training went on; the last report may come
    # before the trainer's next heartbeat, so it is only required not to have gone back).
    assert new_reports[-1]["policy_version"] >= saved["version"]


def test_config_error_launches_nothing(run_srl, tmp_path):
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(tmp_path / "run"), "actors.rign_size=2")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "actors.rign_size" in result.stderr
    assert not (tmp_path / "run").exists()


def test_multi_agent_env_through_remote_inference_and_status(run_srl, tmp_path):
    """A two-agent env, two ring slots per actor, a policy worker, over ZeroMQ; then `srl status`."""
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "env.type=fake", "env.id=null",
                     "env.args={n_agents: 2, episode_length: 20}", "actors.inference=remote", "actors.ring_size=2",
                     "actors.envs_per_slot=3", "actors.trajectory_length=16", "trainers.batch_steps=192",
                     "streams.transport=zmq", "stop.env_steps=6000", "stop.episode_return=null", "log.tensorboard=false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(run_dir)
    assert summary["env_steps"] >= 6000 and summary["policy_version"] > 0
    assert summary["episode_return_mean"] is not None  # episodes of 20 steps finished and were counted

    status = run_srl("status", str(run_dir), "--json")
    workers = json.loads(status.stdout)["workers"]
    assert {w["kind"] for w in workers} == {"actor", "policy", "trainer"}
    for w in workers:
        assert {"name", "kind", "pid", "host", "state", "fps", "restarts"} <= w.keys()
        assert w["state"] == "stopped" and w["restarts"] == 0
        assert w["rejected"] == {}, w  # sealed traffic between honest workers: no false replay or misdirection
    servers = [w for w in workers if w["kind"] in ("policy", "trainer")]
    assert all(e.startswith("tcp://127.0.0.1:") for w in servers for e in w["endpoints"])
    table = run_srl("status", str(run_dir))
    assert table.returncode == 0 and "policy.0" in table.stdout and "rejected" in table.stdout


def test_two_data_parallel_trainers_stay_identical(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "trainers.count=2", "actors.count=2",
                     "trainers.batch_steps=1024", "stop.env_steps=30000", "stop.episode_return=null",
                     "log.tensorboard=false")
    assert result.returncode == 0, result.stderr[-3000:]
    trainers = [w for w in json.loads((run_dir / "status.json").read_text())["workers"] if w["kind"] == "trainer"]
    assert len(trainers) == 2
    assert trainers[0]["policy_version"] == trainers[1]["policy_version"] > 3
    assert trainers[0]["param_digest"] == trainers[1]["param_digest"]
