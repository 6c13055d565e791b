import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def srl_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "srl.cli", *args]


@pytest.fixture
def run_srl(tmp_path: Path):
    """Run `srl ...` in a subprocess (cwd: a temp dir, so nothing lands in the checkout)."""

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(srl_command(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})

    return run


def kill_run(process: subprocess.Popen, run_dir: Path) -> None:
    """SIGKILL a run started in its own session, and remove the shared memory it could not.

    For a test's `finally`: a test that fails mid-run must not leave segments in /dev/shm.
    """
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    try:
        run_id = json.loads((run_dir / "status.json").read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return
    from srl.streams import shm

    shm.sweep(f"{shm.PREFIX}{run_id}_")


def wait_for(predicate, timeout: float, what: str, process: subprocess.Popen):
    """What `predicate()` returns once it is truthy, polled while the run `process` lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"run ended while waiting for {what}: {process.stderr.read()[-2000:]}")
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
