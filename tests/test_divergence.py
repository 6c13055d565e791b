"""A diverged trainer: non-finite weights are never checkpointed; the run stops or rolls back."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import srl_command
from srl.learn import checkpoint

pytestmark = pytest.mark.integration

USER_CODE = Path(__file__).resolve().parent / "user_code"


def _train(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        srl_command("train", "cartpole-ppo", "--run-dir", str(run_dir), "algorithm.type=diverging:DivergingPPO",
                    "algorithm.args.diverge_at=30", "checkpoint.every_s=0.2", "stop.episode_return=null",
                    "stop.env_steps=200000", "log.tensorboard=false", "log.progress=false",
                    *overrides),
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(USER_CODE), os.environ.get("PYTHONPATH", "")])})
    return result, run_dir


def _every_checkpoint_is_finite(run_dir: Path) -> int:
    paths = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    for path in paths:
        params = checkpoint.load(path)["policy"]["params"]
        assert all(bool(t.isfinite().all()) for t in params.values()), path.name
    return len(paths)


def test_a_diverged_trainer_stops_the_run_with_a_clear_reason(tmp_path):
    result, run_dir = _train(tmp_path, "trainers.on_diverge=stop")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "non-finite" in summary["stop_reason"] and "trainer.0" in summary["stop_reason"], summary
    assert "non-finite" in result.stderr
    assert _every_checkpoint_is_finite(run_dir) >= 1
    status = json.loads((run_dir / "status.json").read_text())
    trainer = next(w for w in status["workers"] if w["name"] == "trainer.0")
    assert trainer["restarts"] == 0  # no restart loop on weights a restart cannot mend


def test_a_diverged_trainer_rolls_back_to_its_last_checkpoint_and_goes_on(tmp_path):
    result, run_dir = _train(tmp_path, "trainers.on_diverge=rollback")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("env_steps"), summary  # neither stopped nor hung
    status = json.loads((run_dir / "status.json").read_text())
    trainer = next(w for w in status["workers"] if w["name"] == "trainer.0")
    assert trainer["stats"]["rollbacks"] == 1 and trainer["restarts"] == 0, trainer
    assert "rolled back" in (run_dir / "logs" / "trainer.0.log").read_text()
    assert _every_checkpoint_is_finite(run_dir) >= 1
    assert summary["episode_return_mean"] > 22  # it went on learning (random: about 22)
