#!/usr/bin/env bash
# SRL vs Stable-Baselines3 PPO and Sample Factory APPO on CartPole-v1, side by side in one sitting.
#
# Each round runs, one after the other, each until the mean return of the last 100 episodes
# reaches 475:
#   1. `srl train cartpole-ppo` as shipped;
#   2. SRL with SB3's update shape (8 envs in one actor, rollouts of 128, batch 1024,
#      minibatches of 256, 4 epochs), then benchmarks/peers/sb3_ppo.py;
#   3. SRL with Sample Factory's update shape (32 envs: 2 actors x 16, rollouts of 32,
#      batch 512, one minibatch, 1 epoch), then benchmarks/peers/sf_appo.py.
# Each is timed from the shell (date +%s.%N around the whole command: start-up, imports and
# shutdown included), then a table of wall time to 475 and steps/s per round, medians and
# ratios (each peer against SRL in its shape, and against SRL as shipped) is printed.
#
#   source .venv/bin/activate                        # the srl on PATH is the one measured
#   bash benchmarks/peers/cartpole_side_by_side.sh [ROUNDS]   # default 3
#
# The SB3 python comes from SB3_PYTHON, else from setup_sb3.sh (which creates its venv once);
# the Sample Factory one from SF_PYTHON, else from setup_sample_factory.sh.
# Run it on an otherwise idle machine: all sides are CPU-bound.
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
SF_PY="${SF_PYTHON:-$(bash "$HERE/setup_sample_factory.sh")}"
if ! "$SF_PY" -c "import sample_factory" 2>/dev/null; then
    echo "$SF_PY cannot import sample_factory: run benchmarks/peers/setup_sample_factory.sh" >&2
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
echo "sf:  $SF_PY ($("$SF_PY" -c 'import importlib.metadata as md; print("sample-factory", md.version("sample-factory") + ", torch", md.version("torch"))'))"
echo "host: $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# timed LIB RESULT CMD...: runs CMD (output to LIB's log for this round), timed from the shell;
# sets T0, T1 and RC, and reports a failure (non-zero exit, or no RESULT file written).
timed() {
    local lib="$1" result="$2"
    shift 2
    RC=0
    T0="$(now)"
    "$@" > "$WORK/$lib-$round.log" 2>&1 || RC=$?
    T1="$(now)"
    if [ "$RC" -ne 0 ] || [ ! -e "$result" ]; then
        echo "  $lib failed (exit $RC); last lines of its output:" >&2
        tail -n 20 "$WORK/$lib-$round.log" >&2
        fail=1
    fi
}

# run_peer LIB PYTHON SCRIPT: one peer run to the target, its result appended to $RESULTS.
run_peer() {
    local lib="$1" py="$2" script="$3" out="$WORK/$1-$round.json"
    echo "round $round/$ROUNDS: $script ..." >&2
    timed "$lib" "$out" "$py" "$HERE/$script" --target "$TARGET" --seed "$round" --json "$out"
    "$py" - "$lib" "$round" "$T0" "$T1" "$RC" "$out" >> "$RESULTS" <<'PY'
import json, os, sys
lib, rnd, t0, t1, rc, path = sys.argv[1:]
s = json.load(open(path)) if os.path.exists(path) else {}
print(json.dumps({"round": int(rnd), "lib": lib, "wall_s": float(t1) - float(t0), "rc": int(rc),
                  "env_steps": s.get("env_steps"), "steps_per_s": s.get("steps_per_s"),
                  "inner_s": s.get("train_time_s"), "return": s.get("episode_return_mean"),
                  "reached": bool(s.get("reached"))}))
PY
}

# The update shapes of the peers' settings (see sb3_ppo.py and sf_appo.py).
# 8 envs in one actor: as 2 actors x 4 it trained at 33k env steps/s against 42k (forward
# passes of 4 rows cost nearly what 8 do).
SB3_SHAPE=(actors.count=1 actors.envs_per_slot=8 actors.trajectory_length=128 trainers.batch_steps=1024
           algorithm.args.minibatches=4 algorithm.args.epochs=4)
SF_SHAPE=(actors.count=2 actors.envs_per_slot=16 actors.trajectory_length=32 trainers.batch_steps=512
          algorithm.args.minibatches=1 algorithm.args.epochs=1)

# run_srl LIB [OVERRIDES...]: one `srl train cartpole-ppo` to the target, appended to $RESULTS.
run_srl() {
    local lib="$1" run_dir="$WORK/$1-$round"
    shift
    echo "round $round/$ROUNDS: srl train cartpole-ppo $* ..." >&2
    timed "$lib" "$run_dir/summary.json" srl train cartpole-ppo --run-dir "$run_dir" log.progress=false \
        log.tensorboard=false log.report_interval_s=0.25 "$@"
    "$SB3_PY" - "$lib" "$round" "$T0" "$T1" "$RC" "$run_dir" >> "$RESULTS" <<'PY'
import json, os, sys
lib, rnd, t0, t1, rc, run_dir = sys.argv[1:]
path = os.path.join(run_dir, "summary.json")
s = json.load(open(path)) if os.path.exists(path) else {}
# Steady steps/s, as the peers count theirs: env steps from the first report that saw any
# (worker start-up excluded) to the end of the run.
rate = None
if s:
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    first = next((r for r in records if r["env_steps"] > 0), None)
    if first is not None and s["wall_time_s"] > first["time_s"]:
        rate = (s["env_steps"] - first["env_steps"]) / (s["wall_time_s"] - first["time_s"])
print(json.dumps({"round": int(rnd), "lib": lib, "wall_s": float(t1) - float(t0), "rc": int(rc),
                  "env_steps": s.get("env_steps"), "steps_per_s": rate,
                  "inner_s": s.get("wall_time_s"), "return": s.get("episode_return_mean"),
                  "reached": str(s.get("stop_reason", "")).startswith("episode_return_mean")}))
PY
    rm -rf "$run_dir"
}

for round in $(seq 1 "$ROUNDS"); do
    run_srl srl
    run_srl srl-sb3 "${SB3_SHAPE[@]}"
    run_peer sb3 "$SB3_PY" sb3_ppo.py
    run_srl srl-sf "${SF_SHAPE[@]}"
    run_peer sf "$SF_PY" sf_appo.py
done

"$SB3_PY" - "$RESULTS" "$TARGET" <<'PY'
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
target = sys.argv[2]
LIBS = {"srl": "SRL (cartpole-ppo)", "srl-sb3": "SRL, SB3's shape", "sb3": "SB3 PPO",
        "srl-sf": "SRL, SF's shape", "sf": "SF APPO"}
#: Each peer, and the SRL run in its update shape.
PAIRS = {"sb3": "srl-sb3", "sf": "srl-sf"}
by = {(r["round"], r["lib"]): r for r in rows}
rounds = sorted({r["round"] for r in rows})


def ok(r):
    return r is not None and r["rc"] == 0 and r["reached"]


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


widths = (6, 19, 9, 11, 9)
header = ("round", "run", "wall", "steps/s", "steps")


def line(cells):
    print(" ".join(format(str(c), f">{w}") for c, w in zip(cells, widths)).rstrip())


print(f"\nCartPole-v1 to a mean return of {target} over the last 100 episodes (wall in seconds)")
line(header)
print("-" * (sum(widths) + len(widths) - 1))
good = {lib: [] for lib in LIBS}
for n in rounds:
    for lib, name in LIBS.items():
        r = by.get((n, lib))
        if ok(r):
            good[lib].append(r)
            wall = f"{r['wall_s']:.2f}"
        else:
            wall = "failed" if r is None or r["rc"] != 0 else f"no {target}"
        line([n, name, wall, fmt(r and r["steps_per_s"], ".0f"), fmt(r and r["env_steps"], "d")])
print("-" * (sum(widths) + len(widths) - 1))
med = {lib: ({k: statistics.median(r[k] for r in rs) for k in ("wall_s", "steps_per_s", "env_steps")} if rs else None)
       for lib, rs in good.items()}
for lib, name in LIBS.items():
    m = med[lib]
    line(["median", name, fmt(m and m["wall_s"], ".2f"), fmt(m and m["steps_per_s"], ".0f"),
          fmt(m and m["env_steps"], ".0f")])
print()
for peer, same in PAIRS.items():
    p, s, shipped = med[peer], med[same], med["srl"]
    if p and s:
        print(f"{LIBS[peer]}, same update shape: SRL steps/s / peer steps/s = {s['steps_per_s'] / p['steps_per_s']:.2f}"
              f"   peer wall / SRL wall = {p['wall_s'] / s['wall_s']:.2f}")
    if p and shipped:
        print(f"{LIBS[peer]} against cartpole-ppo as shipped: peer wall / SRL wall = {p['wall_s'] / shipped['wall_s']:.2f}")
print("wall: shell-timed whole command (start-up, imports, shutdown included).")
print("steps/s: SRL env steps from its first report with env steps to the end of the run;")
print("         SB3 env steps over learn() alone; SF steady, between its learner's first and last iteration.")
print("Medians and ratios use rounds that reached the target only.")
PY

exit "$fail"
