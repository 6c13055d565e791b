"""`srl top`: one frame from a run directory, synthetic and from a real run; the workers' new stats."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import kill_run, srl_command
from srl.cli import main
from srl.report.live import last_line, read_frame
from srl.streams.meter import Mean


def _worker(name, kind, fps, **stats):
    return {"name": name, "kind": kind, "group": kind, "pid": 1, "host": "h", "state": "running", "fps": fps,
            "restarts": 0, "heartbeat_age_s": 0.12, "stats": stats}


def _write_run(run_dir: Path, state: str = "running") -> None:
    run_dir.mkdir()
    status = {"run_id": "cartpole-ppo/20260101-000000", "state": state, "env_steps": 123456,
              "graph": {"streams": {"samples": {"kind": "samples", "producers": ["actor"], "consumers": ["trainer"]}}},
              "workers": [_worker("actor.0", "actor", 31000.0, inference_ms=0.84, samples_in_flight=1, sample_slots=2,
                                  blocked_frac=0.25),
                          _worker("policy.0", "policy", 62000.0, batch_ms=1.5, requests_per_batch=3.5),
                          _worker("trainer.0", "trainer", 30000.0, step_ms=41.0, sample_queue=7, version_lag=1.25,
                                  dropped_stale=2048)]}
    (run_dir / "status.json").write_text(json.dumps(status))
    lines = [{"time_s": 3.0, "fps": 1.0, "episode_return_mean": 20.0, "policy_version": 3},
             {"time_s": 4.0, "fps": 30512.0, "episode_return_mean": 187.25, "policy_version": 17}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"time_s": 5')


def test_one_frame_shows_the_header_streams_and_each_workers_numbers(tmp_path, capsys):
    _write_run(tmp_path / "run")
    assert main(["top", str(tmp_path / "run"), "--once"]) == 0
    out = capsys.readouterr().out
    # Header: from status.json and the last complete metrics line (the half-written one is skipped).
    for text in ("cartpole-ppo/20260101-000000", "running", "123,456", "30,512", "187.25", "version 17", "4.0 s"):
        assert text in out, (text, out)
    assert "stream samples (samples): actor -> trainer" in out
    for column in ("name", "kind", "state", "fps", "restarts", "heartbeat", "latency", "queue", "staleness"):
        assert column in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and "." in line.split()[0]}
    for name, texts in {"actor.0": ("31,000", "rtt 0.84 ms", "1/2 in flight", "blocked 25%"),
                        "policy.0": ("62,000", "batch 1.50 ms", "3.5 req/batch"),
                        "trainer.0": ("step 41 ms", "7 queued", "lag 1.25", "dropped 2,048")}.items():
        for text in texts:
            assert text in rows[name], (name, text, rows[name])
    # A number a worker does not report leaves its cell empty rather than showing another kind's.
    assert "lag" not in rows["actor.0"] and "rtt" not in rows["trainer.0"]


def test_top_on_a_stopped_run_prints_the_final_frame_and_returns(tmp_path, capsys):
    _write_run(tmp_path / "run", state="stopped")
    assert main(["top", str(tmp_path / "run"), "--interval", "0.05"]) == 0  # no --once: watch() ends by itself
    assert "stopped" in capsys.readouterr().out


def test_missing_status_is_an_error(tmp_path, capsys):
    assert main(["top", str(tmp_path), "--once"]) == 1
    assert read_frame(tmp_path) is None and last_line(tmp_path / "metrics.jsonl") == {}


def test_mean_reports_each_interval_and_repeats_the_last_when_idle():
    mean = Mean()
    assert mean.take() is None
    mean.add(1.0)
    mean.add(3.0)
    assert mean.take(1000) == 2000.0
    mean.add(5.0)
    assert mean.take() == 5.0
    assert mean.take() == 5.0  # nothing new: the previous mean, not a blank


@pytest.mark.integration
def test_top_on_a_real_run_shows_latency_queue_and_staleness(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "actors.inference=remote",
                    "stop.episode_return=null", "stop.env_steps=null", "stop.time_s=90", "log.tensorboard=false"),
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        stats = {}
        while time.monotonic() < deadline and process.poll() is None:
            frame = read_frame(run_dir)
            if frame is not None and frame.status.get("state") == "running":
                stats = {w["name"]: w for w in frame.status["workers"]}
                if all(stats.get(n, {}).get("fps", 0) > 0 for n in ("actor.0", "policy.0", "trainer.0")) \
                        and stats["trainer.0"]["stats"].get("version_lag") is not None:
                    break
            time.sleep(0.3)
        else:
            raise AssertionError(f"the run did not get going: {stats}")
        # The new numbers travel in status.json with every heartbeat.
        assert stats["actor.0"]["stats"]["inference_ms"] > 0
        assert 0 <= stats["actor.0"]["stats"]["samples_in_flight"] <= stats["actor.0"]["stats"]["sample_slots"]
        assert stats["policy.0"]["stats"]["batch_ms"] > 0 and stats["policy.0"]["stats"]["requests_per_batch"] >= 1
        assert stats["trainer.0"]["stats"]["version_lag"] >= 0 and stats["trainer.0"]["stats"]["step_ms"] > 0
        assert stats["trainer.0"]["stats"]["sample_queue"] >= 0
        top = subprocess.run(srl_command("top", str(run_dir), "--once"), capture_output=True, text=True, timeout=30)
        assert top.returncode == 0, top.stderr
        rows = {line.split()[0]: line for line in top.stdout.splitlines() if line.split()}
        for name, texts in {"actor.0": ("rtt", "in flight"), "policy.0": ("batch", "req/batch"),
                            "trainer.0": ("step", "queued", "lag")}.items():
            assert all(text in rows[name] for text in texts), (name, rows[name])
            assert rows[name].split()[3] not in ("0", "-"), rows[name]  # fps, after name, kind, state
        # Ctrl-C stops the run (not a part of `top`); the viewer then leaves by itself on "stopped".
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
        top = subprocess.run(srl_command("top", str(run_dir)), capture_output=True, text=True, timeout=30)
        assert top.returncode == 0 and "state stopped" in top.stdout, (top.stdout, top.stderr)
    finally:
        kill_run(process, run_dir)
