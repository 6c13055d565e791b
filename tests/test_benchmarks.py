"""Benchmarks run in smoke mode so they cannot rot; their figures are never asserted."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import srl_command, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def test_srl_bench_smoke(run_srl, tmp_path):
    out = tmp_path / "bench.json"
    # 3 s: on a loaded machine 1 s can hold fewer than the two training steps T is measured between.
    # A trainer of two threads: its own rate (Lc) is measured beside E, I and L.
    result = run_srl("bench", "cartpole-ppo", "--seconds", "3", "--json", str(out), "actors.count=1",
                     "trainers.placement.threads=2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    for key in ("env_steps_per_s", "inference_steps_per_s", "learner_steps_per_s", "sampling_steps_per_s",
                "training_steps_per_s", "sampling_efficiency", "training_efficiency", "trainer_limit"):
        assert figures[key] > 0, key
    assert "efficiency" in result.stdout and "Lc 1 trainer(s) of 2 threads alone" in result.stdout
    # Each limit comes from the isolated windows on either side of its own run.
    windows = figures["isolated"]
    assert set(windows["before_sampling"]) == {"E", "L", "Ul", "Lc", "Uc"}  # I's batch is known once sampling ran
    assert set(windows["between"]) == set(windows["after_training"]) == {"E", "I", "L", "Ul", "Lc", "Uc"}
    around = figures["around_training"]
    assert around["L"] == pytest.approx((windows["between"]["L"] + windows["after_training"]["L"]) / 2)
    assert figures["training_limit"] == pytest.approx(1 / (1 / around["E"] + 1 / around["I"] + 1 / around["L"]))
    assert figures["sampling_limit"] == pytest.approx(
        1 / (1 / figures["around_sampling"]["E"] + 1 / windows["between"]["I"]))
    assert figures["trainer_limit_measured"] and figures["trainer_limit"] == pytest.approx(around["Lc"])
    cores, box = figures["trainer_cores"], around["Ul"]  # CPU time over wall time: the trainer's, L's two processes'
    assert 0.5 < around["Uc"] <= 2.2 and cores == pytest.approx(min(around["Uc"], 2)) and 0.5 < box <= 2.2
    assert figures["training_limit_configured"] == pytest.approx(
        min(figures["training_limit"], around["Lc"], box / (cores / around["Lc"] + box / around["E"] + box / around["I"])))


def test_ctrl_c_stops_the_whole_bench_not_only_the_run_it_measures(tmp_path):
    # The bench's temp dir, short: a run's socket paths under it must fit in 107 characters.
    scratch = Path(tempfile.mkdtemp(prefix="srl-t-"))
    log = tmp_path / "bench.err"
    try:
        with log.open("w") as err:
            bench = subprocess.Popen(srl_command("bench", "cartpole-ppo", "--seconds", "2", "actors.count=1"),
                                     cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                                     env={**os.environ, "TMPDIR": str(scratch)})
        try:
            # The sampling run has started (its window is 2 s after at least 4 s of start-up): interrupt it.
            wait_for(lambda: list(scratch.glob("srl-bench-*/run/status.json")), 240, "the sampling run", bench, log)
            bench.send_signal(signal.SIGINT)
            assert bench.wait(timeout=90) == 130, log.read_text()[-2000:]
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
        assert "srl: bench interrupted" in log.read_text()
        assert not list(scratch.glob("srl-bench-*")), "the measured run's directory outlived the bench"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_ring_sweep_smoke(tmp_path):
    out = tmp_path / "ring.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ring_sweep.py"), "cartpole-ppo", "--seconds", "1",
                             "--sizes", "2", "--json", str(out), "actors.count=1"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(json.loads(out.read_text())["steps_per_s"]) == {"2"}


def test_wire_auth_smoke(tmp_path):
    out = tmp_path / "wire.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wire_auth.py"), "--smoke", "--json", str(out)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"none", "hmac", "curve"} <= json.loads(out.read_text()).keys()


def test_chaos_soak_smoke_without_kills(tmp_path):
    out = tmp_path / "soak.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos_soak.py"), "--no-kills", "--minutes", "0.12",
                             "--every", "1", "--json", str(out), "streams.when_full=drop_oldest"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    figures = json.loads(out.read_text())  # no return to reach in 7 s: `passed` is not asserted
    assert not figures["kills"] and figures["summary"]["env_steps"] > 0, result.stdout[-3000:]
    assert figures["memory"] and all(m["peak_mb"] > 0 for m in figures["memory"].values())
    assert figures["clean"]["summary"] and not figures["clean"]["shm_left"] and not figures["clean"]["alive"]


def test_param_latency_smoke(tmp_path):
    out = tmp_path / "latency.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "param_latency.py"), "--sizes", "10000",
                             "--repeats", "2", "--json", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(json.loads(out.read_text())) == {"shm", "zmq"}


def test_replay_buffer_smoke(tmp_path):
    out = tmp_path / "replay.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "replay_buffer.py"), "--seconds", "0.2",
                             "--capacity", "2048", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    for figures in json.loads(out.read_text()).values():
        assert figures["insert_env_steps_per_s"] > 0 and figures["batches_per_s"] > 0
