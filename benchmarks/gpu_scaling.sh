#!/usr/bin/env bash
# The scaling model checked on a machine with a GPU and many cores (written for 16):
#   1. component costs: one core's (env, forward pass, learner, streams, controller; under
#      `taskset -c 0`) and the GPU's (the policy's forward pass by batch size, the learner);
#   2. predicted against measured: inline CartPole sampling over actor counts (2 .. cores - 2),
#      Pong with remote inference on the GPU over the same actor counts (the env ring, ring 2),
#      and Pong training with the GPU policy worker and trainer;
#   3. Pong learning: gpu_check.sh's pong-appo run (GPU policy worker and trainer, many actors);
#   4. the model's table at 1k / 10k / 15k cores with the GPU figures (8 GPUs a trainer tier).
#
#   bash benchmarks/gpu_scaling.sh OUT_DIR [SECONDS] [PONG_SECONDS] [DEVICE]
#
# SECONDS per sampling or training point (default 10), PONG_SECONDS for the learning run (300;
# 0 skips it). DEVICE defaults to cuda; `cpu` rehearses the script on a machine without a GPU.
# ACTORS overrides the sweep ("2 4 8 14" on 16 cores). Every table goes to OUT_DIR/report.txt.
set -uo pipefail
OUT=${1:?usage: gpu_scaling.sh OUT_DIR [SECONDS] [PONG_SECONDS] [DEVICE]}
S=${2:-10}
PONG_S=${3:-300}
DEVICE=${4:-cuda}
PY=${PYTHON:-python3}
CORES=${CORES:-$(nproc)}
ACTORS=${ACTORS:-2 4 8 $((CORES - 2))}
MEASURE_S=${MEASURE_S:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=("$PY" "$HERE/scaling_model.py")
mkdir -p "$OUT"
REPORT="$OUT/report.txt"

step() { echo "== $* ($(date -u +%T))" | tee -a "$REPORT"; }

step "component costs, one core"
taskset -c 0 "${MODEL[@]}" measure --json "$OUT/costs.json" --seconds "$MEASURE_S" \
    --configs cartpole-ppo pong-ppo 2>&1 | tee -a "$REPORT"
if [ "$DEVICE" != cpu ]; then
    step "component costs, $DEVICE"
    "${MODEL[@]}" measure --json "$OUT/costs-gpu.json" --device "$DEVICE" --seconds "$MEASURE_S" \
        --parts experiments --configs cartpole-ppo pong-ppo 2>&1 | tee -a "$REPORT"
    GPU=(--gpu-costs "$OUT/costs-gpu.json" --device "$DEVICE")
else
    GPU=()
fi

step "predicted and measured: actor sweep (CartPole inline) and Pong with remote inference on $DEVICE"
# shellcheck disable=SC2086  # ACTORS is a list
"${MODEL[@]}" check-sweep "$OUT/costs.json" "${GPU[@]}" --configs cartpole-ppo --actors $ACTORS \
    --seconds "$S" --json "$OUT/sweep.json" 2>&1 | tee -a "$REPORT"

if [ "$PONG_S" != 0 ]; then
    step "Pong learning (gpu_check.sh)"
    CARTPOLE_CHECKS=0 SAMPLING_ACTORS="" bash "$HERE/gpu_check.sh" "$OUT/learning" "$PONG_S" "$DEVICE" \
        2>&1 | tee -a "$REPORT"
fi

step "the model at 1k / 10k / 15k cores with these costs (trainer tier: 8 GPUs, or 8 processes with DEVICE=cpu)"
"${MODEL[@]}" predict "$OUT/costs.json" "${GPU[@]:0:2}" --assumptions '{"trainer_workers": 8}' \
    --json "$OUT/predictions.json" 2>&1 | tee -a "$REPORT"
