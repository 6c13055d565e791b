#!/usr/bin/env bash
# Creates (or reuses) a separate venv with Stable-Baselines3 for the peer benchmark and
# prints its python. Kept apart from the project venv on purpose: SB3 must not leak into it.
# Besides classic control it holds what the side-by-side tasks need: ale-py (the Atari ROMs
# ship in its wheel) with OpenCV for the preprocessing, and MuJoCo for HalfCheetah-v5, at the
# versions the project pins (constraints.txt), so both sides step the same env code.
#   SB3_VENV=/path bash benchmarks/peers/setup_sb3.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SB3_VENV:-$HOME/.cache/srl-peers/sb3}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi

# Idempotent: skip pip when everything is already importable at the pinned torch.
if ! "$PY" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
import stable_baselines3, gymnasium, torch, ale_py, cv2, mujoco, psutil  # noqa: F401
from gymnasium.envs.classic_control import CartPoleEnv  # noqa: F401
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv  # noqa: F401
v = md.version("stable-baselines3").split(".")
sys.exit(0 if md.version("torch").split("+")[0] == "2.13.0" and (int(v[0]), int(v[1])) >= (2, 3) else 1)
PY
then
    "$PY" -m pip install -q -U pip >&2
    # torch pinned exactly, as in the project: a looser spec lets pip pull a multi-GB CUDA build.
    "$PY" -m pip install -q torch==2.13.0 >&2
    "$PY" -m pip install -q -c "$HERE/../../constraints.txt" torch==2.13.0 "stable-baselines3>=2.3" \
        "gymnasium[classic-control,mujoco]" ale-py opencv-python-headless psutil >&2
fi

echo "$PY"
