#!/usr/bin/env bash
# Creates (or reuses) a separate venv with RLlib for the peer benchmark and prints its python.
# Kept apart from the project venv on purpose: RLlib's extras (dm-tree, scikit-image, ...) and
# the env suites the peers need must not leak into it. Ray is the version the project pins
# (constraints.txt), and so are the env suites (but gymnasium, which RLlib pins itself).
#   RLLIB_VENV=/path bash benchmarks/peers/setup_rllib.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${RLLIB_VENV:-$HOME/.cache/srl-peers/rllib}"
PY="$VENV/bin/python"
RAY_VERSION=2.60.0

if [ ! -x "$PY" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi

# Idempotent: skip pip when everything is already importable at the pinned versions.
if ! "$PY" - "$RAY_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
import ray, torch, gymnasium, ale_py, cv2, mujoco, pettingzoo, mpe2  # noqa: F401
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: F401
from mpe2 import simple_spread_v3  # noqa: F401
sys.exit(0 if md.version("torch").split("+")[0] == "2.13.0" and md.version("ray") == sys.argv[1] else 1)
PY
then
    "$PY" -m pip install -q -U pip >&2
    # torch first and pinned exactly, as in the project: a looser spec lets pip pull a multi-GB
    # CUDA build. The project's constraints keep every shared package at the version SRL runs.
    "$PY" -m pip install -q torch==2.13.0 >&2
    # RLlib pins its own gymnasium (1.2.2 for ray 2.60), so the project's gymnasium pin is left out.
    CONSTRAINTS="$(mktemp)"
    trap 'rm -f "$CONSTRAINTS"' EXIT
    grep -v '^gymnasium==' "$HERE/../../constraints.txt" > "$CONSTRAINTS"
    "$PY" -m pip install -q -c "$CONSTRAINTS" torch==2.13.0 "ray[rllib]==$RAY_VERSION" \
        "gymnasium[mujoco]" ale-py opencv-python-headless pettingzoo mpe2 psutil >&2
fi

echo "$PY"
