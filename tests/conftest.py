import os
import subprocess
import sys
from pathlib import Path

import pytest


def srl_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "srl.cli", *args]


@pytest.fixture
def run_srl(tmp_path: Path):
    """Run `srl ...` in a subprocess (cwd: a temp dir, so nothing lands in the checkout)."""

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(srl_command(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})

    return run
