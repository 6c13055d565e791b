"""SRL and its peers on one task, the same cores and the same budget, one after another.

    source .venv/bin/activate                    # the srl of this venv is the one measured
    python benchmarks/peers/side_by_side.py --task pong --systems srl,sample-factory,rllib,sb3 \\
        --rounds 1 --window-s 120 --json pong.json

Tasks and their peers:
  pong         ALE Pong v5, DeepMind preprocessing (frame skip 4, 84x84 gray, 4 frames stacked),
               the Nature CNN: Sample Factory 2 (APPO), RLlib (PPO, new API stack), SB3 (PPO),
               PufferLib 3 (where it builds; otherwise the reason is recorded)
  halfcheetah  Gymnasium MuJoCo HalfCheetah-v5: SB3 (PPO), Sample Factory 2, RLlib
  spread       PettingZoo MPE simple_spread (mpe2.simple_spread_v3, N=3, max_cycles=25, discrete
               actions): RLlib's multi-agent PPO with one shared policy, as `spread-mappo`

Two measures (--measure, default both), each system in turn within a round, the order rotated
from round to round:
  throughput  the matched update shape (SHAPES below: the same network, sampler processes, envs,
              rollout length, batch, minibatches and epochs on every side); frames per second
              while training, over --window-s seconds that start --warmup-s after the first
              frames, between two of the system's own progress reports (its own clock).
  score       each system's own recommended config for the task (SRL: the bundled config);
              seconds from the command's start (start-up included) to the first report whose
              mean return over the last 100 episodes reaches the task's target (Pong 0,
              HalfCheetah 1,500, spread -20), at most --max-minutes (null when not reached).

Frames are env steps after frame skip, counted alike for every system: one Pong step is 4
emulator frames; on spread one env step moves all three agents (agent steps are 3x that).
SRL's env_steps count the same; each runner converts its peer's counters (see its docstring).
Which frames: SRL's and RLlib's and SB3's are the env steps sampled (SB3 and RLlib, synchronous,
train on all of them); Sample Factory's are those its learner consumed. SRL drops samples older
than its staleness bound, so the JSON and the table also give what it trained on.

Each peer runs from a venv of its own, made on first use by the setup_<peer>.sh beside this
file (under ~/.cache/srl-peers/), never in the project's venv; runners are <peer>_run.py, which
print `@progress` lines (peer_common.py). SRL runs as `srl train <config> --run-dir <temp>`
with overrides, read from the run directory's metrics.jsonl. Every process started runs in a
process group of its own and is stopped by that group's id (on Ctrl-C too); temp dirs are
removed. Nothing but loopback is used at run time (installs use the package registry).
Run on an otherwise idle machine: every side is CPU-bound.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SYSTEMS = ("srl", "sample-factory", "rllib", "sb3", "pufferlib")
PEER_PREFIX, PROGRESS_PREFIX = "@peer ", "@progress "
#: Episodes a score needs behind it before it counts (SRL's own stop rule: min(100, 10)).
MIN_EPISODES = 10
UNIT = ("env steps after frame skip, per second (Pong: 1 env step = 4 emulator frames; spread: one env "
        "step moves all 3 agents, agent steps are 3x)")


@dataclass(frozen=True)
class Shape:
    """The update shape every side trains with in the throughput measure."""
    workers: int        # sampler processes (SRL actors, SF rollout workers, RLlib env runners; SB3 has one)
    envs: int           # envs in all, spread evenly over the workers
    rollout: int        # steps per env between updates' samples (trajectory / n_steps / fragment)
    batch: int          # env steps per training batch
    minibatches: int    # minibatches per epoch
    epochs: int


@dataclass(frozen=True)
class Task:
    srl_config: str
    peers: tuple[str, ...]
    target: float
    shape: Shape
    agents: int = 1
    max_minutes: float = 10.0
    #: SRL overrides that make its network the peers' in the throughput measure.
    srl_network: tuple[str, ...] = ()


#: The one place the matched shapes live; both sides' settings derive from them.
#: Pong's is 2 samplers x 8 envs x 128 steps, minibatches of 256, 4 epochs (pong-ppo's own is
#: half the envs and batch: it learns more per frame, which the score measures), the Nature CNN
#: on pixels scaled by 1/255 on every side (pong-ppo's per-pixel normalisation off);
#: HalfCheetah's is halfcheetah-ppo's (2 x 32 envs x 32 steps, minibatches of 256, 10 epochs); spread is spread-mappo's (2 x 16 envs x 25 steps = 800 env steps = 2,400 agent
#: rows, one minibatch, 10 epochs) with a critic reading each agent's own observation, as RLlib's.
TASKS = {
    "pong": Task("pong-ppo", ("sample-factory", "rllib", "sb3", "pufferlib"), 0.0,
                 Shape(workers=2, envs=16, rollout=128, batch=2048, minibatches=8, epochs=4), max_minutes=30.0,
                 srl_network=("policy.args.obs_norm=false",)),
    "halfcheetah": Task("halfcheetah-ppo", ("sb3", "sample-factory", "rllib"), 1500.0,
                        Shape(workers=2, envs=64, rollout=32, batch=2048, minibatches=8, epochs=10)),
    "spread": Task("spread-mappo", ("rllib",), -20.0,
                   Shape(workers=2, envs=32, rollout=25, batch=800, minibatches=1, epochs=10), agents=3,
                   srl_network=("policy.args.critic_inputs=[obs]",)),
}

#: Peer name -> (setup script, runner script).
PEERS = {
    "sample-factory": ("setup_sample_factory.sh", "sf_run.py"),
    "rllib": ("setup_rllib.sh", "rllib_run.py"),
    "sb3": ("setup_sb3.sh", "sb3_run.py"),
    "pufferlib": ("setup_pufferlib.sh", None),
}


def srl_overrides(task: Task, measure: str, max_seconds: float) -> list[str]:
    """`srl train` overrides: quiet reporting every second, no checkpoints (no peer writes any), the
    time cap; throughput: the matched shape and network, no stop on return; score: stop at the target."""
    common = ["log.progress=false", "log.tensorboard=false", "log.report_interval_s=1.0",
              "checkpoint.every_s=1000000000", "stop.env_steps=1000000000000", f"stop.time_s={max_seconds:g}"]
    if measure == "score":
        return common + [f"stop.episode_return={task.target:g}"]
    s = task.shape
    return common + ["stop.episode_return=null", f"actors.count={s.workers}", f"actors.envs_per_slot={s.envs // s.workers}",
                     f"actors.trajectory_length={s.rollout}", f"trainers.batch_steps={s.batch * task.agents}",
                     f"algorithm.args.epochs={s.epochs}", f"algorithm.args.minibatches={s.minibatches}",
                     *task.srl_network]


# ---------------------------------------------------------------------------------------------
# Processes


class Proc:
    """A command in a process group of its own, its output to a log, its progress lines kept."""

    def __init__(self, cmd: list[str], log_path: Path, cwd: Path, env: dict | None = None) -> None:
        self.cmd = cmd
        self.log_path = log_path
        self.records: list[dict] = []
        self.peer: dict | None = None
        self.lock = threading.Lock()
        #: pid -> psutil.Process of each descendant seen (psutil refuses to signal a reused pid).
        self.descendants: dict = {}
        self.t_start = time.time()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, text=True, bufsize=1,
                                     env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                received = time.time()
                if line.startswith(PROGRESS_PREFIX):
                    with contextlib.suppress(ValueError):
                        record = json.loads(line[len(PROGRESS_PREFIX):])
                        record["received"] = received
                        with self.lock:
                            self.records.append(record)
                elif line.startswith(PEER_PREFIX):
                    with contextlib.suppress(ValueError):
                        self.peer = json.loads(line[len(PEER_PREFIX):])

    def new_records(self, since: int) -> list[dict]:
        with self.lock:
            return self.records[since:]

    def running(self) -> bool:
        self.note_descendants()
        return self.proc.poll() is None

    def note_descendants(self) -> None:
        """Remember every descendant, so one that left the group is still stopped by its PID."""
        try:
            import psutil
        except ImportError:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(child.pid, child)

    def stop(self, first: int = signal.SIGTERM, grace_s: float = 15.0) -> None:
        """`first` to the group leader (which stops its own children and cleans up), then SIGTERM
        and SIGKILL to the whole group, then SIGKILL to any descendant noted outside it."""
        pgid = self.proc.pid
        if self.proc.poll() is None:
            self.note_descendants()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, first)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        for child in self.descendants.values():
            with contextlib.suppress(Exception):  # psutil.Error: gone already, or the pid is another's now
                child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.reader.join(5)
        # Sample Factory shares tensors through files named torch_<pid>_* that only a clean exit removes.
        for pid in [self.proc.pid, *self.descendants]:
            for leftover in glob.glob(f"/dev/shm/torch_{pid}_*"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    def tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "".join(open(self.log_path).readlines()[-n:])
        return ""


class SrlProc(Proc):
    """`srl train`: progress comes from the run directory's metrics.jsonl."""

    def __init__(self, cmd: list[str], log_path: Path, cwd: Path, run_dir: Path, agents: int) -> None:
        super().__init__(cmd, log_path, cwd)
        self.agents = agents  # SRL's trained_steps count agent rows; env_steps count env steps
        self.metrics = run_dir / "metrics.jsonl"
        self.offset = 0
        self.partial = ""

    def new_records(self, since: int) -> list[dict]:
        if self.metrics.exists():
            with open(self.metrics) as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
            received = time.time()
            lines = (self.partial + chunk).split("\n")
            self.partial = lines.pop()
            for line in lines:
                with contextlib.suppress(ValueError):
                    m = json.loads(line)
                    self.records.append({"wall": None, "time_s": m["time_s"], "frames": m["env_steps"],
                                         "trained": None if m.get("trained_steps") is None else m["trained_steps"] / self.agents, "episodes": m.get("episodes", 0),
                                         "score": m.get("episode_return_mean"), "boundary": True,
                                         "received": received})
        return self.records[since:]

    def stop(self, first: int = signal.SIGINT, grace_s: float = 20.0) -> None:
        super().stop(first, grace_s)  # Ctrl-C: the controller stops its workers and frees their memory


# ---------------------------------------------------------------------------------------------
# Measures


def clock(record: dict) -> float:
    """The time of a record on its source's own clock."""
    return record["time_s"] if record.get("wall") is None else record["wall"]


def throughput(records: list[dict], warmup_s: float, window_s: float, partial_ok: bool = True) -> dict | None:
    """Frames/s between the first report `warmup_s` after the first frames and the first one
    `window_s` after that (iteration boundaries when the source marks them); None if too short.
    With `partial_ok`, a run that ended before the window closed counts if it covered half of it."""
    marked = [r for r in records if r.get("boundary")]
    rs = marked if len(marked) >= 2 else records
    first = next((r for r in rs if r["frames"] > 0), None)
    if first is None:
        return None
    start = next((r for r in rs if clock(r) >= clock(first) + warmup_s), None)
    if start is None:
        return None
    end = next((r for r in rs if clock(r) >= clock(start) + window_s), None)
    if end is None:  # the run ended early (or the cap came first): a window of at least half
        if not partial_ok:
            return None
        end = rs[-1]
        if clock(end) - clock(start) < window_s / 2:
            return None
    span = clock(end) - clock(start)
    out = {"frames_per_s": (end["frames"] - start["frames"]) / span, "window_s": span,
           "frames": end["frames"] - start["frames"]}
    if start.get("trained") is not None and end.get("trained") is not None:
        out["trained_frames_per_s"] = (end["trained"] - start["trained"]) / span
    return out


def reached(record: dict, target: float) -> bool:
    return record.get("score") is not None and record.get("episodes", 0) >= MIN_EPISODES and record["score"] >= target


def run_one(proc: Proc, measure: str, task: Task, args, deadline_s: float) -> dict:
    """Watches `proc` until its measure is decided (or the deadline), then stops it."""
    seen = 0
    result: dict = {"command": shlex.join(proc.cmd)}
    records: list[dict] = []
    try:
        while True:
            new = proc.new_records(seen)
            seen += len(new)
            records += new
            if measure == "score":
                hit = next((r for r in new if reached(r, task.target)), None)
                if hit is not None:
                    result["seconds_to_score"] = round(hit["received"] - proc.t_start, 2)
                    break
            elif throughput(records, args.warmup_s, args.window_s, partial_ok=False) is not None:
                break
            if not proc.running():
                time.sleep(1.0)  # the last lines
                records += proc.new_records(seen)
                seen = len(proc.records)
                if proc.proc.returncode not in (0, None) and not records:
                    result["error"] = f"exited with status {proc.proc.returncode}"
                break
            if time.time() - proc.t_start > deadline_s:
                break
            time.sleep(0.2)
    finally:
        proc.stop()
    if measure == "score":
        if "seconds_to_score" not in result:
            hit = next((r for r in records if reached(r, task.target)), None)  # in the last lines read
            result["seconds_to_score"] = round(hit["received"] - proc.t_start, 2) if hit else None
        # [seconds from the command's start, frames, mean score of the last 100 episodes]: the curve
        result["curve"] = [[round(r["received"] - proc.t_start, 1), r.get("frames"), r["score"]]
                           for r in records if r.get("score") is not None]
    else:
        window = throughput(records, args.warmup_s, args.window_s)
        result["frames_per_s"] = round(window["frames_per_s"], 1) if window else None
        if window:
            result.update({k: round(v, 1) for k, v in window.items() if k != "frames_per_s"})
    last = records[-1] if records else {}
    result.update(frames=last.get("frames"), final_score=last.get("score"), episodes=last.get("episodes"),
                  elapsed_s=round(time.time() - proc.t_start, 1))
    if proc.peer:
        result["peer"] = proc.peer
    if not records:
        result.setdefault("error", "no progress reported")
    if "error" in result or (measure == "throughput" and result["frames_per_s"] is None):
        result["log_tail"] = proc.tail()
    return result


# ---------------------------------------------------------------------------------------------
# Systems


def srl_version() -> str:
    import importlib.metadata as md

    version = md.version("really-scalable-rl")
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "srl"],
                               capture_output=True, text=True).stdout.strip()
        version += f" (git {sha}{', srl/ modified' if dirty else ''})"
    return version


def srl_command() -> list[str]:
    exe = Path(sys.executable).with_name("srl")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "srl.cli"]


def setup_peer(name: str) -> tuple[str | None, str | None]:
    """(python of the peer's venv, None) or (None, why it is skipped), in one line."""
    script, runner = PEERS[name]
    print(f"setting up {name} ({script}) ...", flush=True)
    done = subprocess.run(["bash", str(HERE / script)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
        return None, (lines[-1] if lines else f"{script} exited with status {done.returncode}")[:300]
    if runner is None:
        return None, f"{name} installed, but no runner for it exists here"
    return done.stdout.strip().splitlines()[-1], None


def start(system: str, measure: str, task: Task, task_name: str, args, python: str | None, work: Path,
          tag: str) -> Proc:
    max_seconds = args.max_minutes * 60 if measure == "score" else args.warmup_s + args.window_s + 120
    if system == "srl":
        run_dir = work / f"srl-{tag}"
        cmd = [*srl_command(), "train", task.srl_config, "--run-dir", str(run_dir),
               *srl_overrides(task, measure, max_seconds)]
        return SrlProc(cmd, work / f"{tag}.log", REPO, run_dir, task.agents)
    cmd = [python, str(HERE / PEERS[system][1]), "--task", task_name, "--mode", measure,
           "--max-seconds", f"{max_seconds:g}", "--seed", str(args.seed)]
    if measure == "throughput":
        cmd += ["--shape", json.dumps(dataclasses.asdict(task.shape))]
    # Whatever a peer leaves in its temp dir (Ray's session files when it is stopped) goes with ours;
    # the path stays short enough for the Unix sockets Ray makes under it.
    tmp = work / "t"
    tmp.mkdir(exist_ok=True)
    return Proc(cmd, work / f"{tag}.log", HERE, env=dict(os.environ, TMPDIR=str(tmp)))


# ---------------------------------------------------------------------------------------------
# Report


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(report: dict) -> None:
    """Medians per system and each peer's ratio against SRL, into the report and printed."""
    measures = report["measures"]
    cap = report["max_minutes"] * 60
    med = {}
    for system in report["systems"]:
        rows = [r for r in report["runs"] if r["system"] == system]
        if not rows:
            continue
        med[system] = {"frames_per_s": median([r.get("frames_per_s") for r in rows]),
                       # SRL drops samples staler than its bound: what it trained on, beside what it sampled
                       "trained_frames_per_s": median([r.get("throughput", {}).get("trained_frames_per_s")
                                                       for r in rows]),
                       "seconds_to_score": median([r.get("seconds_to_score") for r in rows]),
                       "rounds": len(rows),
                       "reached": sum(r.get("seconds_to_score") is not None for r in rows)}
    report["medians"] = med
    ratios = {}
    srl = med.get("srl")
    for system, m in med.items():
        if system == "srl" or srl is None:
            continue
        r = {}
        if "throughput" in measures and srl["frames_per_s"] and m["frames_per_s"]:
            r["srl_frames_per_s_over_peer"] = round(srl["frames_per_s"] / m["frames_per_s"], 2)
        if "score" in measures and srl["seconds_to_score"] is not None:
            if m["seconds_to_score"] is not None:
                r["srl_seconds_to_score_over_peer"] = round(srl["seconds_to_score"] / m["seconds_to_score"], 2)
            else:  # the peer never got there: its time is beyond the cap
                r["srl_seconds_to_score_over_peer"] = f"<{srl['seconds_to_score'] / cap:.2f}"
        ratios[system] = r
    report["ratios"] = ratios

    print(f"\n{report['task']}: medians over {report['rounds']} round(s); frames = {UNIT}")
    print(f"{'system':16} {'version':34} {'frames/s':>10} {'s to ' + format(report['target'], 'g'):>10} {'reached':>8}")
    for system, m in med.items():
        version = report["systems"][system].get("version") or ""
        fps = "-" if m["frames_per_s"] is None else f"{m['frames_per_s']:.0f}"
        sec = "-" if m["seconds_to_score"] is None else f"{m['seconds_to_score']:.1f}"
        reach = f"{m['reached']}/{m['rounds']}" if "score" in measures else ""
        trained = m["trained_frames_per_s"]
        trained = "" if trained is None else f"   (trained on {trained:.0f}/s)"
        print(f"{system:16} {version[:34]:34} {fps:>10} {sec:>10} {reach:>8}{trained}")
    for system, info in report["systems"].items():
        if info.get("skipped"):
            print(f"{system:16} skipped: {info['skipped']}")
    if ratios:
        print("\nSRL against each peer (throughput: SRL frames/s / peer's, higher is better for SRL; "
              "time to score: SRL seconds / peer's, lower is better for SRL)")
        for system, r in ratios.items():
            parts = []
            if "srl_frames_per_s_over_peer" in r:
                parts.append(f"throughput {r['srl_frames_per_s_over_peer']}x")
            if "srl_seconds_to_score_over_peer" in r:
                parts.append(f"time to score {r['srl_seconds_to_score_over_peer']}x")
            print(f"  vs {system:14} {', '.join(parts) or '-'}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--task", required=True, choices=sorted(TASKS))
    p.add_argument("--systems", default=None,
                   help=f"comma-separated subset of {','.join(SYSTEMS)} (default: srl and the task's peers)")
    p.add_argument("--measure", choices=["throughput", "score", "both"], default="both")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window-s", type=float, default=120.0, help="throughput window, seconds")
    p.add_argument("--warmup-s", type=float, default=30.0, help="seconds after the first frames before the window")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="cap on each run to the score (default: pong 30, others 10)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="OUT", help="write every run, the medians and ratios as JSON here")
    p.add_argument("--keep-logs", metavar="DIR", help="copy each run's output log here")
    p.add_argument("--plot", metavar="OUT.png", help="draw each score run's curve (score against wall time) here")
    args = p.parse_args(argv)
    task = TASKS[args.task]
    systems = ["srl", *task.peers] if args.systems is None else [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {unknown}: choose from {','.join(SYSTEMS)}")
    if args.rounds < 1 or args.window_s <= 0 or args.warmup_s < 0:
        p.error("--rounds must be >= 1, --window-s > 0, --warmup-s >= 0")
    args.systems = list(dict.fromkeys(systems))
    if args.max_minutes is None:
        args.max_minutes = task.max_minutes
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    task = TASKS[args.task]
    measures = ["throughput", "score"] if args.measure == "both" else [args.measure]

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt  # stop the current run's group and clean up, as Ctrl-C does

    signal.signal(signal.SIGTERM, on_sigterm)

    report = {"task": args.task, "unit": UNIT, "measures": measures, "rounds": args.rounds,
              "window_s": args.window_s, "warmup_s": args.warmup_s, "max_minutes": args.max_minutes,
              "target": task.target, "target_rule": f"mean return of the last 100 episodes, at least {MIN_EPISODES} episodes",
              "shape": dataclasses.asdict(task.shape) | {"agents": task.agents}, "srl_config": task.srl_config,
              "host": {"cpus": len(os.sched_getaffinity(0)), "loadavg_at_start": os.getloadavg()},
              "systems": {}, "runs": []}
    pythons: dict[str, str] = {}
    for system in args.systems:
        if system == "srl":
            report["systems"][system] = {"version": srl_version()}
        elif system not in task.peers:
            report["systems"][system] = {"skipped": f"not a peer on {args.task} (its peers: {', '.join(task.peers)})"}
        else:
            python, why = setup_peer(system)
            report["systems"][system] = {"skipped": why} if why else {"python": python}
            if python:
                pythons[system] = python
    runnable = [s for s in args.systems if s == "srl" or s in pythons]
    for system, info in report["systems"].items():
        if info.get("skipped"):
            print(f"{system}: skipped: {info['skipped']}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="sbs-"))
    interrupted = False
    try:
        for rnd in range(1, args.rounds + 1):
            shift = (rnd - 1) % max(1, len(runnable))
            order = runnable[shift:] + runnable[:shift]  # each round starts with the next system
            for system in order:
                row = {"system": system, "round": rnd}
                for measure in measures:
                    tag = f"{system}-{measure}-{rnd}"
                    deadline = (args.max_minutes * 60 + 60 if measure == "score"
                                else args.warmup_s + args.window_s + 300)
                    print(f"round {rnd}/{args.rounds}: {system} {measure} ...", flush=True)
                    proc = start(system, measure, task, args.task, args, pythons.get(system), work, tag)
                    out = run_one(proc, measure, task, args, deadline)
                    if args.keep_logs:
                        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
                        with contextlib.suppress(OSError):
                            shutil.copy(proc.log_path, Path(args.keep_logs) / f"{args.task}-{tag}.log")
                    shutil.rmtree(work / f"srl-{tag}", ignore_errors=True)
                    peer = out.pop("peer", None)
                    if peer:
                        report["systems"][system]["version"] = peer.get("version")
                        report["systems"][system]["torch"] = peer.get("torch")
                        out["settings"] = {k: v for k, v in peer.items() if k not in ("library", "version", "torch")}
                    row[measure] = out
                    row["frames_per_s" if measure == "throughput" else "seconds_to_score"] = out.get(
                        "frames_per_s" if measure == "throughput" else "seconds_to_score")
                    row["version"] = report["systems"][system].get("version")
                    shown = (f"{out.get('frames_per_s')} frames/s" if measure == "throughput"
                             else f"{out.get('seconds_to_score')} s to {task.target:g}")
                    print(f"  {system} {measure}: {shown} (frames {out.get('frames')}, score {out.get('final_score')})"
                          + (f"  ERROR {out['error']}" if "error" in out else ""), flush=True)
                    if out.get("log_tail"):
                        print("  last lines of its output:\n    " + out["log_tail"].rstrip().replace("\n", "\n    "),
                              flush=True)
                report["runs"].append(row)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: every process started was stopped", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["host"]["loadavg_at_end"] = os.getloadavg()
    if report["runs"]:
        summarize(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nwrote {args.json}")
    if args.plot and any(row.get("score", {}).get("curve") for row in report["runs"]):
        plot_curves(report, Path(args.plot))
        print(f"wrote {args.plot}")
    return 130 if interrupted else 0


def plot_curves(report: dict, out: Path) -> None:
    """Each score run's mean return against wall time from its command's start, the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row in report["runs"]:
        curve = row.get("score", {}).get("curve")
        if not curve:
            continue
        version = report["systems"].get(row["system"], {}).get("version") or ""
        label = f"{row['system']} {version.split(' ')[0]}".strip() + (f", round {row['round']}" if report["rounds"] > 1 else "")
        ax.plot([t / 60 for t, _, _ in curve], [score for _, _, score in curve], label=label)
    ax.axhline(report["target"], color="gray", linestyle="--", linewidth=1, label=f"target {report['target']:g}")
    ax.set_xlabel("minutes from the command's start")
    ax.set_ylabel("mean return, last 100 episodes")
    ax.set_title(f"{report['task']}: each system's own config, {report['host']['cpus']} cores")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
