"""Progress watchdogs: a worker that heartbeats but does nothing is hung, and the right one is blamed.

The decisions are tested on a `Supervisor` fed heartbeats by hand; two real runs check that
a trainer stuck inside its algorithm and actors stuck inside their envs end the run with a
reason instead of hanging it.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import srl_command
from test_graph import FakeLauncher, _config, _specs

from srl.api.config import SupervisionConfig
from srl.api.registry import WORKERS
from srl.api.worker import HUNG_SIGNAL
from srl.launch.supervision import STACK_DUMP_MAX_S, Supervisor, WorkerState, last_words
from srl.streams.context import ContextSpec

USER_CODE = Path(__file__).resolve().parent / "user_code"

STACKS = """2026-01-01 00:00:00,000 trainer.0 INFO starting trainer.0
2026-01-01 00:00:01,000 trainer.0 INFO step 3
Thread 0x00007f (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007e (most recent call first):
  File "/src/hanging.py", line 25 in step
  File "/src/trainer.py", line 131 in _train
"""


def _supervised(budget: SupervisionConfig, log_tail=lambda name: STACKS):
    """Two actors, a policy worker and a trainer started under a supervisor (a fake launcher)."""
    specs = _specs(_config(actors={"count": 2}))
    launcher = FakeLauncher()
    supervisor = Supervisor(launcher, ContextSpec("r", b"k", "/tmp/n", "/tmp"), budget, log_tail,
                            on_replaced=lambda worker: None)
    for spec in specs.values():
        kind = WORKERS.resolve(spec.kind)
        supervisor.start(WorkerState(spec, kind.supervision, kind.counters, progress_stat=kind.progress))
    return supervisor, launcher


def _watched(window: float = 5.0, max_restarts: int = 3, log_tail=lambda name: STACKS, **by_group: float):
    """Actors and a trainer under a supervisor with progress windows, each at its first heartbeat (t=0)."""
    return _supervised(SupervisionConfig(heartbeat_timeout_s=1000, progress_timeout_s=window,
                                         max_restarts=max_restarts, progress_timeout_by_group=by_group), log_tail)


def _beat(supervisor: Supervisor, now: float, **workers: tuple[int, str]) -> None:
    """A heartbeat at `now` from each named worker: (its progress counter, the port it waits on)."""
    for name, (progress, waiting) in workers.items():
        worker = supervisor.workers[name.replace("_", ".")]
        worker.stats = {worker.progress_stat: progress}
        supervisor.heard_from(worker, {"waiting": waiting}, b"c", now)


def test_a_stuck_trainer_is_blamed_not_the_actors_that_wait_on_it():
    supervisor, launcher = _watched(window=5)
    _beat(supervisor, 0, trainer_0=(0, ""), policy_0=(0, ""), actor_0=(0, ""), actor_1=(0, ""))
    _beat(supervisor, 1, trainer_0=(2048, ""), policy_0=(500, ""), actor_0=(1000, ""), actor_1=(1000, ""))
    for t in range(2, 8):  # trainer stuck in a step; actors out of credits from then on
        _beat(supervisor, t, trainer_0=(2048, ""), policy_0=(550, "inference"), actor_0=(1100, "samples"),
              actor_1=(1100, "samples"))
        assert supervisor.check(t) is None
    assert launcher.signals == [("trainer.0", HUNG_SIGNAL)]  # stacks first (into its log) ...
    trainer = supervisor.workers["trainer.0"]
    assert trainer.state == "hung" and "made no progress for 6 s" in trainer.hung
    assert supervisor.check(7.0) is None  # ... then (fake launcher: it is gone) restarted
    assert trainer.restarts == 1 and supervisor.workers["actor.0"].restarts == 0


def test_a_trainer_waiting_for_samples_from_dead_actors_is_not_hung():
    supervisor, launcher = _watched(window=5)
    _beat(supervisor, 0, trainer_0=(0, ""), policy_0=(0, ""), actor_0=(0, ""), actor_1=(0, ""))
    for t in range(1, 20):
        _beat(supervisor, t, trainer_0=(0, "samples"), policy_0=(t * 100, ""), actor_0=(t * 100, ""),
              actor_1=(t * 100, ""))
        assert supervisor.check(t) is None
    assert launcher.signals == []


def test_the_window_is_per_group_and_starts_at_the_first_heartbeat():
    supervisor, launcher = _watched(window=5, trainer=30)
    # A slow start (Atari), then a long first step (a compile, CUDA start-up): within its 30 s, then past it.
    _beat(supervisor, 100, trainer_0=(0, ""), policy_0=(0, ""), actor_0=(0, ""), actor_1=(0, ""))
    for t in range(101, 132):
        _beat(supervisor, t, trainer_0=(0, ""), policy_0=(t, ""), actor_0=(t, ""), actor_1=(t, ""))
        assert supervisor.check(t) is None
        assert launcher.signals == ([("trainer.0", HUNG_SIGNAL)] if t > 130 else [])


def test_progress_is_judged_from_heartbeats_not_from_a_gap_in_them():
    # The controller read nothing for a while (it was starved of CPU), or a worker was silent:
    # no heartbeat said the worker stood still, and silence is the heartbeat timeout's business.
    supervisor, launcher = _watched(window=5)
    _beat(supervisor, 0, trainer_0=(0, ""), policy_0=(0, ""), actor_0=(0, ""), actor_1=(0, ""))
    _beat(supervisor, 1, trainer_0=(2048, ""), policy_0=(500, ""), actor_0=(1000, ""), actor_1=(1000, ""))
    assert supervisor.check(30) is None and launcher.signals == []


def test_when_every_worker_waits_and_none_moves_the_run_stops_with_who_waits_on_what():
    supervisor, _ = _watched(window=5)
    _beat(supervisor, 0, trainer_0=(0, ""), policy_0=(0, ""), actor_0=(0, ""), actor_1=(0, ""))
    for t in range(1, 6):  # a lost message: everyone waits on someone
        _beat(supervisor, t, trainer_0=(0, "samples"), policy_0=(0, "inference"), actor_0=(0, "inference"),
              actor_1=(0, "samples"))
        assert supervisor.check(t) is None
    _beat(supervisor, 6, trainer_0=(0, "samples"), policy_0=(0, "inference"), actor_0=(0, "inference"),
          actor_1=(0, "samples"))
    reason, _ = supervisor.check(6)
    assert reason.startswith("no worker made progress for 6 s") and "actor.0 on inference" in reason


def _hanging_trainer(log: dict[str, str]):
    """A supervisor whose trainer is found hung at t=6 (its log: `log["text"]`); it dies only when killed."""
    supervisor, launcher = _watched(window=5, max_restarts=0, log_tail=lambda name: log["text"])
    launcher.signal = lambda name, sig: launcher.signals.append((name, sig))
    for t in range(7):
        _beat(supervisor, t, trainer_0=(0, ""), policy_0=(0, "inference"), actor_0=(0, "samples"),
              actor_1=(0, "samples"))
        assert supervisor.check(t) is None
    assert launcher.signals == [("trainer.0", HUNG_SIGNAL)]
    return supervisor, launcher


#: The log before the trainer wrote its stacks, and halfway through them.
BEFORE_STACKS = STACKS[:STACKS.index("Thread 0x")]
HALF_STACKS = STACKS[:STACKS.index("Current thread")]


def test_a_hung_worker_past_its_budget_stops_the_run_with_where_it_was_stuck():
    log = {"text": BEFORE_STACKS}
    supervisor, launcher = _hanging_trainer(log)
    log["text"] = STACKS  # its stacks, written when asked
    assert supervisor.check(6.6) is None and supervisor.check(6.8) is None
    assert launcher.signals == [("trainer.0", HUNG_SIGNAL), ("trainer.0", signal.SIGKILL)]
    launcher.codes["trainer.0"] = -9
    reason, detail = supervisor.check(7.0)
    assert reason.startswith("worker trainer.0 made no progress for 6 s") and "restart budget" in reason
    assert 'stuck at File "/src/hanging.py", line 25 in step' in reason and "INFO step 3" in reason
    assert "\n" not in reason and "hanging.py" in detail


def test_stacks_written_late_or_read_halfway_are_waited_for_before_the_kill():
    """On a busy box a hung worker may write its stacks well after it was asked, or be read while
    it writes them: the supervisor kills it only once its log has grown and then held still (up
    to STACK_DUMP_MAX_S), so the stop reason still says where it was stuck."""
    log = {"text": BEFORE_STACKS}
    supervisor, launcher = _hanging_trainer(log)
    assert supervisor.check(6.6) is None and supervisor.check(7.5) is None  # nothing written yet ...
    assert len(launcher.signals) == 1  # ... so not killed yet
    log["text"] = HALF_STACKS
    assert supervisor.check(7.7) is None  # on its way
    log["text"] = STACKS
    assert supervisor.check(7.9) is None and len(launcher.signals) == 1  # still growing
    assert supervisor.check(8.1) is None and launcher.signals[-1] == ("trainer.0", signal.SIGKILL)
    launcher.codes["trainer.0"] = -9
    reason, _ = supervisor.check(8.3)
    assert 'stuck at File "/src/hanging.py", line 25 in step' in reason


def test_a_hung_worker_whose_log_never_grows_is_killed_after_the_longest_wait():
    supervisor, launcher = _hanging_trainer({"text": BEFORE_STACKS})
    assert supervisor.check(6 + STACK_DUMP_MAX_S - 0.1) is None and len(launcher.signals) == 1
    assert supervisor.check(6 + STACK_DUMP_MAX_S + 0.1) is None
    assert launcher.signals[-1] == ("trainer.0", signal.SIGKILL)
    launcher.codes["trainer.0"] = -9
    reason, _ = supervisor.check(6 + STACK_DUMP_MAX_S + 0.3)
    assert "its last log lines: " in reason and "stuck at" not in reason  # what it said, not where it hung


def test_last_words_name_the_main_threads_innermost_frame_and_the_last_real_log_lines():
    words = last_words(STACKS)
    assert words == ('stuck at File "/src/hanging.py", line 25 in step; its last log lines: '
                     "2026-01-01 00:00:00,000 trainer.0 INFO starting trainer.0 | "
                     "2026-01-01 00:00:01,000 trainer.0 INFO step 3")
    assert last_words("") == "" and last_words("just a line") == "its last log lines: just a line"


def test_a_progress_window_for_a_group_the_graph_lacks_is_a_config_error():
    from srl.api.config import ConfigError
    from srl.prepare import resolve_graph as resolve

    with pytest.raises(ConfigError, match=r"progress_timeout_by_group: no group 'trainers' .*trainer"):
        resolve(_config(supervision={"progress_timeout_by_group": {"trainers": 600}}))
    assert resolve(_config(supervision={"progress_timeout_by_group": {"trainer": 600}}))


# ---------------------------------------------------------------------------- real runs
def _train(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, dict, dict]:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.episode_return=null",
                    "log.tensorboard=false", "log.progress=false", *overrides),
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(USER_CODE), os.environ.get("PYTHONPATH", "")])})
    summary = json.loads((run_dir / "summary.json").read_text())
    status = json.loads((run_dir / "status.json").read_text())
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{status['run_id']}_")]
    return result, summary, {w["name"]: w for w in status["workers"]}


@pytest.mark.integration
def test_a_trainer_stuck_in_its_algorithm_is_restarted_then_stops_the_run_with_a_reason(tmp_path):
    # Its heartbeats go on (a helper thread beats during a training step); its progress does not.
    result, summary, workers = _train(tmp_path, "algorithm.type=hanging:HangingAlgorithm", "algorithm.args.hang_at=2",
                                      "supervision.progress_timeout_s=3", "supervision.max_restarts=1",
                                      "checkpoint.every_s=1", "stop.time_s=100")
    assert result.returncode == 1, result.stderr[-3000:]
    reason = summary["stop_reason"]
    assert reason.startswith("worker trainer.0 made no progress for 3 s") and "restart budget" in reason, reason
    assert "hanging.py" in reason and "in step" in reason  # where it was stuck, from its stacks
    assert summary["wall_time_s"] < 60  # detected within its window, not by the test's timeout
    assert workers["trainer.0"]["restarts"] == 1  # recovered once, then stuck again
    assert all(w["restarts"] == 0 for name, w in workers.items() if name != "trainer.0")  # waiting is no fault


@pytest.mark.integration
def test_a_run_stopped_only_by_env_steps_whose_actors_hang_ends_with_a_reason(tmp_path):
    result, summary, workers = _train(tmp_path, "env.type=fake", "env.id=null", "env.args={hang_after_steps: 300}",
                                      "actors.envs_per_slot=2", "supervision.heartbeat_timeout_s=2",
                                      "supervision.max_restarts=0", "stop.time_s=null", "stop.env_steps=10000000")
    assert result.returncode == 1, result.stderr[-3000:]
    reason = summary["stop_reason"]
    assert reason.startswith("worker actor.") and "sent no heartbeat" in reason, reason
    assert "fake.py" in reason and "in step" in reason
    assert summary["wall_time_s"] < 45
    assert workers["trainer.0"]["restarts"] == 0


@pytest.mark.parametrize("heartbeat_timeout, start_timeout, limit", [(10, 50, 50), (100, 50, 100)])
def test_a_worker_that_never_starts_stops_the_run_after_the_start_timeout_and_never_before_a_heartbeat_timeout(
        heartbeat_timeout, start_timeout, limit):
    supervisor, _ = _supervised(SupervisionConfig(heartbeat_timeout_s=heartbeat_timeout, start_timeout_s=start_timeout))
    started = max(w.started_at for w in supervisor.workers.values())
    assert supervisor.check(started + limit - 1) is None
    reason, _ = supervisor.check(started + limit + 1)
    assert f"did not start within {limit} s (supervision.start_timeout_s)" in reason
