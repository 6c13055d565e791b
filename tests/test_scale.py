"""What lets one controller and one policy worker serve thousands of actors (docs/fanin.md):
paced heartbeats, a control loop that reads messages in batches, mappings that hold no file
descriptor; and a real run of 32 actor processes on two cores that restarts a killed actor."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import kill_run, srl_command, wait_for

from srl.api.config import SupervisionConfig
from srl.api.worker import StreamEnd, Supervision, WorkerSpec
from srl.launch import controller as controller_module
from srl.launch.supervision import (FAST_HEARTBEAT_S, HEARTBEAT_S, MAX_HEARTBEATS_PER_S, SMALL_RUN, Supervisor,
                                    WorkerState, heartbeat_period, silence_timeout)
from srl.streams.context import ContextSpec
from srl.streams.link import Received
from srl.streams.shm import Segment
from srl.workers.base import Worker


@pytest.mark.parametrize("workers", [1, 40, 41, 100, 499, 500, 501, 2000, 10_000, 100_000])
def test_the_controller_is_sent_at_most_2000_heartbeats_a_second_whatever_the_run(workers):
    period = heartbeat_period(workers)
    assert period == FAST_HEARTBEAT_S if workers <= SMALL_RUN else period >= HEARTBEAT_S
    assert workers / period <= MAX_HEARTBEATS_PER_S + 1e-9


def test_a_paced_worker_counts_as_silent_only_after_four_missed_beats():
    assert heartbeat_period(10_000) == 5.0
    assert silence_timeout(10.0, 0.25) == 10.0  # the configured timeout, in a small run
    assert silence_timeout(10.0, 5.0) == 20.0

    class Launcher:
        hangs_possible = True

        def exitcode(self, name):
            return None

        def signal(self, name, sig):
            signals.append(name)

    signals: list[str] = []
    supervisor = Supervisor(Launcher(), ContextSpec("r", b"k", "/tmp/n", "/tmp"),
                            SupervisionConfig(heartbeat_timeout_s=10.0), lambda name: "", lambda worker: None)
    assert supervisor.pace(10_000) == 5.0 and supervisor.silence_s == 20.0
    for name, heard in (("quiet", 100.0 - 15), ("gone", 100.0 - 25)):
        spec = WorkerSpec(name, "actor", "actor", 0, 1, 0, {}, {}, StreamEnd("control", "shm"), "/tmp")
        worker = supervisor.workers[name] = WorkerState(spec, Supervision(), state="running", last_heartbeat=heard)
        worker.moved_at = heard
    assert supervisor.check(now=100.0) is None
    assert signals == ["gone"]  # 15 s without a beat is three missed beats, not yet silence


class _Answers:
    """A control link whose answers are given."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def recv(self, timeout_ms=0):
        return self.answers.pop(0) if self.answers else None


class _Idle(Worker):
    def setup(self): ...

    def poll(self): ...


def test_a_worker_beats_as_often_as_the_controller_answers_and_waits_for_it_longer():
    spec = WorkerSpec("w.0", "w", "w", 0, 1, 0, {}, {}, StreamEnd("control", "shm"), "/tmp")
    worker = _Idle(spec, ctx=None)
    assert worker.heartbeat_s == 0.25 and worker.orphan_timeout_s == spec.orphan_timeout_s
    worker._control = _Answers(Received(0, {"command": "ok", "info": {"env_steps": 7, "heartbeat_s": 5.0}}, None))
    worker._read_answers(time.monotonic())
    assert worker.heartbeat_s == 5.0
    assert worker.orphan_timeout_s == 20.0  # four answers missed, not one
    assert worker.controller_info == {"env_steps": 7}


def test_the_control_loop_reads_a_batch_of_messages_per_turn_not_one():
    controller = object.__new__(controller_module.Controller)
    waiting = [Received(0, {"worker": f"actor.{i}"}, None) for i in range(1500)]
    controller.control = _Answers(*waiting)
    handled = []
    controller._handle = handled.append
    controller._take_messages(0)
    assert len(handled) == controller_module.MESSAGES_PER_TURN
    controller._take_messages(0)
    assert len(handled) == 1500


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_shared_memory_mapping_holds_no_file_descriptor_and_outlives_its_segment_while_viewed():
    before = _open_fds()
    name = f"srl_test_{os.getpid()}_fds"
    owner = Segment.create(name, 4096)
    reader = Segment.attach(name)
    assert _open_fds() == before  # a policy worker maps two segments per actor it serves
    owner.buf[:4] = b"abcd"
    view = np.frombuffer(reader.buf[:4], np.uint8)
    assert bytes(view) == b"abcd"
    reader.close()
    owner.close()
    assert not (Path("/dev/shm") / name).exists()
    assert bytes(view) == b"abcd"  # still mapped: a view refers to it


# ---------------------------------------------------------------------------- a real run
ACTORS = 32


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.integration
def test_32_actor_processes_on_two_cores_run_restart_a_killed_actor_and_stop_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), f"actors.count={ACTORS}",
                    "actors.envs_per_slot=2", "trainers.batch_steps=1024", "stop.episode_return=null",
                    "stop.time_s=120", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def actors(status):
            return [w for w in status.get("workers", []) if w["group"] == "actor"]

        def all_stepping():
            rows = actors(_status(run_dir))
            return rows if len(rows) == ACTORS and all(
                w["state"] == "running" and w["stats"].get("env_steps", 0) > 0 for w in rows) else None

        victim = wait_for(all_stepping, 60, f"{ACTORS} actors stepping", process)[ACTORS // 2]
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced():
            w = next(w for w in actors(_status(run_dir)) if w["name"] == victim["name"])
            return w if w["restarts"] == 1 and w["pid"] != victim["pid"] and w["state"] == "running" else None

        wait_for(replaced, 90, "the killed actor replaced", process)
        pids = [w["pid"] for w in _status(run_dir)["workers"]]
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the run stops cleanly
        process.wait(timeout=60)
        assert process.returncode == 0, process.stderr.read()[-2000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted" and "errors" not in summary, summary
        assert sum(w["restarts"] for w in _status(run_dir)["workers"]) == 1
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]  # no orphans
        assert not list(Path("/dev/shm").glob(f"srl_{_status(run_dir)['run_id']}_*"))
    finally:
        kill_run(process, run_dir)
