#!/usr/bin/env bash
# Creates (or reuses) a separate venv with PufferLib 3 for the peer benchmark and prints its
# python; exits non-zero, with the reason as the last line on stderr, when it cannot be built.
# PufferLib 3 ships as a source package whose build compiles C/C++ extensions against torch:
# the build runs without isolation, so it sees the torch pinned here instead of fetching a
# newer (CUDA) one into a throwaway build env.
#   PUFFER_VENV=/path bash benchmarks/peers/setup_pufferlib.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PUFFER_VENV:-$HOME/.cache/srl-peers/pufferlib}"
PY="$VENV/bin/python"
PUFFER_VERSION=3.0.0

if [ ! -x "$PY" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi

if ! "$PY" - "$PUFFER_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
import pufferlib, pufferlib.pufferl, torch, gymnasium, ale_py, cv2, psutil  # noqa: F401
sys.exit(0 if md.version("torch").split("+")[0] == "2.13.0" and md.version("pufferlib") == sys.argv[1] else 1)
PY
then
    LOG="$VENV/install.log"
    "$PY" -m pip install -q -U pip >&2
    "$PY" -m pip install -q torch==2.13.0 >&2
    "$PY" -m pip install -q -c "$HERE/../../constraints.txt" torch==2.13.0 setuptools wheel cython pybind11 numpy \
        gymnasium ale-py opencv-python-headless psutil >&2
    if ! "$PY" -m pip install --no-build-isolation -c "$HERE/../../constraints.txt" torch==2.13.0 \
            "pufferlib==$PUFFER_VERSION" > "$LOG" 2>&1; then
        # The build's last exception says why; keep it to one line for the harness.
        reason="$(grep -E "^ *[A-Za-z_.]*(Error|Exception)\b" "$LOG" | tail -n1 | sed 's/^ *//' | cut -c1-160 || true)"
        if grep -q "download_raylib" "$LOG"; then
            reason="its build downloads raylib from the internet (setup.py download_raylib), which is out of reach: $reason"
        fi
        echo "pufferlib $PUFFER_VERSION did not install: ${reason:-see $LOG}" >&2
        exit 1
    fi
    if ! "$PY" -c "import pufferlib.pufferl" > "$LOG.import" 2>&1; then
        echo "pufferlib $PUFFER_VERSION installed but does not import: $(tail -n1 "$LOG.import" | cut -c1-200)" >&2
        exit 1
    fi
fi

echo "$PY"
