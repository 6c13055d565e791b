"""Chaos soak: a long run with a random worker SIGKILLed every 20-60 s.

Runs `srl train CONFIG` for `--minutes` (default 30) with the return and env-step stop
rules off, and every 20-60 s (seeded) SIGKILLs one running worker of any kind, chosen at
random, by the PID status.json lists (never the controller; only a process of this run's
tree). Every second it reads status.json (worker states, restarts, the run's env steps)
and the checkpoints directory; every `--every` seconds the RSS of every process of the
run. At the end it checks and reports:

- kills by kind, and whether each recovered: the slot back to `running` under a new PID
  with its restart count up by one, within `--recover-within` seconds (downtime: kill to
  the first status that shows it so);
- env steps lost per kill: the env steps the run would have counted from the kill to 10 s
  after its recovery at its usual rate, minus those it did count. The usual rate is the
  median over the 10 s windows within 2 minutes of the kill that overlap no kill's window
  (negative: the run went faster than usual; the spread of the rate over those windows is
  reported beside it, as the noise). For a trainer kill also the policy versions rolled
  back to the checkpoint it restarted from;
- the checkpoint chain: every checkpoint seen checksums and loads with the safe loader
  when first seen, and their versions increase in the order they were written;
- memory: per worker slot (a restarted worker's new process continues its slot's series),
  growth = (mean RSS of the last 10% of samples - mean of the first 10% after warm-up)
  / the first;
- the return: best and final `episode_return_mean` in metrics.jsonl;
- a clean end: summary.json written, nothing left in /dev/shm with the run's prefix, no
  process of the run alive.

    python benchmarks/chaos_soak.py --minutes 30 --json soak.json
    python benchmarks/chaos_soak.py --config cartpole-dqn --minutes 10   # the replay graph
    python benchmarks/chaos_soak.py --minutes 3                          # a quick check
    python benchmarks/chaos_soak.py --no-kills --minutes 10 streams.when_full=drop_oldest   # memory only
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

#: Seconds after a recovery still counted in a kill's window (a replaced worker takes a
#: moment to get going); the windows the env-step rate is measured over; how far from a
#: kill they may lie to set its usual rate.
SETTLE_S, RATE_WINDOW_S, NEAR_S = 10.0, 10.0, 120.0


@dataclass
class Kill:
    t: float
    name: str
    kind: str
    pid: int
    restarts_before: int
    version_before: int | None = None
    recovered_t: float | None = None
    new_pid: int | None = None
    version_after: int | None = None
    steps_lost: float | None = None

    @property
    def downtime_s(self) -> float | None:
        return None if self.recovered_t is None else self.recovered_t - self.t


@dataclass
class Checkpoints:
    """Every checkpoint seen, in the order seen; each checked as it appears."""

    seen: dict[str, dict] = field(default_factory=dict)

    def scan(self, directory: Path, t: float) -> None:
        from srl.learn import checkpoint

        for sidecar in sorted(directory.glob("ckpt-*.json")):
            pt = sidecar.with_suffix(".pt")
            if pt.name in self.seen:
                continue
            try:
                info = checkpoint.info(pt)
                ok = checkpoint.is_valid(pt)
                if ok:
                    checkpoint.load(pt)
                error = "" if ok else "checksum does not match"
            except FileNotFoundError:
                continue  # rotated away (or not yet renamed into place) between glob and read
            except (OSError, ValueError) as exc:  # CheckpointError is a ValueError
                info, error = {}, f"{type(exc).__name__}: {exc}"[:200]
            self.seen[pt.name] = {"t": round(t, 1), "version": info.get("version"),
                                  "env_steps": info.get("env_steps"), "error": error}

    def report(self, directory: Path) -> dict:
        from srl.learn import checkpoint

        kept = {}
        for pt in sorted(directory.glob("ckpt-*.pt")):
            try:
                ok = checkpoint.is_valid(pt) and bool(checkpoint.load(pt))
            except (OSError, ValueError):
                ok = False
            kept[pt.name] = ok
        versions = [c["version"] for c in sorted(self.seen.values(), key=lambda c: c["t"])]
        return {"seen": len(self.seen), "bad": {n: c["error"] for n, c in self.seen.items() if c["error"]},
                "versions_increase": increasing(versions), "versions": versions, "kept_load": kept,
                "valid": (all(not c["error"] for c in self.seen.values()) and increasing(versions)
                          and bool(kept) and all(kept.values()))}


def increasing(values: list) -> bool:
    return all(v is not None for v in values) and all(a < b for a, b in itertools.pairwise(values))


# ---------------------------------------------------------------------------- report maths
def growth(series: list[tuple[float, float]], warmup_s: float) -> float | None:
    """(mean of the last 10% - mean of the first 10% after `warmup_s`) / the first; None if too few samples."""
    values = [v for t, v in series if t >= warmup_s]
    if len(values) < 10:
        return None
    n = max(1, len(values) // 10)
    first, last = sum(values[:n]) / n, sum(values[-n:]) / n
    return (last - first) / first if first > 0 else None


def recovered_at(kill: Kill, snapshots: list[tuple[float, dict]]) -> tuple[float, dict] | None:
    """The first status after the kill that shows the slot running again under a new PID,
    its restart count above what it was; None if none does."""
    for t, workers in snapshots:
        w = workers.get(kill.name)
        if (t > kill.t and w and w["state"] == "running" and w["pid"] not in (None, kill.pid)
                and w["restarts"] > kill.restarts_before):
            return t, w
    return None


def steps_at(steps: list[tuple[float, int]], t: float) -> float | None:
    """The run's env steps at time `t`, interpolated between the samples around it."""
    for (t0, s0), (t1, s1) in itertools.pairwise(steps):
        if t0 <= t <= t1:
            return s0 + (s1 - s0) * (t - t0) / max(t1 - t0, 1e-9)
    return None


def steps_lost(kill_t: float, end_t: float, steps: list[tuple[float, int]], rate: float) -> float | None:
    """Env steps the run would have counted from `kill_t` to `end_t` at `rate`, minus those it did count."""
    at, end = steps_at(steps, kill_t), steps_at(steps, end_t)
    return None if at is None or end is None else rate * (end_t - kill_t) - (end - at)


def clean_rates(steps: list[tuple[float, int]], busy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, env steps per second) of each `RATE_WINDOW_S` window that overlaps no `busy` span."""
    rates, t = [], steps[0][0] if steps else 0.0
    while steps and t + RATE_WINDOW_S <= steps[-1][0]:
        if all(t + RATE_WINDOW_S <= a or t >= b for a, b in busy):
            rates.append((t, (steps_at(steps, t + RATE_WINDOW_S) - steps_at(steps, t)) / RATE_WINDOW_S))
        t += RATE_WINDOW_S
    return rates


def median(values: list[float]) -> float:
    values = sorted(values)
    if not values:
        return math.nan
    return (values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2


def usual_rate(t: float, rates: list[tuple[float, float]]) -> float:
    """The median clean rate within `NEAR_S` of `t` (of the whole run if none is that near)."""
    return median([r for s, r in rates if abs(s - t) <= NEAR_S] or [r for _, r in rates])


# ---------------------------------------------------------------------------- the run
def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_processes(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def soak(args: argparse.Namespace) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="srl-chaos-"))
    run_dir = workdir / "run"
    seconds = args.minutes * 60
    warmup = args.warmup if args.warmup is not None else max(30.0, 0.1 * seconds)
    command = [sys.executable, "-m", "srl.cli", "train", args.config, "--run-dir", str(run_dir),
               f"stop.time_s={seconds}", "stop.episode_return=null", "stop.env_steps=null",
               "log.progress=false", "log.tensorboard=false", *args.overrides]
    rng = random.Random(args.seed)
    with open(workdir / "stderr.txt", "wb") as stderr:
        process = subprocess.Popen(command, cwd=workdir, start_new_session=True, stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    root = psutil.Process(process.pid)
    t0 = time.monotonic()
    snapshots: list[tuple[float, dict]] = []
    steps: list[tuple[float, int]] = []
    #: (t, pid, parent pid, process name, RSS MB); each PID is given its slot at the end.
    rss: list[tuple[float, int, int, str, float]] = []
    seen_pids: set[int] = set()
    kills: list[Kill] = []
    skipped: list[str] = []
    checkpoints = Checkpoints()
    run_id, next_kill, next_rss, started_at = "", None, 0.0, None
    try:
        while process.poll() is None and time.monotonic() - t0 < seconds + 180:
            now = time.monotonic() - t0
            status = read_json(run_dir / "status.json")
            workers = {w["name"]: w for w in status.get("workers", [])}
            run_id = status.get("run_id", run_id)
            if workers:
                snapshots.append((now, workers))
                steps.append((now, int(status.get("env_steps", 0))))
                seen_pids.update(w["pid"] for w in workers.values() if w["pid"])
            if started_at is None and workers and all(w["state"] == "running" for w in workers.values()):
                started_at = now
                next_kill = None if args.no_kills else now + rng.uniform(args.min_gap, args.max_gap)
            if now >= next_rss and workers:
                for p in run_processes(root):
                    try:
                        rss.append((now, p.pid, p.ppid(), p.name(), p.memory_info().rss / 2**20))
                    except psutil.Error:
                        continue
                    seen_pids.add(p.pid)
                next_rss = now + args.every
            if (run_dir / "checkpoints").exists():
                checkpoints.scan(run_dir / "checkpoints", now)
            if next_kill is not None and now >= next_kill and status.get("state") == "running" and now < seconds - 15:
                kill = pick_and_kill(rng, workers, status, root, now)
                if isinstance(kill, Kill):
                    kills.append(kill)
                else:
                    skipped.append(kill)
                next_kill = now + rng.uniform(args.min_gap, args.max_gap)
            time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    end_t = time.monotonic() - t0
    time.sleep(1.0)  # let the last workers' exits be reaped
    final = read_json(run_dir / "status.json")
    run_id = final.get("run_id", run_id)
    for kill in kills:
        found = recovered_at(kill, snapshots)
        if found and found[0] - kill.t <= args.recover_within:
            kill.recovered_t, kill.new_pid = found[0], found[1]["pid"]
            # the first version the replacement reported (a trainer's: its checkpoint's)
            later = [w[kill.name].get("policy_version") for t, w in snapshots if t >= found[0] and kill.name in w]
            kill.version_after = next((v for v in later if v is not None), None)
    busy = [(k.t - 1.0, (k.recovered_t or k.t + args.recover_within) + SETTLE_S) for k in kills]
    rates = clean_rates(steps, busy)
    for kill, (_, end) in zip(kills, busy):
        if kill.recovered_t is not None:
            kill.steps_lost = steps_lost(kill.t, end, steps, usual_rate(kill.t, rates))
    rate_values = [r for _, r in rates]
    rate_mean = sum(rate_values) / len(rate_values) if rate_values else math.nan
    rate_std = (sum((r - rate_mean) ** 2 for r in rate_values) / len(rate_values)) ** 0.5 if rate_values else math.nan
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    returns = [m["episode_return_mean"] for m in metrics if m.get("episode_return_mean") is not None]
    summary = read_json(run_dir / "summary.json")
    left_shm = [p for p in os.listdir("/dev/shm") if run_id and p.startswith(f"srl_{run_id}_")]
    alive = [pid for pid in seen_pids if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and is_ours(pid, run_dir, workdir)]
    # A PID's slot: the worker status.json ever listed it as (a replacement continues its
    # slot's series), the controller, or `<parent's slot>/<name> (pid)` for a helper process.
    owner = {w["pid"]: name for _, ws in snapshots for name, w in ws.items() if w["pid"]}
    owner[final.get("controller_pid", root.pid)] = "controller"
    series: dict[str, list[tuple[float, float]]] = {}
    for t, pid, ppid, name, mb in rss:
        slot = owner.get(pid) or f"{owner.get(ppid, 'other')}/{name} (pid {pid})"
        series.setdefault(slot, []).append((t, mb))
    memory = {slot: {"first_mb": round(xs[0][1], 1), "last_mb": round(xs[-1][1], 1),
                     "peak_mb": round(max(v for _, v in xs), 1), "growth": growth(xs, warmup),
                     "samples": len(xs)} for slot, xs in sorted(series.items())}
    result = {
        "command": " ".join(["srl", *command[3:]]).replace(str(run_dir), "RUN"),
        "config": args.config, "minutes": args.minutes, "seed": args.seed, "warmup_s": warmup,
        "kills": [{**asdict(k), "downtime_s": k.downtime_s} for k in kills], "skipped_kills": skipped,
        "kills_by_kind": count_by(k.kind for k in kills),
        "restarts": {name: w["restarts"] for name, w in ((w["name"], w) for w in final.get("workers", []))},
        "all_recovered": all(k.recovered_t is not None for k in kills),
        "rate_mean": rate_mean, "rate_std_10s": rate_std, "clean_rate_windows": len(rate_values),
        "checkpoints": checkpoints.report(run_dir / "checkpoints"),
        "memory": memory,
        "max_growth": max((m["growth"] for m in memory.values() if m["growth"] is not None), default=None),
        "return_best": max(returns, default=None), "return_final": returns[-1] if returns else None,
        "return_threshold": args.return_threshold,
        "summary": summary, "clean": {"summary": bool(summary), "shm_left": left_shm, "alive": alive,
                                      "private_dir_left": bool(final.get("private_dir"))
                                      and os.path.exists(final["private_dir"])},
        "wall_s": round(end_t, 1),
        "stderr_tail": (workdir / "stderr.txt").read_text(errors="replace")[-3000:],
    }
    result["passed"] = bool(result["all_recovered"] and (kills or args.no_kills) and result["checkpoints"]["valid"]
                            and result["max_growth"] is not None and result["max_growth"] < 0.05
                            and (result["return_best"] or 0) >= args.return_threshold
                            and summary and not left_shm and not alive and not result["clean"]["private_dir_left"])
    if args.keep:
        result["run_dir"] = str(run_dir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def is_ours(pid: int, run_dir: Path, workdir: Path) -> bool:
    """Whether a live PID is still a process of this run (not a stranger that reused the PID)."""
    try:
        p = psutil.Process(pid)
        return p.cwd().startswith(str(workdir)) or any(str(run_dir) in part for part in p.cmdline())
    except psutil.Error:
        return False


def pick_and_kill(rng: random.Random, workers: dict, status: dict, root: psutil.Process, now: float) -> Kill | str:
    """SIGKILL one running worker at random; a Kill, or why none was killed."""
    ours = {p.pid for p in run_processes(root)}
    running = sorted(n for n, w in workers.items() if w["state"] == "running" and w["pid"] in ours
                     and w["pid"] != status.get("controller_pid"))
    if not running:
        return f"{now:.0f} s: no running worker of this run to kill"
    name = rng.choice(running)
    w = workers[name]
    try:
        os.kill(w["pid"], signal.SIGKILL)
    except ProcessLookupError:
        return f"{now:.0f} s: {name} (pid {w['pid']}) was already gone"
    return Kill(now, name, w["kind"], w["pid"], w["restarts"], w.get("policy_version"))


def count_by(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def fmt(value, spec: str = ".1f", none: str = "-") -> str:
    return none if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def markdown(r: dict) -> str:
    lines = [f"`{r['command']}` (kill seed {r['seed']}, {r['wall_s']:.0f} s)", "",
             "| kill at s | worker | downtime s | recovered | env steps lost | version before -> after |",
             "|---:|---|---:|---|---:|---|"]
    for k in r["kills"]:
        lines.append(f"| {k['t']:.0f} | {k['name']} | {fmt(k['downtime_s'])} | {'yes' if k['recovered_t'] else 'NO'} "
                     f"| {fmt(k['steps_lost'], ',.0f')} | {fmt(k['version_before'], 'd')} -> {fmt(k['version_after'], 'd')} |")
    lines += ["", (f"kills by kind: {r['kills_by_kind']}; restarts at the end: {r['restarts']}; "
              f"every kill recovered: {r['all_recovered']}"),
              (f"env-step rate away from kills: {fmt(r['rate_mean'], ',.0f')}/s, "
              f"std {fmt(r['rate_std_10s'], ',.0f')}/s over {r['clean_rate_windows']} windows of 10 s"), "",
              "| process slot | RSS first MB | last MB | peak MB | growth after warm-up |", "|---|---:|---:|---:|---:|"]
    for slot, m in r["memory"].items():
        lines.append(f"| {slot} | {m['first_mb']:.1f} | {m['last_mb']:.1f} | {m['peak_mb']:.1f} "
                     f"| {fmt(None if m['growth'] is None else 100 * m['growth'], '+.1f')}% |")
    c = r["checkpoints"]
    lines += ["", (f"checkpoints: {c['seen']} seen, bad {c['bad'] or 'none'}, versions increase: "
              f"{c['versions_increase']}, kept ones load: {c['kept_load']}"),
              (f"return: best {fmt(r['return_best'])}, final {fmt(r['return_final'])} "
              f"(threshold {r['return_threshold']}); env steps {r['summary'].get('env_steps', 0):,}, "
              f"stop: {r['summary'].get('stop_reason')}"),
              (f"clean end: summary {r['clean']['summary']}, /dev/shm left {r['clean']['shm_left'] or 'none'}, "
              f"processes left {r['clean']['alive'] or 'none'}, private dir left {r['clean']['private_dir_left']}"),
              f"passed: {r['passed']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value overrides for the run")
    parser.add_argument("--config", default="cartpole-ppo", help="cartpole-dqn for the replay graph")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0, help="seeds which worker is killed when")
    parser.add_argument("--min-gap", type=float, default=20.0, help="seconds between kills, at least")
    parser.add_argument("--max-gap", type=float, default=60.0, help="seconds between kills, at most")
    parser.add_argument("--no-kills", action="store_true", help="kill nothing: a plain memory soak")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--warmup", type=float, help="seconds of RSS left out of growth (default: 10%%, >= 30 s)")
    parser.add_argument("--recover-within", type=float, default=60.0, help="seconds a kill has to recover")
    parser.add_argument("--return-threshold", type=float, default=475.0)
    parser.add_argument("--json", metavar="FILE", help="write the full report here")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_intermixed_args(argv)
    result = soak(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(markdown(result))
    return result


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:])["passed"] else 1)
