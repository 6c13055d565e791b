"""A run on disk: config.yaml, metrics.jsonl, TensorBoard events, status.json, summary.json;
and their mirror in a W&B run when `log.wandb` is set (`srl.launch.tracking`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srl.api.run_paths import RunPaths
from srl.learn.checkpoint import atomic_write

if TYPE_CHECKING:
    from srl.launch.tracking import WandbTracker

class RunInUse(RuntimeError):
    """Another controller holds the run directory."""


class RunLock:
    """An exclusive lock on a run directory, held by its controller for the run's whole life.

    Taken before anything in the directory is written, so a second `srl train --resume` of a
    live run is refused without touching its config, status or checkpoints. The kernel drops
    the lock when the holder exits, however it exits (a SIGKILLed run leaves no stale lock).
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        # A new run directory is the user's alone: status.json names every endpoint of the run,
        # and the logs and checkpoints are theirs. One given that exists keeps its permissions.
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        self._fd = os.open(RunPaths(path).lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise RunInUse(f"the run in {path} is still going (another controller holds it)") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = -1


#: In a run's private directory: which run directory it serves (that directory's device and inode).
OWNER_FILE = "run_dir"


def claim_private_dir(private_dir: str | Path, run_dir: str | Path) -> None:
    """Mark a run's private directory as its run directory's own.

    A copy of a run directory (`cp -a live copy`) carries the status.json that names the live
    run's id and private directory, but the copy is another inode: a resume of the copy can
    tell that what status.json names is not its own to clean up."""
    st = Path(run_dir).stat()
    (Path(private_dir) / OWNER_FILE).write_text(f"{st.st_dev}:{st.st_ino}\n")


def claimed_by_another(private_dir: Path, run_dir: Path) -> bool:
    """Whether `private_dir` is there and serves a run directory other than `run_dir`."""
    try:
        owner = (private_dir / OWNER_FILE).read_text().strip()
    except OSError:  # gone with its run (or the machine's restart): nobody's
        return False
    st = run_dir.stat()
    return owner != f"{st.st_dev}:{st.st_ino}"


def write_json_atomic(path: Path, data: Any) -> None:
    # Rewritten every second: not worth an fsync each time.
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=1).encode()), fsync=False)


class RunDir:
    def __init__(self, path: str | Path, tensorboard: bool, tracker: WandbTracker | None = None) -> None:
        # Absolute: workers run in the run's workdir and must find the same checkpoints directory.
        self.path = Path(path).resolve()
        self.paths = RunPaths(self.path)
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.paths.checkpoints().mkdir(exist_ok=True)
        self._metrics = open(self.paths.metrics, "a", buffering=1)
        self._tensorboard = tensorboard
        self._tb = None
        self._tracker = tracker

    def _writer(self):
        # Created on first use: importing torch's writer takes a second, which would
        # otherwise delay the launch of every worker.
        if self._tb is None and self._tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.paths.tensorboard))
        return self._tb

    def write_config(self, text: str) -> None:
        self.paths.config.write_text(text)

    def write_graph(self, text: str) -> None:
        """The worker graph that runs: groups (kind, count, ports) and streams (kind, ends)."""
        self.paths.graph.write_text(text)
        if self._tracker is not None:
            self._tracker.log_graph(self.paths.graph)

    def log_metrics(self, record: dict[str, Any]) -> None:
        self._metrics.write(json.dumps(record) + "\n")
        scalars = {key: value for key, value in _flatten(record) if isinstance(value, (int, float))}
        if (writer := self._writer()) is not None:
            for key, value in scalars.items():
                if key not in ("env_steps", "time_s"):
                    writer.add_scalar(key, value, record["env_steps"])
        if self._tracker is not None:
            self._tracker.log_metrics(scalars)

    def write_status(self, status: dict[str, Any]) -> None:
        write_json_atomic(self.paths.status, status)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.paths.summary, summary)
        if self._tracker is not None:
            self._tracker.log_summary(summary)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a full disk refused the last line too: nothing more to lose
            self._metrics.close()
        if self._tb is not None:
            self._tb.close()
        if self._tracker is not None:
            self._tracker.close()


def _flatten(record: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in record.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}/")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def read_status(path: str | Path) -> dict[str, Any]:
    status_file = RunPaths(path).status
    if not status_file.exists():
        raise FileNotFoundError(f"{path} is not a run directory (no {status_file.name})")
    return json.loads(status_file.read_text())
