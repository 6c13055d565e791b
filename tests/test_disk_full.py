"""A full disk: writes to the run directory fail cleanly, the run stops with the reason, no temp file stays.

The disk is made full with `/dev/full`, where every write fails with ENOSPC, the kernel's
own "No space left on device": a file of the run directory (or the temp file an atomic
write goes through) is made a link to it. A read-only directory would not do (root, as
tests often run in containers, writes there anyway), and a small tmpfs needs privileges.
"""

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import srl_command

from srl.launch.run_dir import write_json_atomic
from srl.learn import checkpoint

FULL = "/dev/full"


def _full(path: Path) -> Path:
    """`path` as a link to a device that is always full."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(FULL)
    return path


def test_a_checkpoint_on_a_full_disk_raises_and_leaves_no_temp_file_nor_a_new_checkpoint(tmp_path):
    import torch

    state = {"w": torch.ones(1000)}
    kept = checkpoint.save(tmp_path, 1, state, {"env_steps": 10}, keep=3)
    temp = _full(tmp_path / ".ckpt-000000002.pt.tmp")
    # torch reports the failed write as a RuntimeError of its own: the OSError beneath is named.
    with pytest.raises(OSError) as failed:
        checkpoint.save(tmp_path, 2, state, {"env_steps": 20}, keep=3)
    assert failed.value.errno == errno.ENOSPC
    assert not temp.is_symlink() and not (tmp_path / "ckpt-000000002.pt").exists()
    assert checkpoint.latest(tmp_path) == kept


def test_a_json_file_on_a_full_disk_keeps_its_previous_version_and_no_temp_file(tmp_path):
    path = tmp_path / "status.json"
    write_json_atomic(path, {"state": "running"})
    temp = _full(tmp_path / ".status.json.tmp")
    with pytest.raises(OSError) as failed:
        write_json_atomic(path, {"state": "stopped"})
    assert failed.value.errno == errno.ENOSPC
    assert not temp.is_symlink() and json.loads(path.read_text()) == {"state": "running"}


def _train(run_dir: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run(srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.time_s=60",
                                        "stop.episode_return=null", "log.tensorboard=false", "log.progress=false",
                                        *overrides),
                            cwd=run_dir.parent, capture_output=True, text=True, timeout=120, check=False)
    status = json.loads((run_dir / "status.json").read_text())
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"srl_{status['run_id']}_")]
    assert not [p for p in run_dir.rglob("*.tmp") if not p.is_symlink()]  # no half-written temp file
    return result, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.integration
def test_a_full_disk_under_the_controllers_files_stops_the_run_with_the_reason(tmp_path):
    run_dir = tmp_path / "run"
    _full(run_dir / "metrics.jsonl")
    status_temp = _full(run_dir / ".status.json.tmp")
    result, summary = _train(run_dir)
    assert result.returncode == 1, result.stderr[-2000:]
    reason = "cannot write metrics.jsonl in the run directory (No space left on device)"
    assert summary["stop_reason"] == reason and summary["errors"]["run_dir"] == reason
    assert f"srl: {reason}" in result.stderr and "Traceback" not in result.stderr
    assert not status_temp.is_symlink()  # its failed write removed it; the next one went through
    assert summary["wall_time_s"] < 30


@pytest.mark.integration
def test_a_full_disk_under_the_checkpoints_stops_the_run_instead_of_restarting_the_trainer(tmp_path):
    run_dir = tmp_path / "run"
    # The noop algorithm never changes the weights: every checkpoint is version 0.
    temp = _full(run_dir / "checkpoints" / ".ckpt-000000000.pt.tmp")
    result, summary = _train(run_dir, "algorithm.type=noop", "checkpoint.every_s=0.5")
    assert result.returncode == 1, result.stderr[-2000:]
    assert summary["stop_reason"] == "worker trainer.0: cannot write a checkpoint: [Errno 28] No space left on device"
    assert not temp.is_symlink()
    status = json.loads((run_dir / "status.json").read_text())
    assert all(w["restarts"] == 0 for w in status["workers"])
