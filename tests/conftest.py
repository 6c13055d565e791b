import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srl.workers.threads import compute_threads

# Each test process computes on one thread. Two of them (xdist) share the cores with the runs
# the tests start, and arithmetic split over threads waits at every op for whichever thread
# that load has descheduled: under load, many times slower than on one thread.
compute_threads(1)


def srl_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "srl.cli", *args]


@pytest.fixture
def run_srl(tmp_path: Path):
    """Run `srl ...` in a subprocess (cwd: a temp dir, so nothing lands in the checkout)."""

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(srl_command(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})

    return run


@pytest.fixture
def opened():
    """`opened(thing)`: closed when the test ends, even when it fails (links, sockets, publishers)."""
    import zmq

    things: list = []
    yield things.append
    for thing in reversed(things):
        thing.close(linger=0) if isinstance(thing, zmq.Socket) else thing.close()


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


def wait_for(predicate, timeout: float, what: str, process: subprocess.Popen, log: Path | None = None):
    """What `predicate()` returns once it is truthy, polled while the run `process` lives.

    On failure the run's stderr is shown: from `log` where it writes to a file, else its pipe."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            printed = log.read_text() if log else process.stderr.read() if process.stderr else ""
            raise AssertionError(f"run ended while waiting for {what}: {printed[-2000:]}")
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f": {log.read_text()[-2000:]}" if log else ""))


def run_workers(run_dir: Path) -> dict[str, dict]:
    """The run's workers by name, as status.json has them so far (empty before it is written)."""
    try:
        return {w["name"]: w for w in json.loads((run_dir / "status.json").read_text())["workers"]}
    except (OSError, ValueError, KeyError):
        return {}


def metrics_lines(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl so far (empty before the first report)."""
    try:
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        return []


def train_until(run_dir: Path, predicate, what: str, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`srl train --run-dir RUN_DIR ARGS...` until `predicate(run_dir)` holds, then Ctrl-C.

    A test waits for what it checks rather than for a time limit, which a slow start on a busy
    machine could use up (and a fast machine would sit out). The run must then end by itself,
    cleanly; what it printed is returned.
    """
    out, err = run_dir.parent / f"{run_dir.name}.out", run_dir.parent / f"{run_dir.name}.err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: a full pipe would stall the run
        process = subprocess.Popen(srl_command("train", "--run-dir", str(run_dir), *args, "stop.time_s=600"),
                                   cwd=cwd, start_new_session=True, stdout=stdout, stderr=stderr,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for(lambda: predicate(run_dir), timeout, what, process, log=err)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        assert process.returncode == 0, err.read_text()[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted", summary
        return subprocess.CompletedProcess(process.args, process.returncode, out.read_text(), err.read_text())
    finally:
        kill_run(process, run_dir)


def train_inline(run_dir: Path, config_name: str, *overrides: str, until=None, what: str = "",
                 timeout: float = 120) -> dict:
    """`srl train CONFIG launcher=inline OVERRIDES...` in this process: every worker in the test's own
    process, no child process and no shared memory. Returns the run's summary.

    With `until`, the run is stopped as Ctrl-C stops it once `until(run_dir)` holds (looked at
    every 0.25 s from a timer signal, whatever worker code is running then), as `train_until`
    stops a run in a process of its own; it must then end cleanly, interrupted.
    """
    from srl.api.config import validate
    from srl.api.config_files import apply_overrides, read_config_file
    from srl.launch.controller import Controller
    from srl.prepare import resolve_graph

    config = validate(apply_overrides(read_config_file(config_name),
                                      ["launcher=inline", "log.progress=false", "log.tensorboard=false", *overrides]))
    started, outcome = time.monotonic(), []

    def look(signum, frame) -> None:
        if outcome:
            return
        if until(run_dir):
            outcome.append("met")
        elif time.monotonic() - started > timeout:
            outcome.append("timed out")
        else:
            return
        os.kill(os.getpid(), signal.SIGINT)  # the controller's own Ctrl-C handler takes it

    previous = signal.signal(signal.SIGALRM, look) if until else None
    if until:
        signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)
    try:
        summary = Controller(config, resolve_graph(config), run_dir).run()
    finally:
        if until:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    if until:
        assert outcome == ["met"], f"{what}: {outcome or 'the run ended first'}; summary {summary}"
        assert summary["stop_reason"] == "interrupted", summary
    return summary


def start_one(ring, slot: int):
    """`ring.start` of a ring of one policy: its first request alone."""
    from srl.api.agents import DEFAULT_POLICY

    return ring.start(slot)[DEFAULT_POLICY]


def step_one(ring, slot: int, reply):
    """`ring.step` of a ring of one policy: (its next request, its finished trajectory or None)."""
    from srl.api.agents import DEFAULT_POLICY

    requests, trajectories = ring.step(slot, {DEFAULT_POLICY: reply})
    return requests[DEFAULT_POLICY], (trajectories or {}).get(DEFAULT_POLICY)
