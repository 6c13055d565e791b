"""--resume of a live run is refused before anything in its directory changes; a resume shows
the config changes it applies; cleanup trusts nothing that status.json names."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import kill_run, srl_command
from srl.launch.run_dir import RunInUse, RunLock
from srl.streams import shm

pytestmark = pytest.mark.integration


def test_a_second_lock_on_a_run_directory_is_refused_until_the_first_is_released(tmp_path):
    first = RunLock(tmp_path)
    with pytest.raises(RunInUse, match="still going"):
        RunLock(tmp_path)
    first.release()
    RunLock(tmp_path).release()


def test_a_new_run_directory_is_private_and_one_given_keeps_its_permissions(tmp_path):
    RunLock(tmp_path / "runs" / "new").release()
    assert (tmp_path / "runs" / "new").stat().st_mode & 0o777 == 0o700
    given = tmp_path / "shared"
    given.mkdir(mode=0o755)
    os.chmod(given, 0o755)
    RunLock(given).release()
    assert given.stat().st_mode & 0o777 == 0o755


def test_resume_of_a_live_run_touches_nothing_and_a_later_resume_shows_its_changes(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.episode_return=null",
                                           "stop.time_s=60", "log.tensorboard=false", "log.progress=false"),
                               cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dir / "status.json").exists():
            time.sleep(0.2)
        config_before = (run_dir / "config.yaml").read_text()
        refused = subprocess.run(srl_command("train", "--resume", str(run_dir), "stop.time_s=5"), cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr
        assert "still going" in refused.stderr
        assert (run_dir / "config.yaml").read_text() == config_before  # untouched
        assert process.poll() is None  # the live run goes on
        os.killpg(process.pid, 2)  # Ctrl-C
        process.wait(timeout=60)
        resumed = subprocess.run(srl_command("train", "--resume", str(run_dir), "stop.time_s=4"), cwd=tmp_path,
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "resuming with stop.time_s: 60.0 -> 4.0" in resumed.stderr
    finally:
        kill_run(process, run_dir)


def test_resuming_a_copy_of_a_live_run_leaves_the_live_runs_memory_and_private_directory_alone(tmp_path):
    """`cp -a live copy; srl train --resume copy`: the copy's status.json names the live run's id
    and private directory, which belong to the live run's directory, not the copy's."""
    live, copy = tmp_path / "live", tmp_path / "copy"
    process = subprocess.Popen(srl_command("train", "cartpole-ppo", "--run-dir", str(live), "stop.episode_return=null",
                                           "stop.time_s=120", "log.tensorboard=false", "log.progress=false"),
                               cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def status() -> dict:
            try:
                return json.loads((live / "status.json").read_text())
            except (OSError, ValueError):
                return {}

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not status().get("env_steps"):
            time.sleep(0.2)
        running = status()
        segments = {s.name for s in shm.SHM_DIR.glob(f"{shm.PREFIX}{running['run_id']}_*")}
        assert running["env_steps"] > 0 and segments and Path(running["private_dir"]).is_dir(), running
        try:
            shutil.copytree(live, copy, symlinks=True)
        except shutil.Error:  # a file the live run replaced mid-copy: what the copy needs is there
            pass
        resumed = subprocess.run(srl_command("train", "--resume", str(copy), "stop.time_s=3"), cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert Path(running["private_dir"]).is_dir()
        assert segments <= {s.name for s in shm.SHM_DIR.glob(f"{shm.PREFIX}{running['run_id']}_*")}
        assert f"status.json names run {running['run_id']}, which belongs to another run directory" in resumed.stderr
        assert json.loads((copy / "status.json").read_text())["run_id"] != running["run_id"]
        steps = status()["env_steps"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and status()["env_steps"] <= steps:  # the live run goes on
            time.sleep(0.2)
        assert status()["env_steps"] > steps and process.poll() is None
        os.killpg(process.pid, 2)  # Ctrl-C
        assert process.wait(timeout=60) == 0, process.stderr.read()[-2000:]
        assert json.loads((live / "summary.json").read_text())["stop_reason"] == "interrupted"
    finally:
        kill_run(process, live)


def test_resume_does_not_delete_a_directory_that_status_json_names(tmp_path):
    run_dir, victim = tmp_path / "run", tmp_path / "precious"
    victim.mkdir()
    (victim / "keep").write_text("x")
    run_dir.mkdir()
    result = subprocess.run(srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "stop.env_steps=2000",
                                        "log.tensorboard=false", "log.progress=false"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    status = json.loads((run_dir / "status.json").read_text())
    for forged in ({**status, "private_dir": str(victim)}, {**status, "run_id": "../../x", "private_dir": str(victim)}):
        (run_dir / "status.json").write_text(json.dumps(forged))
        result = subprocess.run(srl_command("train", "--resume", str(run_dir), "stop.env_steps=4000"), cwd=tmp_path,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        assert (victim / "keep").exists()


def test_sweeping_skips_a_segment_it_cannot_remove(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "SHM_DIR", tmp_path)
    (tmp_path / "srl_abcd1234_mine").write_bytes(b"x")
    (tmp_path / "srl_abcd1234_foreign").write_bytes(b"x")
    real_stat = type(tmp_path).stat

    def stat(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if path.name.endswith("foreign"):
            return os.stat_result((result.st_mode, result.st_ino, result.st_dev, result.st_nlink, os.getuid() + 1,
                                   result.st_gid, result.st_size, 0, 0, 0))
        return result

    monkeypatch.setattr(type(tmp_path), "stat", stat)
    assert shm.sweep("srl_abcd1234_") == ["srl_abcd1234_mine"]
    assert (tmp_path / "srl_abcd1234_foreign").exists()
