#!/usr/bin/env bash
# System libraries for `srl evaluate --video` on MuJoCo envs (HalfCheetah, hide-and-seek) on a
# machine without a display: Mesa's EGL and its llvmpipe software renderer, which MuJoCo uses
# through MUJOCO_GL=egl (SRL sets it when a video is asked for). A GPU machine with the vendor's
# EGL needs none of this. Classic control, Atari and VizDoom videos need no system packages.
# scripts/install_football.sh installs these too (libegl-dev and libgl1-mesa-dev pull them in).
#
#   bash scripts/install_render.sh
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends libegl1 libegl-mesa0 libgl1-mesa-dri
