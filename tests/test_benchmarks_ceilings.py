"""Component-ceiling benchmarks run in smoke mode so they cannot rot; their figures are never asserted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, out: Path, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", "--json", str(out), *args],
                            cwd=out.parent, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_policy_worker_smoke(tmp_path):
    figures = _run("policy_worker.py", tmp_path / "pw.json", "--models", "mlp")
    for mode in ("forward", "shm", "zmq"):
        rates = figures["mlp"][mode]["16"]
        assert all(rates[k] > 0 for k in ("mean", "best", "cpu")), mode


def test_sample_stream_smoke(tmp_path):
    figures = _run("sample_stream.py", tmp_path / "ss.json")
    for transport in ("shm", "zmq"):
        point = figures["cartpole"][transport]["1"]
        for unit in ("messages", "gb"):
            assert all(point[k % unit] > 0 for k in ("%s_per_s", "best_%s_per_s", "consumer_cpu_%s_per_s")), transport
