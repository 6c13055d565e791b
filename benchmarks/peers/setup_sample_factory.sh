#!/usr/bin/env bash
# Creates (or reuses) a separate venv with Sample Factory for the peer benchmark and prints its
# python. Kept apart from the project venv, and from the SB3 one, on purpose: sample-factory 2.1
# needs numpy<2 and gymnasium<1.0, which the project has moved past.
# Besides classic control it holds what the side-by-side tasks need: ale-py 0.9.1 (the newest
# that registers its envs with a gymnasium<1.0; the ROMs ship in its wheel) with OpenCV for the
# preprocessing, and MuJoCo. Gymnasium<1.0 has no HalfCheetah-v5: its HalfCheetah-v4 runs the
# same model and reward (v5 renamed info keys and added options), so the runner uses that.
#   SF_VENV=/path bash benchmarks/peers/setup_sample_factory.sh
set -euo pipefail

VENV="${SF_VENV:-$HOME/.cache/srl-peers/sample-factory}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi

# Idempotent: skip pip when everything is already importable at the pinned versions.
if ! "$PY" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
import sample_factory, gymnasium, numpy, torch, ale_py, cv2, mujoco, psutil  # noqa: F401
from sample_factory.algo.utils.make_env import make_env_func_batched  # noqa: F401
from gymnasium.envs.classic_control import CartPoleEnv  # noqa: F401
from gymnasium.envs.mujoco.half_cheetah_v4 import HalfCheetahEnv  # noqa: F401
major = lambda name: int(md.version(name).split(".")[0])
ok = (md.version("torch").split("+")[0] == "2.13.0" and md.version("sample-factory") == "2.1.1"
      and major("numpy") < 2 and major("gymnasium") < 1 and md.version("ale-py") == "0.9.1")
sys.exit(0 if ok else 1)
PY
then
    "$PY" -m pip install -q -U pip >&2
    # torch first and pinned exactly, as in the project: a looser spec lets pip pull a multi-GB
    # CUDA build; then sample-factory with the pins its 2.1 release needs (it does not state them).
    "$PY" -m pip install -q torch==2.13.0 >&2
    "$PY" -m pip install -q torch==2.13.0 sample-factory==2.1.1 "numpy<2" "gymnasium[classic-control,mujoco]<1.0" \
        ale-py==0.9.1 opencv-python-headless psutil >&2
fi

echo "$PY"
