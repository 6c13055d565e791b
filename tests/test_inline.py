"""`launcher: inline`: every worker of the graph in one process, stepped in turn by one loop."""

import json
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import psutil
import pytest

from srl.api.config import ConfigError, validate
from srl.api.config_files import apply_overrides, read_config_file
from srl.launch.controller import Controller
from srl.prepare import resolve_graph

HERE = Path(__file__).parent


def _config(name: str, *overrides: str):
    return validate(apply_overrides(read_config_file(name), ["launcher=inline", "log.progress=false",
                                                             "log.tensorboard=false", *overrides]))


@pytest.mark.integration
def test_cartpole_ppo_reaches_475_in_one_process(tmp_path):
    """`srl train cartpole-ppo launcher=inline` as a user runs it: no child process at any time."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "srl.cli", "train", "cartpole-ppo", "launcher=inline",
                                "--run-dir", str(run_dir), "log.tensorboard=false"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children, looks = set(), 0
    me = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            children |= {c.pid for c in me.children(recursive=True)}
            looks += 1
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = process.communicate()
    assert process.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["episode_return_mean"] >= 475 and summary["stop_reason"].startswith("episode_return_mean"), summary
    assert looks > 20 and not children, children
    workers = {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
    assert {w["pid"] for w in workers.values()} == {process.pid}
    assert "starting actor.0 (inline" in (run_dir / "logs" / "actor.0.log").read_text()


def test_a_breakpoint_in_an_env_stops_the_run_there(tmp_path, monkeypatch):
    """The env calls `breakpoint()`: the hook runs in this process's one thread, inside the actor's
    poll that the controller's own loop called, and the run goes on after it returns."""
    stops = []

    def hook(*args, **kwargs):
        frames = [frame.name for frame in traceback.extract_stack()]
        stops.append((threading.get_ident(), frames, threading.active_count()))

    monkeypatch.setattr(sys, "breakpointhook", hook)
    monkeypatch.syspath_prepend(str(HERE / "user_code"))
    config = _config("cartpole-ppo", "env.id=breakpoint_env:BreakingCartPole", "actors.envs_per_slot=2",
                     "actors.count=1", "trainers.batch_steps=256", "stop.env_steps=600", "stop.episode_return=null")
    summary = Controller(config, resolve_graph(config), tmp_path / "run").run()
    assert summary["stop_reason"].startswith("env_steps"), summary
    assert stops, "the env's breakpoint() was never reached"
    thread, frames, threads = stops[0]
    assert thread == threading.main_thread().ident and threads == threading.active_count()
    # The debugger would stop here: in the env's step, under the actor's poll, under the controller's loop.
    for caller in ("run", "_monitor", "idle", "step", "poll", "step"):
        assert caller in frames, frames
    assert frames.index("_monitor") < frames.index("idle") < frames.index("poll")


def test_inline_makes_no_shared_memory_segment(tmp_path, monkeypatch):
    from srl.streams import shm

    def refuse(*args, **kwargs):
        raise AssertionError("an inline run made a shared-memory segment")

    monkeypatch.setattr(shm.Segment, "create", refuse)
    config = _config("cartpole-ppo", "stop.env_steps=3000", "stop.episode_return=null")
    summary = Controller(config, resolve_graph(config), tmp_path / "run").run()
    assert summary["env_steps"] >= 3000 and summary["policy_version"] >= 1 and "errors" not in summary, summary


def test_data_parallel_trainers_are_refused_inline():
    with pytest.raises(ConfigError, match="trainers.count: launcher=inline runs one trainer"):
        _config("cartpole-ppo", "trainers.count=2")
