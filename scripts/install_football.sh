#!/usr/bin/env bash
# Install Google Research Football (gfootball) into the active Python environment.
#
# gfootball has no Linux wheel on PyPI: pip always builds its C++ engine from source, which
# needs system libraries (SDL2, Boost.Python, OpenGL/EGL) and takes a few minutes. Its build
# script imports psutil, so the build runs without pip's isolated build environment; `six`
# is used but not declared; gym >= 0.26 changed `reset()`, which gfootball still calls the
# old way. Safe to run twice: it does nothing when `import gfootball` already works.
#
# The versions of everything it installs come from constraints.txt at the repository's root
# (CONSTRAINTS=path for another file, CONSTRAINTS= for none).
#
#   . .venv/bin/activate && bash scripts/install_football.sh
set -euo pipefail

PYTHON="${PYTHON:-python}"
GFOOTBALL_VERSION="2.10.2"
CONSTRAINTS="${CONSTRAINTS-$(cd "$(dirname "$0")/.." && pwd)/constraints.txt}"
PIN=()
if [ -n "$CONSTRAINTS" ]; then
    PIN=(-c "$CONSTRAINTS")
fi

if "$PYTHON" -c "import gfootball.env" 2>/dev/null; then
    echo "gfootball is already installed; nothing to do."
    exit 0
fi

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
    echo "warning: no active virtual environment; installing into $("$PYTHON" -c 'import sys; print(sys.prefix)')" >&2
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

echo "== system packages"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
    build-essential cmake pkg-config \
    libgl1-mesa-dev libegl-dev \
    libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev libsdl2-gfx-dev \
    libboost-python-dev libboost-thread-dev libboost-system-dev libboost-filesystem-dev

echo "== build tools"
"$PYTHON" -m pip install -U pip setuptools wheel psutil "${PIN[@]}"

echo "== gfootball $GFOOTBALL_VERSION (builds the engine from source: a few minutes)"
"$PYTHON" -m pip install --no-build-isolation "gfootball==$GFOOTBALL_VERSION" "gym<0.26" six "${PIN[@]}"

"$PYTHON" -c "import gfootball.env; print('gfootball installed')"
