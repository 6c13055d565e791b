"""W&B tracking: a run directory mirrored into an offline W&B run, read back from W&B's own log."""

import json
import os
import struct
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import kill_run, srl_command
from srl.api.config import ConfigError, WandbConfig, load
from srl.launch import tracking
from srl.launch.run_dir import RunDir

pytest.importorskip("wandb")


def _wandb_env(root: Path) -> dict[str, str]:
    """W&B's own directories under `root` (nothing in $HOME), and a server that is only a closed
    local port, so any attempt to reach the network fails here instead of leaving the machine."""
    env = {f"WANDB_{name}_DIR": str(root / name.lower()) for name in ("CACHE", "CONFIG", "DATA", "ARTIFACT")}
    return {**env, "WANDB_DIR": str(root / "dir"), "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_SILENT": "true"}


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    env = _wandb_env(tmp_path / "wandb-home")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return env


def read_offline_run(run_dir: Path) -> list[tuple[str, object]]:
    """Every record of the W&B runs logged offline in `run_dir` as (kind, protobuf message).

    The .wandb file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of chunks, each
    with a 7-byte header (crc32, length, type: full/first/middle/last); a block's tail shorter
    than a chunk header is padding.
    """
    from wandb.proto import wandb_internal_pb2

    records = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B", path
        pos, pending = 7, b""
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if kind == 0:  # zero-filled: the end of what was written
                break
            pending += data[pos + 7:pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):  # full or last: one record complete
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                pending = b""
                name = record.WhichOneof("record_type")
                records.append((name, getattr(record, name)))
    return records


def history(records) -> list[dict]:
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in message.item}
            for kind, message in records if kind == "history"]


def config_of(records) -> dict:
    return {item.key: json.loads(item.value_json) for kind, message in records if kind in ("config", "run")
            for item in (message.config.update if kind == "run" else message.update)}


def summary_of(records) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for kind, message in records if kind == "summary" for item in message.update}


def test_config_section():
    assert load("cartpole-ppo").log.wandb is None
    settings = load("cartpole-ppo", ["log.wandb.project=mine"]).log.wandb
    assert settings == WandbConfig(project="mine")
    with pytest.raises(ConfigError, match="log.wandb.mode"):
        load("cartpole-ppo", ["log.wandb.mode=sometimes"])


def test_mode_defaults_to_environment_then_online(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert tracking.resolve_mode(WandbConfig()) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert tracking.resolve_mode(WandbConfig()) == "offline"
    assert tracking.resolve_mode(WandbConfig(mode="disabled")) == "disabled"
    assert tracking.start(WandbConfig(mode="disabled"), "unused", {}) is None
    assert tracking.start(None, "unused", {}) is None


def test_missing_wandb_is_one_line(monkeypatch):
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    with pytest.raises(ConfigError, match=r"^log.wandb: the wandb package is not installed \(pip install wandb\)$"):
        tracking.check_wandb(WandbConfig())
    tracking.check_wandb(None)  # not configured: nothing to check


def _mirror(path: Path, steps: list[int], summary: dict) -> None:
    run = RunDir(path, tensorboard=False,
                 tracker=tracking.start(WandbConfig(mode="offline", project="test"), path, {"name": "unit", "seed": 3}))
    run.write_graph(yaml.safe_dump({"groups": {"actor": {"count": 2}}}))
    for step in steps:
        run.log_metrics({"time_s": step / 100, "env_steps": step, "episode_return_mean": step / 10,
                         "train": {"loss": 1.0 / (1 + step)}, "not_a_number": None})
    run.write_summary(summary)
    run.close()


def test_offline_run_holds_metrics_config_graph_and_summary(tmp_path, wandb_env):
    run_dir = tmp_path / "run"
    # Only processes started by this run count: earlier tests in the session may have left
    # children of their own (multiprocessing's resource tracker, a fork server).
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    _mirror(run_dir, [0, 100, 200], {"env_steps": 200, "stop_reason": "done"})
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(started, timeout=10)
    assert not alive, f"W&B's service outlived close(): {[p.info if hasattr(p, 'info') else p for p in alive]}"
    records = read_offline_run(run_dir)
    rows = history(records)
    assert [(row["env_steps"], row["episode_return_mean"], row["train/loss"]) for row in rows] == \
        [(0, 0.0, 1.0), (100, 10.0, 1 / 101), (200, 20.0, 1 / 201)]
    assert all("not_a_number" not in row for row in rows)
    config = config_of(records)
    assert config["name"] == "unit" and config["seed"] == 3
    assert config["graph"] == {"groups": {"actor": {"count": 2}}}
    assert summary_of(records)["stop_reason"] == "done"
    run_files = next(run_dir.glob("wandb/offline-run-*/files"))
    assert yaml.safe_load((run_files / "graph.yaml").read_text()) == config["graph"]
    assert not any(Path(wandb_env["WANDB_CONFIG_DIR"]).glob("**/settings")), "offline needs no login"


def test_resume_continues_the_same_wandb_run(tmp_path, wandb_env):
    run_dir = tmp_path / "run"
    _mirror(run_dir, [0, 100], {"env_steps": 100, "stop_reason": "interrupted"})
    _mirror(run_dir, [100, 300], {"env_steps": 300, "stop_reason": "done"})
    logs = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    ids = {path.stem.removeprefix("run-") for path in logs}
    assert len(logs) == 2 and len(ids) == 1, logs
    assert (run_dir / "wandb" / tracking.RUN_ID_FILE).read_text() == ids.pop()
    assert sorted(row["env_steps"] for row in history(read_offline_run(run_dir))) == [0, 100, 100, 300]


def _wandb_descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True) if p.name().startswith("wandb")}
    except psutil.Error:
        return set()


@pytest.mark.integration
def test_srl_train_logs_an_offline_wandb_run(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, **_wandb_env(tmp_path / "wandb-home"), "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_MODE", None)
    process = subprocess.Popen(srl_command("train", "cartpole-ppo", "log.wandb.mode=offline", "log.wandb.project=test",
                                           "stop.env_steps=20000", "log.tensorboard=false", "log.progress=false",
                                           "--run-dir", str(run_dir)),
                               cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()  # W&B's service and its helpers, started by the run
    try:
        while process.poll() is None:
            seen |= _wandb_descendants(process.pid)
            time.sleep(0.2)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
    finally:
        kill_run(process, run_dir)
    assert seen, "no W&B service process was started"
    deadline = time.monotonic() + 5  # the service exits once the run has finished; not a speed check
    while (alive := {pid for pid in seen if psutil.pid_exists(pid)
                     and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"W&B processes left behind: {alive}"
    records = read_offline_run(run_dir)
    rows = history(records)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["env_steps"] for row in rows] == [m["env_steps"] for m in metrics]
    assert rows[-1]["env_steps"] >= 20000
    assert rows[-1]["episode_return_mean"] == metrics[-1]["episode_return_mean"]
    assert config_of(records)["name"] == "cartpole-ppo"
    assert summary_of(records)["env_steps"] == json.loads((run_dir / "summary.json").read_text())["env_steps"]
