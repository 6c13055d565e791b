"""Checkpoints hold plain weights: one crafted to run code on load is refused and runs nothing."""

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import srl_command
from srl.api.config import dump, validate
from srl.learn import checkpoint


class RunsCodeOnLoad:
    """Unpickling this calls `os.system`: what a malicious checkpoint would carry."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _plant(directory, version: int, payload) -> None:
    """A checkpoint file with a valid sidecar, so `latest()` picks it as the newest good one."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ckpt-{version:09d}.pt"
    torch.save(payload, path)
    sidecar = {"version": version, "env_steps": 0, "sha256": checkpoint._sha256(path)}
    path.with_suffix(".json").write_text(json.dumps(sidecar))


def test_policy_and_optimizer_state_round_trip_as_plain_weights(tmp_path):
    from srl.algorithms.ppo import PPO
    from srl.models.actor_critic import ActorCriticPolicy

    spaces = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (4,), np.float32)}), gym.spaces.Discrete(2)
    policy = ActorCriticPolicy(*spaces, hidden=[8], obs_norm=True)
    policy.version = 7
    algorithm = PPO(policy, PPO.Config())
    state = {"policy": policy.state_dict(), "algorithm": algorithm.state_dict(), "scalar": np.float32(1.5)}
    path = checkpoint.save(tmp_path, 7, state, {"env_steps": 10}, keep=2)
    loaded = checkpoint.load(path)
    assert loaded["scalar"] == 1.5 and isinstance(loaded["scalar"], float)
    restored = ActorCriticPolicy(*spaces, hidden=[8], obs_norm=True)
    restored.load_state_dict(loaded["policy"])
    assert restored.version == 7
    for (name, a), (_, b) in zip(policy.get_params().items_flat(), restored.get_params().items_flat()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    PPO(restored, PPO.Config()).load_state_dict(loaded["algorithm"])


def test_a_checkpoint_that_runs_code_is_refused_in_one_line_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    _plant(tmp_path / "checkpoints", 5, {"policy": RunsCodeOnLoad(marker)})
    path = checkpoint.latest(tmp_path / "checkpoints")
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.load(path)
    assert "refused" in str(error.value) and "system" in str(error.value) and "\n" not in str(error.value)
    assert not marker.exists()


def test_a_file_that_is_not_a_checkpoint_is_one_clear_error(tmp_path):
    path = tmp_path / "ckpt-000000001.pt"
    path.write_bytes(b"not a zip archive at all")
    with pytest.raises(checkpoint.CheckpointError, match="refused"):
        checkpoint.load(path)


def _zip_bomb(path) -> None:
    """A checkpoint of 64 MiB of zeros whose entries are deflated: a file of about 64 KiB."""
    import io
    import zipfile

    plain = io.BytesIO()
    torch.save({"policy": {"params": {"w": torch.zeros(16, 1024, 1024)}}}, plain)
    with zipfile.ZipFile(io.BytesIO(plain.getvalue())) as source, \
            zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as bomb:
        for entry in source.infolist():
            bomb.writestr(entry.filename, source.read(entry.filename))


@pytest.mark.parametrize("craft,message", [
    # one number viewed as 40,000 x 30,000 (4.8 GB for any copy of it), in a 4-byte storage
    (lambda path: torch.save({"policy": {"params": {"w": torch.zeros(1).expand(40000, 30000)}}}, path),
     r"policy.params.w of shape \[40000, 30000\] views 4 bytes of storage"),
    (_zip_bomb, "archive/data.pkl is compressed"),
    (lambda path: torch.save([1, 2, 3], path), "holds a list, not a mapping of states"),
    (lambda path: path.write_bytes(open(_good_checkpoint(path.parent), "rb").read()[:1000]), "not a checkpoint archive"),
])
def test_a_crafted_checkpoint_is_refused_in_one_line_before_it_takes_memory(tmp_path, craft, message):
    path = tmp_path / "ckpt-000000001.pt"
    craft(path)
    assert path.stat().st_size < 200_000
    with pytest.raises(checkpoint.CheckpointError, match=message) as error:
        checkpoint.load(path)
    assert "\n" not in str(error.value)


def test_srl_evaluate_refuses_both_bombs_with_its_peak_memory_under_500_mb(tmp_path):
    """The process's own peak RSS (VmHWM: ru_maxrss would carry the forking test process's over
    exec), measured at its end: a zero-stride view of 4.8 GB, then a zip bomb, each the newest
    checkpoint of a run, each refused in one line."""
    script = ("import re, sys\n"
              "from srl.evaluate import evaluate\n"
              "for run in sys.argv[1:]:\n"
              "    try:\n"
              "        evaluate(run, episodes=1, envs=1)\n"
              "    except ValueError as error:\n"
              "        print('refused:', str(error).splitlines()[0])\n"
              "peak_kb = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
              "print('peak_mb', peak_kb // 1024)\n")
    runs = []
    for name, craft in (("view", lambda path: torch.save({"policy": {"params": {"w": torch.zeros(1).expand(40000, 30000)}}},
                                                      path)), ("bomb", _zip_bomb)):
        (tmp_path / name).mkdir()
        run_dir, _ = _run_dir_with(tmp_path / name, lambda m: {"policy": {}})
        path = run_dir / "checkpoints" / "ckpt-000000003.pt"
        craft(path)
        sidecar = {"version": 3, "env_steps": 0, "sha256": checkpoint._sha256(path)}
        path.with_suffix(".json").write_text(json.dumps(sidecar))
        runs.append(str(run_dir))
    result = subprocess.run([sys.executable, "-c", script, *runs], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "views 4 bytes of storage" in lines[0] and "is compressed" in lines[1], lines
    assert int(lines[2].split()[1]) < 500, lines


def _good_checkpoint(directory):
    return checkpoint.save(directory / "good", 1, {"policy": {"w": torch.ones(100, 100)}}, {}, keep=1)


def test_evaluate_names_a_checkpoint_that_does_not_fit_the_policy_in_one_line(tmp_path, capsys, monkeypatch):
    """Wrong shapes, a missing key, no policy state, a sidecar that is not an object: one line each
    (a sidecar that is not an object makes its checkpoint invalid, as a wrong checksum does)."""
    from srl import cli

    from srl.api.components import make_policy
    from srl.api.config import run_config

    run_dir, _ = _run_dir_with(tmp_path, lambda m: {"policy": {}})
    config = run_config(run_dir)
    spaces = gym.spaces.Dict({"obs": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)}), gym.spaces.Discrete(2)
    weights = make_policy(config.policy, *spaces).state_dict()
    first = next(iter(weights["params"]))
    wider = {**weights, "params": {**weights["params"], first: np.zeros((3, 3), np.float32)}}
    fewer = {**weights, "params": {k: v for k, v in weights["params"].items() if k != first}}
    monkeypatch.chdir(tmp_path)
    for state, says in [({"policy": wider}, "does not fit the run's policy: size mismatch for"),
                        ({"policy": fewer}, "does not fit the run's policy: Missing key(s)"),
                        ({"other": {}}, "holds no policy state")]:
        checkpoint.save(run_dir / "checkpoints", 9, state, {"env_steps": 0}, keep=5)
        assert cli.main(["evaluate", str(run_dir), "--episodes", "1", "--envs", "1"]) == cli.EXIT_CONFIG
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and says in err, err
    (run_dir / "checkpoints" / "ckpt-000000009.json").write_text("[1, 2]")
    assert not checkpoint.is_valid(run_dir / "checkpoints" / "ckpt-000000009.pt")


def _run_dir_with(tmp_path, payload) -> tuple:
    run_dir, marker = tmp_path / "run", tmp_path / "ran"
    run_dir.mkdir()
    config = validate({"name": "cartpole-ppo", "env": {"type": "gym", "id": "CartPole-v1"},
                       "actors": {"count": 1, "inference": "inline"}, "stop": {"env_steps": 5000},
                       "log": {"tensorboard": False, "progress": False}})
    (run_dir / "config.yaml").write_text(dump(config))
    _plant(run_dir / "checkpoints", 3, payload(marker))
    return run_dir, marker


def test_evaluate_refuses_a_malicious_checkpoint(tmp_path):
    run_dir, marker = _run_dir_with(tmp_path, lambda m: {"policy": RunsCodeOnLoad(m)})
    result = subprocess.run(srl_command("evaluate", str(run_dir), "--episodes", "1"), cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "refused" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


@pytest.mark.integration
def test_resume_from_a_malicious_checkpoint_stops_before_anything_runs_it(tmp_path):
    """... and leaves the previous run's summary and metrics as they were; a stray file beside
    the checkpoints is named and ignored."""
    run_dir, marker = _run_dir_with(tmp_path, lambda m: {"policy": RunsCodeOnLoad(m)})
    previous = {"summary.json": '{"env_steps": 12345, "stop_reason": "env_steps reached"}',
                "metrics.jsonl": '{"env_steps": 12345}\n'}
    for name, text in previous.items():
        (run_dir / name).write_text(text)
    (run_dir / "checkpoints" / "ckpt-000000052 (copy).pt").write_bytes(b"not a checkpoint")
    result = subprocess.run(srl_command("train", "--resume", str(run_dir)), cwd=tmp_path,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode != 0
    assert "trainer.0 failed to start" in result.stderr and "refused" in result.stderr, result.stderr[-2000:]
    assert not marker.exists()
    assert "ckpt-000000052 (copy).pt in" in result.stderr and "ignored" in result.stderr
    assert {name: (run_dir / name).read_text() for name in previous} == previous
