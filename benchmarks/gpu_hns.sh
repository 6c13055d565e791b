#!/usr/bin/env bash
# Hide-and-seek (hns-mappo) on a machine with a GPU and many cores (written for 16 cores, 1 GPU):
#   1. component costs on one core (`taskset -c 0`): env step, forward pass by batch, learner,
#      message sizes, the links and the controller;
#   2. the same forward pass and learner on DEVICE: the GPU inputs of the projection;
#   3. the real system: `srl train hns-mappo` over the cores with GPU policy workers and a GPU
#      trainer, its env steps/s and learned steps/s beside the model's prediction for that host;
#   4. docs/hide_and_seek_at_scale.md's projection recomputed with these costs (the GPU's
#      measured figures in place of the page's assumed factor).
#
#   bash benchmarks/gpu_hns.sh OUT_DIR [SECONDS] [DEVICE]
#
# SECONDS: length of the training run (default 120). DEVICE defaults to cuda; `cpu` rehearses the
# script without a GPU (step 2 then measures the CPU again and step 4 uses GPU_FACTOR, default 50).
# ACTORS (default cores - 4), POLICY_WORKERS (2), MEASURE_S (2 s a cost), PARTS (what step 1
# measures; the rest is taken from benchmarks/scaling_costs.json) shorten or widen it.
# About 5 minutes on 16 cores as written. Everything goes to OUT_DIR/report.txt.
set -uo pipefail
OUT=${1:?usage: gpu_hns.sh OUT_DIR [SECONDS] [DEVICE]}
S=${2:-120}
DEVICE=${3:-cuda}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${PYTHON:-}" ] && [ -x "$HERE/../.venv/bin/python" ]; then PYTHON="$HERE/../.venv/bin/python"; fi
PY=${PYTHON:-python3}
CORES=${CORES:-$(nproc)}
ACTORS=${ACTORS:-$((CORES > 5 ? CORES - 4 : 1))}
POLICY_WORKERS=${POLICY_WORKERS:-2}
MEASURE_S=${MEASURE_S:-2}
PARTS=${PARTS:-experiments transports controller}
GPU_FACTOR=${GPU_FACTOR:-50}
MODEL=("$PY" "$HERE/scaling_model.py")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPORT="$OUT/report.txt"
: > "$REPORT"
RUNS=$(mktemp -d)
RUN_PID=""
cleanup() {  # the training run, if still going, by its PID; its shared memory goes with it
    if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
        kill -INT "$RUN_PID" 2>/dev/null; sleep 10; kill -KILL "$RUN_PID" 2>/dev/null
    fi
    rm -rf "$RUNS"
}
trap cleanup EXIT

step() { echo "== $* ($(date -u +%T), load average $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$REPORT"; }

{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  echo "cores $CORES, device $DEVICE, actors $ACTORS, policy workers $POLICY_WORKERS, run ${S}s"; } 2>&1 | tee -a "$REPORT"

step "component costs, one core"
cp "$HERE/scaling_costs.json" "$OUT/costs.json"
# shellcheck disable=SC2086  # PARTS is a list
taskset -c 0 "${MODEL[@]}" measure --json "$OUT/costs.json" --configs hns-mappo --seconds "$MEASURE_S" \
    --parts $PARTS 2>&1 | tee -a "$REPORT"

step "forward pass and learner on $DEVICE"
"${MODEL[@]}" measure --json "$OUT/costs-gpu.json" --configs hns-mappo --seconds "$MEASURE_S" \
    --device "$DEVICE" --parts experiments 2>&1 | tee -a "$REPORT"

step "the real system: srl train hns-mappo, $ACTORS actors, $POLICY_WORKERS policy workers and the trainer on $DEVICE"
timeout -s INT $((S + 240)) "$PY" -m srl.cli train hns-mappo --run-dir "$RUNS/hns" actors.count="$ACTORS" \
    policy_workers.count="$POLICY_WORKERS" policy_workers.device="$DEVICE" trainers.device="$DEVICE" \
    stop.env_steps=null stop.time_s="$S" log.progress=false log.tensorboard=false log.report_interval_s=2 \
    > "$RUNS/hns.out" 2> "$RUNS/hns.err" &
RUN_PID=$!
wait "$RUN_PID"
code=$?
RUN_PID=""
cp "$RUNS/hns/metrics.jsonl" "$OUT/train.metrics.jsonl" 2>/dev/null
cp "$RUNS/hns/status.json" "$OUT/train.status.json" 2>/dev/null
echo "srl train exit $code" | tee -a "$REPORT"
[ "$code" -eq 0 ] || tail -20 "$RUNS/hns.err" | tee -a "$REPORT"

step "measured against the model on this host, and the projection"
COSTS="$OUT/costs.json" GPU_COSTS="$OUT/costs-gpu.json" DEVICE="$DEVICE" CORES="$CORES" ACTORS="$ACTORS" \
POLICY_WORKERS="$POLICY_WORKERS" GPU_FACTOR="$GPU_FACTOR" METRICS="$OUT/train.metrics.jsonl" \
STATUS="$OUT/train.status.json" "$PY" - "$HERE" <<'EOF' 2>&1 | tee -a "$REPORT"
import json, math, os, sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import scaling_model as m

env = os.environ
device, cores = env["DEVICE"], int(env["CORES"])
actors, policy_workers = int(env["ACTORS"]), int(env["POLICY_WORKERS"])
costs = m.load_costs(env["COSTS"], env["GPU_COSTS"] if device != "cpu" else None)
cpu = costs.experiments["hns-mappo"]
measured_gpu = m.load_costs(env["COSTS"], env["GPU_COSTS"]).gpu["hns-mappo"]
print(f"inputs, one core: E {1 / cpu.env_s:,.0f} env steps/s, L {1 / cpu.learner_s:,.0f} rows/s, I by rows "
      + ", ".join(f"{b}: {1 / t:,.0f}" for b, t in sorted(cpu.inference_s.items()))
      + f"; {cpu.agents} rows an env step; bytes a row: sample {cpu.sample_bytes:,.0f}, observation "
      f"{cpu.obs_bytes:,.0f}; parameters {cpu.param_bytes / 1e6:.2f} MB")
print(f"inputs, {device}: L {1 / measured_gpu.learner_s:,.0f} rows/s, I by rows "
      + ", ".join(f"{b}: {1 / t:,.0f}" for b, t in sorted(measured_gpu.inference_s.items())))
factor_l = cpu.learner_s / measured_gpu.learner_s
factor_i = cpu.inference_at(512) / measured_gpu.inference_at(512)
print(f"{device} over one core: learner x{factor_l:.1f}, forward pass at 512 rows x{factor_i:.1f} "
      f"(the page assumes x{float(env['GPU_FACTOR']):g} for both)")

# The real run: steady rates over its second half (start-up and warm-up left out).
path = Path(env["METRICS"])
records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
flowing = [r for r in records if r.get("env_steps", 0) > 0]
half = [r for r in flowing if r["time_s"] >= (flowing[0]["time_s"] + flowing[-1]["time_s"]) / 2] if flowing else []
if len(half) >= 2 and half[-1]["time_s"] > half[0]["time_s"]:
    span = half[-1]["time_s"] - half[0]["time_s"]
    sampled = (half[-1]["env_steps"] - half[0]["env_steps"]) / span
    learned = (half[-1].get("trained_steps", 0) - half[0].get("trained_steps", 0)) / span / cpu.agents
    print(f"measured over {span:.0f} s: {sampled:,.0f} env steps/s sampled, {learned:,.0f} env steps/s learned "
          f"({learned * cpu.agents:,.0f} rows/s)")
else:
    sampled = learned = math.nan
    print(f"measured: no steady window in {len(flowing)} reports (the run was too short or failed)")
status = Path(env["STATUS"])
if status.exists():
    batches = [w.get("mean_batch") for w in json.loads(status.read_text()).get("workers", []) if w.get("mean_batch")]
    if batches:
        print("policy workers' mean batch (rows): " + ", ".join(f"{b:.1f}" for b in batches))
p = m.predict_for(costs, m.Host(cores=cores, device=device), "hns-mappo", actors=actors, policy_workers=policy_workers)
print(f"model, this run's layout on {cores} cores ({device}): {p.throughput:,.0f} env steps/s, first bottleneck "
      f"{p.bottleneck}; measured / predicted: sampled {sampled / p.throughput:.2f}, learned {learned / p.throughput:.2f}")

# The projection of docs/hide_and_seek_at_scale.md, with these costs.
if device == "cpu":
    costs = m.assumed_gpu(costs, float(env["GPU_FACTOR"]))
phases = {"fort building": 6.0e9, "ramp use": 24.0e9, "ramp defence": 31.7e9}
layouts = [(1000, dict(trainer_workers=8, policy_workers=32)),
           (1000, dict(trainer_workers=104, trainer_hosts=13, policy_workers=144, policy_hosts=2)),
           (1400, dict(trainer_workers=136, trainer_hosts=17, policy_workers=192, policy_hosts=3)),
           (4000, dict(trainer_workers=32, trainer_hosts=4, policy_workers=64)),
           (10000, dict(trainer_workers=64, trainer_hosts=8, policy_workers=128, policy_hosts=2))]
print("\n| actor cores | learner GPUs | policy workers | env steps/s | first bottleneck (next) | "
      + " | ".join(f"hours to {name}" for name in phases) + " |")
print("|---|---|---|---|---|" + "---|" * len(phases))
for size, layout in layouts:
    cluster = m.Cluster(cores=size, policy_batch=128, **layout)
    p = m.predict(cluster.resources(costs, cpu))
    hours = " | ".join(f"{steps / p.throughput / 3600:,.1f}" for steps in phases.values())
    name, limit = list(p.limits.items())[1]
    print(f"| {size:,} | {layout['trainer_workers']} | {layout['policy_workers']} | {p.throughput:,.0f} "
          f"| {p.bottleneck} ({name} {limit:,.0f}) | {hours} |")
EOF
echo "report: $REPORT"
