"""A measurement that fails (`srl bench`, `auto`'s layout): one line naming the part and the
cause, as soon as it fails, with no child's traceback and no measuring process left over."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from srl import measure
from srl.api import config as cfg

CRASHING_ENV = ["env.type=fake", "env.id=null", "env.args={crash_after_steps: 50}"]
CRASH = "RuntimeError: simulated simulator crash after 50 steps"


def _killed(queue) -> None:
    """A measuring part whose process dies without a word (the OOM killer, a segfault)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _children() -> set[int]:
    """This process's live descendants, but for multiprocessing's resource tracker (started once
    for the process and kept by design)."""
    live = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                live.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return live


def test_a_part_that_raises_fails_the_measurement_at_once_in_one_line():
    env = cfg.load("cartpole-ppo", CRASHING_ENV).env.model_dump(mode="json")
    before, started = _children(), time.monotonic()  # a test process may hold others' (a fork server)
    with pytest.raises(measure.MeasurementError) as raised:
        measure.gather(measure.env_rate, lambda i: (env, 4, 60.0, i), 2)  # a minute's measuring asked
    assert str(raised.value) == f"the env (E): {CRASH}"
    assert time.monotonic() - started < 45  # the crash ends it, not the window or the answer timeout
    assert not _children() - before  # no measuring process outlives the measurement


def test_a_part_whose_process_dies_is_named_with_its_signal():
    before = _children()
    with pytest.raises(measure.MeasurementError, match="^_killed: a measuring process was killed by SIGKILL$"):
        measure.gather(_killed, lambda i: (), 2)
    assert not _children() - before


@pytest.mark.integration
def test_srl_bench_with_an_env_that_crashes_says_so_in_one_line(run_srl):
    result = run_srl("bench", "cartpole-ppo", *CRASHING_ENV, "--seconds", "2", timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == f"srl: bench: a measurement failed: the env (E): {CRASH}"


@pytest.mark.integration
def test_auto_with_an_env_that_crashes_says_so_and_starts_no_run(run_srl, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # measured here, not read from a cache
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), *CRASHING_ENV, "actors.count=auto",
                     timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == f"srl: train: the layout's measurements failed: the env (E): {CRASH}"
    assert not run_dir.exists()
