"""`srl bench`: how close an experiment runs to the compute limit of this machine.

Five measurements, each on the same N cores (N processes, one torch thread each, rates
summed); E, I and L are `srl.measure`'s, which `auto` layouts use too:

* E — env steps/s of the experiment's env with random actions (no policy; a Gymnasium env
  stepped by Gymnasium itself, without SRL's adapter);
* I — samples/s of the policy's forward pass alone on recorded observations, at the batch
  size the policy workers (or inline actors) actually reach;
* L — env steps/s the algorithm's training step absorbs, fed from an in-memory batch;
* S — the real system sampling (actors + policy workers; the trainer runs the no-op algorithm);
* T — the real training run, counting the env steps the trainers learned from (samples
  dropped as too stale are not throughput).

Replay graphs (a `buffer` group between actors and trainers) are measured the same way, with
the replay ratio r (updates per env step) saying what an update is worth: L is updates/s / r
on batches sampled from a real `ReplayBuffer` filled with recorded observations; S runs the
whole graph (actors, buffers and a no-op trainer) with buffers that store every sample and
draw no batch, so storing counts against sampling; T counts updates / r (the buffers hold
the ratio) and pays for drawing the batches.

Since the cores are shared, limit_S = 1 / (1/E + 1/I) and limit_T = 1 / (1/E + 1/I + 1/L);
efficiency = measured / limit. 1.0 means the system adds no cost of its own.

E, I and L are measured in half-length windows before S, between S and T, and after T (all
cores measuring the same part at once), and each limit takes the mean of the windows on either
side of its own run: the speed of a shared or virtual box drifts within a minute, and only
the drift that is the same on both sides of a run cancels out of its efficiency. The table's
E, I and L are the means over all windows; `--json` has each window.

limit_T assumes the learning spreads over all N cores. A run's trainer group is
`trainers.count` processes of `placement.threads` threads, so it also reports the limit with
the configured trainers (`trainer_limit`) and T's efficiency against it: min(limit_T,
min(count * threads, N) * L / N) for single-thread trainers; for trainers of several threads,
whose threads do not add up as L's processes do, from their own rate and CPU measured alone
(Lc, Uc) and the CPU the box gives L's processes (Ul).
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from srl.api.config import ExperimentConfig
from srl.api.run_paths import RunPaths
from srl.launch.metrics import RunMetrics
from srl.measure import MeasurementError, env_rate, gather, in_step, inference_rate, learner_rate
from srl.prepare import prepare

#: Seconds after the first env steps before the steady-state window opens.
WARMUP_S = 1.0
#: Run time allowed for start-up before the measured window; a start-up that takes longer
#: (a slow or busy box) moves the window later rather than eating into it, ...
STARTUP_ALLOWANCE_S = 4.0
#: ... up to this many seconds with no env steps at all, when the run is given up.
STARTUP_LIMIT_S = 180.0


def _isolated_rates(config: ExperimentConfig, data: dict[str, Any], cores: int, seconds: float,
                    batch: int | None = None) -> dict[str, float]:
    """E, I (at `batch`; left out when None) and L, each for `seconds` on `cores` processes; and,
    where a trainer has several threads, Lc: the configured trainers alone (see `trainer_limit`)."""
    per_process = max(1, config.actors.envs_per_slot)
    threads = config.trainers.placement.threads
    trainers = min(config.trainers.count, cores)

    def parts(i: int) -> dict[tuple[str, ...], tuple[Any, tuple[Any, ...]]]:
        """Process i's measurements by the names of what each puts, in the order they run."""
        named = {("E",): (env_rate, (data["env"], per_process, seconds, config.seed + i))}
        if batch is not None:
            named[("I",)] = (inference_rate, (data, batch, seconds))
        if threads == 1:
            named[("L",)] = (learner_rate, (data, seconds))
        else:  # the configured trainers' own rate and cores, and the cores the box gives L's N processes
            named[("L", "Ul")] = (functools.partial(learner_rate, report_cores=True), (data, seconds))
            trainer = functools.partial(learner_rate, threads=threads, report_cores=True)
            named[("Lc", "Uc")] = (trainer, (data, seconds)) if i < trainers else (_pause, (seconds, 2))
        return named

    names = [name for names in parts(0) for name in names]
    barrier = mp.get_context("spawn").Barrier(cores)
    rates = gather(in_step, lambda i: (list(parts(i).values()), barrier), cores)
    return {name: float(sum(r[k] for r in rates)) for k, name in enumerate(names)}


def _pause(seconds: float, figures: int, queue: Any) -> None:
    """A core left idle while the others measure (0 to each of the sums they put)."""
    time.sleep(seconds)
    for _ in range(figures):
        queue.put(0.0)


def trainer_limit(rates: dict[str, float], cores: int, count: int, threads: int) -> tuple[float, float, float]:
    """(the training limit with the configured trainers, their own learner rate L_c, the cores c).

    `trainers.count` processes of `placement.threads` threads keep c cores busy while they
    learn, at L_c env steps/s, on a box whose cores give C cores' worth of time. Where a
    trainer has several threads all three are measured, since torch's threads neither add up
    as processes do nor keep every core busy: L_c and c with the trainers alone ("Lc", "Uc":
    CPU time over wall time), C as the CPU of L's N processes ("Ul": N on a quiet box, less
    beside another's busy process or under a CPU quota). Else c = min(count, N), L_c = c · L / N
    (L's N processes have one thread each) and C = N. Per env step the trainers take c / L_c
    core-seconds and sampling C/E + C/I, and no layout beats limit_T, so

        T <= min(limit_T, L_c, C / (c/L_c + C/E + C/I)),

    which for single-thread trainers is min(limit_T, c · L / N)."""
    capacity = rates.get("Ul") or cores
    c = min(rates.get("Uc") or count * threads, count * threads, cores)
    learner = rates.get("Lc") or c * rates["L"] / cores
    turns = capacity / (c / learner + capacity / rates["E"] + capacity / rates["I"])
    return min(_in_turn(rates["E"], rates["I"], rates["L"]), learner, turns), learner, c


def _in_turn(*rates: float) -> float:
    """The rate of parts that take turns on the same cores: 1 / (1/r1 + 1/r2 + ...)."""
    return 1.0 / sum(1.0 / r for r in rates)


# ------------------------------------------------------------------------ the real system
class MeasuredWindow:
    """The stop rule (`srl.launch.metrics.StopRule`) of a measured run: `seconds` after
    start-up, where start-up ends at `startup_s` or when the env steps first flow, whichever is
    later. Worker processes start slowly on a busy machine, and that time is not throughput."""

    def __init__(self, seconds: float, startup_s: float) -> None:
        self.seconds = seconds
        self.startup_s = startup_s
        self.flowing_since: float | None = None

    def reason(self, metrics: RunMetrics, env_steps: int, elapsed: float) -> str | None:
        if self.flowing_since is None and env_steps > 0:
            self.flowing_since = elapsed
        if self.flowing_since is None:
            return f"no env steps in {STARTUP_LIMIT_S:.0f} s" if elapsed >= STARTUP_LIMIT_S else None
        if elapsed >= max(self.startup_s, self.flowing_since) + self.seconds:
            return f"measured {self.seconds:.1f} s"
        return None


def system_rate(config_data: dict[str, Any], seconds: float, sampling_only: bool,
                startup_s: float = STARTUP_ALLOWANCE_S) -> tuple[float, dict[str, Any]]:
    """Steady env steps/s of a real local run, after start-up and a short warm-up."""
    from srl.launch.controller import Controller

    data = json.loads(json.dumps(config_data))
    # A config must say when it stops; `MeasuredWindow` (given to the controller) decides instead.
    data["stop"] = {"time_s": STARTUP_LIMIT_S + seconds}
    data.setdefault("log", {}).update({"tensorboard": False, "progress": False, "report_interval_s": 0.5})
    if sampling_only:
        # The algorithm's own graph (replay buffers included), with trainers that learn nothing.
        trainer = data.setdefault("workers", {}).setdefault("trainer", {})
        trainer.setdefault("settings", {})["algorithm"] = {"type": "noop", "args": {}}
        # Replay buffers store what the actors send and draw no batch: drawing is the learner's
        # side, measured by T (and with no batch drawn, no replay ratio can hold the actors back).
        data["replay"].update(replay_ratio=None, learning_starts=2**62)
    run = prepare(data)
    with tempfile.TemporaryDirectory(prefix="srl-bench-") as run_dir:
        summary = Controller(run.config, run.graph, Path(run_dir) / "run", stop_rules=MeasuredWindow(seconds, startup_s)).run()
        if summary.get("stop_reason") == "interrupted":
            raise KeyboardInterrupt  # Ctrl-C stops the whole bench, not just the run being measured
        paths = RunPaths(Path(run_dir) / "run")
        records = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
        status = json.loads(paths.status.read_text())
    flowing = [r for r in records if r["env_steps"] > 0]
    if not flowing:
        raise MeasurementError(f"the {'sampling' if sampling_only else 'training'} run produced no env steps")
    # Steady state: from WARMUP_S after the first env steps to the end.
    steady = [r for r in flowing if r["time_s"] >= flowing[0]["time_s"] + WARMUP_S]
    if len(steady) < 2:
        steady = flowing
    if not sampling_only:
        # Training counts the env steps the trainers learned from (samples dropped as too stale
        # were work wasted, not throughput). They grow a batch at a time, so the rate is taken
        # between the first and the last report that saw a new batch.
        changes = [r for a, r in zip(steady, steady[1:]) if r["trained_steps"] > a["trained_steps"]]
        if len(changes) < 2:
            raise MeasurementError(f"the training run completed fewer than two training steps after its "
                                   f"warm-up in {seconds:.0f} s; give it more time (--seconds)")
        steady, counted = changes, "trained_steps"
    else:
        counted = "env_steps"
    first, last = steady[0], steady[-1]
    rate = (last[counted] - first[counted]) / max(last["time_s"] - first["time_s"], 1e-9)
    return rate, status


def _reached_batch(config: ExperimentConfig, status: dict[str, Any]) -> int:
    """The inference batch the system reached: policy workers' mean, or an inline actor's slot."""
    batches = [w.get("mean_batch") for w in status["workers"] if w.get("group", w["kind"]) == "policy" and w.get("mean_batch")]
    if batches:
        return max(1, int(round(float(np.mean(batches)))))
    from srl.api.components import make_env

    env = make_env(config.env)
    agents = len(env.agent_ids)
    env.close()
    return config.actors.envs_per_slot * agents


def frame_skip_of(config: ExperimentConfig) -> int:
    args = config.env.args or {}
    return int(args.get("frame_skip", 4 if config.env.type == "atari" else 1))


def run_bench(config: ExperimentConfig, seconds: float, cores: int | None = None) -> dict[str, Any]:
    # Simulators may write files into the working directory (VizDoom, MuJoCo's warning log):
    # measure from a scratch directory so nothing lands in the user's.
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="srl-bench-cwd-") as scratch:
        os.chdir(scratch)
        try:
            return _run_bench(config, seconds, cores)
        finally:
            os.chdir(here)


def _run_bench(config: ExperimentConfig, seconds: float, cores: int | None) -> dict[str, Any]:
    cores = cores or os.cpu_count() or 1
    data = config.model_dump(mode="json")
    # The isolated parts are measured right before and right after each system run, in
    # half-length windows, and each limit uses the ones around its own run: a box's speed can
    # drift by a fifth within a minute, and a limit measured a minute away from its run turned
    # that drift into the efficiency.
    before = _isolated_rates(config, data, cores, seconds / 2)
    S, sampling_status = system_rate(data, seconds, sampling_only=True)
    batch = _reached_batch(config, sampling_status)
    between = _isolated_rates(config, data, cores, seconds / 2, batch)
    # Long enough for about ten training steps of one trainer, however slow its learner.
    batch_seconds = config.trainers.batch_steps / (_mean(before, between, key="L") / cores)
    T, _ = system_rate(data, max(seconds, 10 * batch_seconds), sampling_only=False)
    after = _isolated_rates(config, data, cores, seconds / 2, batch)
    around_s = {"E": _mean(before, between, key="E"), "I": between["I"]}
    around_t = {key: _mean(between, after, key=key) for key in between if key in after}
    limit_s = _in_turn(around_s["E"], around_s["I"])
    limit_t = _in_turn(around_t["E"], around_t["I"], around_t["L"])
    # limit_T spreads the learning over all N cores; the run's trainers may hold fewer, or
    # learn slower on them than N single-thread learners do.
    threads = config.trainers.placement.threads
    limit_configured, trainer_rate, trainer_cores = trainer_limit(around_t, cores, config.trainers.count, threads)
    return {
        "config": config.name, "cores": cores, "seconds": seconds, "inference_batch": batch,
        "frame_skip": frame_skip_of(config),
        "env_steps_per_s": _mean(before, between, after, key="E"),
        "inference_steps_per_s": _mean(between, after, key="I"),
        "learner_steps_per_s": _mean(before, between, after, key="L"),
        "isolated": {"before_sampling": before, "between": between, "after_training": after},
        "around_sampling": around_s, "around_training": around_t,
        "sampling_steps_per_s": S, "training_steps_per_s": T,
        "sampling_limit": limit_s, "training_limit": limit_t,
        "sampling_efficiency": S / limit_s, "training_efficiency": T / limit_t,
        "trainers": config.trainers.count, "trainer_threads": threads, "trainer_cores": trainer_cores,
        "trainer_limit": trainer_rate, "trainer_limit_measured": "Lc" in around_t,
        "training_limit_configured": limit_configured, "training_efficiency_configured": T / limit_configured,
    }


def _mean(*rates: dict[str, float], key: str) -> float:
    return float(np.mean([r[key] for r in rates]))


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    skip = result["frame_skip"]
    table = Table(title=f"srl bench {result['config']} ({result['cores']} cores, inference batch {result['inference_batch']})")
    table.add_column("measure")
    table.add_column("steps/s", justify="right")
    if skip > 1:
        table.add_column("frames/s", justify="right")
    rows = [("E  env, random actions", "env_steps_per_s"), ("I  policy forward pass", "inference_steps_per_s"),
            ("L  learner", "learner_steps_per_s"), ("S  system, sampling", "sampling_steps_per_s"),
            ("T  system, training", "training_steps_per_s"), ("limit_S = 1/(1/E+1/I)", "sampling_limit"),
            ("limit_T = 1/(1/E+1/I+1/L)", "training_limit")]
    for label, key in rows:
        cells = [label, f"{result[key]:,.0f}"] + ([f"{result[key] * skip:,.0f}"] if skip > 1 else [])
        table.add_row(*cells)
    n, used, N = result["trainers"], result["trainer_cores"], result["cores"]
    limit = result["training_limit_configured"]
    if result.get("trainer_limit_measured"):
        # Several threads a trainer: the trainers' own rate, measured alone, and the cores they kept busy.
        lc = result["trainer_limit"]
        table.add_row(f"Lc {n} trainer(s) of {result['trainer_threads']} threads alone", f"{lc:,.0f}",
                      *([f"{lc * skip:,.0f}"] if skip > 1 else []))
        C = result["around_training"]["Ul"]
        formula = f"min(limit_T, Lc, {C:.2f}/({used:.2f}/Lc+{C:.2f}/E+{C:.2f}/I))"
    else:
        formula = f"min(limit_T, {used}·L/{N})"
    table.add_row(f"limit with {n} trainer(s) = {formula}", f"{limit:,.0f}",
                  *([f"{limit * skip:,.0f}"] if skip > 1 else []))
    for label, key in (("sampling efficiency S/limit_S", "sampling_efficiency"),
                       ("training efficiency T/limit_T", "training_efficiency"),
                       (f"training efficiency, {n} trainer(s)", "training_efficiency_configured")):
        table.add_row(label, f"{result[key]:.2f}", *([""] if skip > 1 else []))
    Console(width=120).print(table)
    print("E, I, L: means of the windows before, between and after the system runs; each limit uses the "
          "windows around its own run (--json: around_sampling, around_training)")
