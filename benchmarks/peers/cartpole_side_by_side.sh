#!/usr/bin/env bash
# SRL vs Stable-Baselines3 PPO on CartPole-v1, side by side in one sitting.
#
# Each round runs `srl train cartpole-ppo` and then benchmarks/peers/sb3_ppo.py, one after the
# other, each until the mean return of the last 100 episodes reaches 475. Both are timed from
# the shell (date +%s.%N around the whole command: start-up, imports and shutdown included),
# then a table of wall time to 475 and steps/s per round, medians and ratios is printed.
#
#   source .venv/bin/activate                        # the srl on PATH is the one measured
#   bash benchmarks/peers/cartpole_side_by_side.sh [ROUNDS]   # default 3
#
# The SB3 python comes from SB3_PYTHON, else from setup_sb3.sh (which creates its venv once).
# Run it on an otherwise idle machine: both sides are CPU-bound.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROUNDS="${1:-${ROUNDS:-3}}"
TARGET=475

if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [ROUNDS]  (a positive integer, default 3)" >&2
    exit 2
fi
SRL="$(command -v srl || true)"
if [ -z "$SRL" ]; then
    echo "no srl on PATH: activate the project venv first (source .venv/bin/activate)" >&2
    exit 2
fi
SB3_PY="${SB3_PYTHON:-$(bash "$HERE/setup_sb3.sh")}"
if ! "$SB3_PY" -c "import stable_baselines3" 2>/dev/null; then
    echo "$SB3_PY cannot import stable_baselines3: run benchmarks/peers/setup_sb3.sh" >&2
    exit 2
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/srl-peers.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"

now() { date +%s.%N; }
fail=0

echo "srl: $SRL"
echo "sb3: $SB3_PY ($("$SB3_PY" -c 'import stable_baselines3, torch; print(f"stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}")'))"
echo "host: $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

for round in $(seq 1 "$ROUNDS"); do
    # --- SRL -------------------------------------------------------------------------------
    run_dir="$WORK/srl-$round"
    echo "round $round/$ROUNDS: srl train cartpole-ppo ..." >&2
    t0="$(now)"
    rc=0
    srl train cartpole-ppo --run-dir "$run_dir" log.progress=false log.tensorboard=false \
        > "$WORK/srl-$round.log" 2>&1 || rc=$?
    t1="$(now)"
    if [ "$rc" -ne 0 ] || [ ! -f "$run_dir/summary.json" ]; then
        echo "  srl failed (exit $rc); last lines of its output:" >&2
        tail -n 20 "$WORK/srl-$round.log" >&2
        fail=1
    fi
    "$SB3_PY" - "$round" "$t0" "$t1" "$rc" "$run_dir/summary.json" >> "$RESULTS" <<'PY'
import json, os, sys
rnd, t0, t1, rc, path = sys.argv[1:]
s = json.load(open(path)) if os.path.exists(path) else {}
print(json.dumps({"round": int(rnd), "lib": "srl", "wall_s": float(t1) - float(t0), "rc": int(rc),
                  "env_steps": s.get("env_steps"), "steps_per_s": s.get("fps"),
                  "inner_s": s.get("wall_time_s"), "return": s.get("episode_return_mean"),
                  "reached": str(s.get("stop_reason", "")).startswith("episode_return_mean")}))
PY
    rm -rf "$run_dir"

    # --- Stable-Baselines3 -----------------------------------------------------------------
    out="$WORK/sb3-$round.json"
    echo "round $round/$ROUNDS: sb3_ppo.py ..." >&2
    t0="$(now)"
    rc=0
    "$SB3_PY" "$HERE/sb3_ppo.py" --target "$TARGET" --seed "$round" --json "$out" \
        > "$WORK/sb3-$round.log" 2>&1 || rc=$?
    t1="$(now)"
    if [ "$rc" -ne 0 ] || [ ! -f "$out" ]; then
        echo "  sb3 failed (exit $rc); last lines of its output:" >&2
        tail -n 20 "$WORK/sb3-$round.log" >&2
        fail=1
    fi
    "$SB3_PY" - "$round" "$t0" "$t1" "$rc" "$out" >> "$RESULTS" <<'PY'
import json, os, sys
rnd, t0, t1, rc, path = sys.argv[1:]
s = json.load(open(path)) if os.path.exists(path) else {}
print(json.dumps({"round": int(rnd), "lib": "sb3", "wall_s": float(t1) - float(t0), "rc": int(rc),
                  "env_steps": s.get("env_steps"), "steps_per_s": s.get("steps_per_s"),
                  "inner_s": s.get("train_time_s"), "return": s.get("episode_return_mean"),
                  "reached": bool(s.get("reached"))}))
PY
done

"$SB3_PY" - "$RESULTS" "$TARGET" <<'PY'
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
target = sys.argv[2]
by = {(r["round"], r["lib"]): r for r in rows}
rounds = sorted({r["round"] for r in rows})


def ok(r):
    return r is not None and r["rc"] == 0 and r["reached"]


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def ratio(a, b):
    return a / b if a and b else None


header = (f"{'round':>6} | {'SRL wall':>9} {'SRL steps/s':>11} {'SRL steps':>9} | "
          f"{'SB3 wall':>9} {'SB3 steps/s':>11} {'SB3 steps':>9} | {'SB3/SRL wall':>12} {'SRL/SB3 steps/s':>15}")
print(f"\nCartPole-v1 PPO to a mean return of {target} over the last 100 episodes (wall in seconds)")
print(header)
print("-" * len(header))
cols = {k: [] for k in ("srl_wall", "srl_sps", "srl_steps", "sb3_wall", "sb3_sps", "sb3_steps")}
for n in rounds:
    a, b = by.get((n, "srl")), by.get((n, "sb3"))
    cells = []
    for lib, r in (("srl", a), ("sb3", b)):
        if ok(r):
            cols[f"{lib}_wall"].append(r["wall_s"])
            cols[f"{lib}_sps"].append(r["steps_per_s"])
            cols[f"{lib}_steps"].append(r["env_steps"])
            cells.append((f"{r['wall_s']:9.2f}", f"{r['steps_per_s']:11.0f}", f"{r['env_steps']:9d}"))
        else:
            why = "failed" if r is None or r["rc"] != 0 else "no 475"
            cells.append((f"{why:>9}", f"{fmt(r and r['steps_per_s'], '11.0f'):>11}", f"{fmt(r and r['env_steps'], '9d'):>9}"))
    wr = ratio(b["wall_s"], a["wall_s"]) if ok(a) and ok(b) else None
    sr = ratio(a["steps_per_s"], b["steps_per_s"]) if ok(a) and ok(b) else None
    print(f"{n:>6} | {' '.join(cells[0])} | {' '.join(cells[1])} | {fmt(wr, '12.2f'):>12} {fmt(sr, '15.2f'):>15}")
print("-" * len(header))
med = {k: (statistics.median(v) if v else None) for k, v in cols.items()}
wr, sr = ratio(med["sb3_wall"], med["srl_wall"]), ratio(med["srl_sps"], med["sb3_sps"])
print(f"{'median':>6} | {fmt(med['srl_wall'], '9.2f'):>9} {fmt(med['srl_sps'], '11.0f'):>11} {fmt(med['srl_steps'], '9.0f'):>9} | "
      f"{fmt(med['sb3_wall'], '9.2f'):>9} {fmt(med['sb3_sps'], '11.0f'):>11} {fmt(med['sb3_steps'], '9.0f'):>9} | "
      f"{fmt(wr, '12.2f'):>12} {fmt(sr, '15.2f'):>15}")
print()
print(f"ratios of medians: SB3 wall / SRL wall = {fmt(wr, '.2f')}   SRL steps/s / SB3 steps/s = {fmt(sr, '.2f')}")
print("wall: shell-timed whole command (start-up, imports, shutdown included).")
print("steps/s: SRL summary.json fps (env steps over the controller's run, worker start-up included);")
print("         SB3 env steps over learn() alone. Medians and ratios use rounds that reached 475 only.")
PY

exit "$fail"
