#!/usr/bin/env bash
# GPU checks in one go, for a machine with a CUDA device and many cores:
#   1. CUDA paths: cartpole-ppo with remote inference on the GPU and the trainer on the GPU,
#      and cartpole-appo with its trainer on the GPU; each must reach 475.
#   2. Sampling over the cores: cartpole-ppo with the no-op algorithm, 2..N actors.
#   3. Pong learning: pong-appo with GPU policy workers and trainer, many actors.
#
#   bash benchmarks/gpu_check.sh OUT_DIR [PONG_SECONDS] [DEVICE]
#
# OUT_DIR/results.txt gets every run's summary (and its error's tail), OUT_DIR/NAME.metrics.jsonl
# its metrics. DEVICE defaults to cuda (`cpu` rehearses the script on a machine without a GPU);
# SAMPLING_ACTORS="" skips the sampling sweep, CARTPOLE_CHECKS=0 the CartPole CUDA paths.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR [PONG_SECONDS] [DEVICE]}
PONG_S=${2:-300}
DEVICE=${3:-cuda}
PY=${PYTHON:-python3}
CORES=${CORES:-$(nproc)}
RUNS=$(mktemp -d)
mkdir -p "$OUT"
QUIET=(log.progress=false log.tensorboard=false)

run() {  # run NAME ARGS...: one srl train; its summary goes to results.txt, its metrics to OUT/NAME.metrics.jsonl
    local name=$1; shift
    local start=$SECONDS
    timeout 900 "$PY" -m srl.cli train "$@" --run-dir "$RUNS/$name" "${QUIET[@]}" > "$RUNS/$name.out" 2> "$RUNS/$name.err"
    local code=$?
    cp "$RUNS/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
    echo "$name exit=$code wall=$((SECONDS - start))s $(tr -d '\n' < "$RUNS/$name/summary.json" 2>/dev/null)" >> "$OUT/results.txt"
    [ $code -eq 0 ] || tail -20 "$RUNS/$name.err" >> "$OUT/results.txt"
    tail -1 "$OUT/results.txt"
}

{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  echo "cores $CORES"; } | tee "$OUT/results.txt"

if [ "${CARTPOLE_CHECKS:-1}" != 0 ]; then
    run cartpole-ppo-gpu cartpole-ppo actors.inference=remote actors.ring_size=2 actors.envs_per_slot=32 \
        policy_workers.device="$DEVICE" trainers.device="$DEVICE" stop.env_steps=3000000
    run cartpole-appo-gpu cartpole-appo trainers.device="$DEVICE" stop.env_steps=3000000
fi

for actors in ${SAMPLING_ACTORS-2 4 8 $((CORES - 2))}; do
    run "sampling-$actors" cartpole-ppo algorithm.type=noop algorithm.args={} actors.count="$actors" \
        stop.episode_return=null stop.env_steps=null stop.time_s=12
done

run pong-appo-gpu pong-appo actors.count=$((CORES - 3)) actors.inference=remote actors.ring_size=2 \
    policy_workers.count=1 policy_workers.device="$DEVICE" trainers.device="$DEVICE" \
    trainers.placement.threads=1 stop.env_steps=null stop.time_s="$PONG_S"
rm -rf "$RUNS"
