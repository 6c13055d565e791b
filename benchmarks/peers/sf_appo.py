"""Peer benchmark: Sample Factory APPO on CartPole-v1, trained until it is solved.

Runs in its own venv (see setup_sample_factory.sh), never in the project's:

    PY=$(bash benchmarks/peers/setup_sample_factory.sh)
    $PY benchmarks/peers/sf_appo.py --json sf.json

Settings: asynchronous PPO (APPO) as Sample Factory ships it, no RNN, a 64-64 tanh MLP,
2 rollout workers x 16 envs, rollout 32, batch 512, lr 1e-3, gamma 0.99 and gae_lambda 0.95
as `srl train cartpole-ppo`, reward_scale 0.1 as Sample Factory's own CartPole example, its
defaults otherwise (one epoch a batch, clip 0.1, entropy 0.003, normalised inputs and
returns), on CPU. Training stops as soon as the mean return of the last 100
finished episodes reaches --target (with at least 10 episodes finished, SRL's rule), or after
--max-steps env steps, or after --time-limit seconds of training.

Sample Factory has no stop-on-return of its own: an observer in the runner process reads the
runner's own window of episode returns (`--stats_avg 100`, raw returns before reward_scale)
after every training iteration and stops the run there.

wall_time_s counts from process start, imports and shutdown of the worker processes included;
train_time_s is the runner's init and event loop; steps_per_s is steady throughput, env steps counted
by the learner between its first and last training iteration (process start-up excluded).
Everything Sample Factory writes goes to a temporary train_dir, removed at exit, and every
process it started is stopped at exit: on error, on SIGTERM, and when a watchdog fires
(--time-limit + 120 s; Sample Factory hangs rather than fails when a worker cannot start).
"""

import time

T0 = time.perf_counter()  # first thing: wall time includes every import below

import argparse  # noqa: E402
import contextlib  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

RETURN_WINDOW = 100  # episodes in the running mean, as SRL's controller
MIN_EPISODES = 10  # SRL stops on the window only once it holds min(100, 10) episodes
ENV_NAME = "CartPole-v1"


def quiet_sample_factory() -> None:
    """Sample Factory logs at DEBUG in every process; keep warnings and errors only.

    Its logger is set up when its utils module is imported, so import that first and then
    lower it; spawned workers run this too (below), before they unpickle anything of SF's.
    """
    import logging
    import warnings

    from sample_factory.utils.utils import log

    log.setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")  # gymnasium's deprecation notes for SF's wrapper lookups


if __name__ == "__mp_main__" and "--verbose" not in sys.argv:
    quiet_sample_factory()  # a spawned worker importing this script as its main module


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=float, default=475.0, help="stop at this mean return of the last 100 episodes")
    p.add_argument("--max-steps", type=int, default=2_000_000, help="stop after this many env steps")
    p.add_argument("--time-limit", type=int, default=600, help="stop after this many seconds of training")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2, help="rollout worker processes")
    p.add_argument("--envs-per-worker", type=int, default=16)
    p.add_argument("--rollout", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=None, help="seed for Sample Factory (default: random)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    p.add_argument("--smoke", action="store_true", help="a few thousand steps only, to check the setup")
    p.add_argument("--verbose", action="store_true", help="keep Sample Factory's own log")
    return p.parse_args(argv)


def make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    """Env factory; module level so spawned workers can unpickle it by reference."""
    import gymnasium as gym

    return gym.make(full_env_name, render_mode=render_mode)


def sf_argv(args, train_dir: str, max_steps: int) -> list:
    """Sample Factory's command line: the settings above plus quiet, checkpoint-free output."""
    flags = {
        "algo": "APPO",
        "env": ENV_NAME,
        "experiment": "cartpole",
        "train_dir": train_dir,
        "restart_behavior": "overwrite",
        "device": "cpu",
        "use_rnn": False,
        "recurrence": 1,
        "with_vtrace": False,
        "num_workers": args.workers,
        "num_envs_per_worker": args.envs_per_worker,
        "worker_num_splits": 2 if args.envs_per_worker % 2 == 0 else 1,
        "rollout": args.rollout,
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "reward_scale": 0.1,
        "nonlinearity": "tanh",
        "stats_avg": RETURN_WINDOW,
        "train_for_env_steps": max_steps,
        "train_for_seconds": args.time_limit,
        # checkpoints and summaries would only cost time: the result is what this script prints
        "save_every_sec": 10**6,
        "save_best_every_sec": 10**6,
        "save_best_after": 10**12,
        "experiment_summaries_interval": 10**6,
        "log_to_file": False,
        "with_wandb": False,
    }
    argv = [f"--{k}={v}" for k, v in flags.items()]
    argv += ["--encoder_mlp_layers", "64", "64"]
    if args.seed is not None:
        argv.append(f"--seed={args.seed}")
    return argv


def main(argv=None) -> int:
    args = parse_args(argv)
    max_steps = 4000 if args.smoke else args.max_steps

    import numpy as np
    import psutil
    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner

    if not args.verbose:
        quiet_sample_factory()

    me = psutil.Process()
    started: dict = {}  # pid -> psutil.Process of every descendant seen, to stop at exit

    def note_children() -> None:
        for child in me.children(recursive=True):
            try:
                if any("resource_tracker" in part for part in child.cmdline()):
                    continue  # Python's own helper: it exits with this process, killing it early warns
            except psutil.Error:
                continue
            started.setdefault(child.pid, child)

    class StopAtReturn(AlgoObserver):
        """Stops the run when the runner's window of episode returns reaches the target."""

        def __init__(self) -> None:
            self.reached = False
            self.first = None  # (time, env steps) at the first training iteration
            self.last = None

        def returns(self, runner) -> list:
            stats = runner.policy_avg_stats.get("reward")
            return list(stats[0]) if stats else []

        def on_start(self, runner) -> None:
            note_children()

        def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
            point = (time.perf_counter(), runner.env_steps.get(0, 0))
            if self.first is None:
                self.first = point
                note_children()
            self.last = point
            episodes = self.returns(runner)
            if len(episodes) >= min(MIN_EPISODES, RETURN_WINDOW) and np.mean(episodes) >= args.target:
                self.reached = True
                runner._stop_training()  # Sample Factory's own clean stop, as its step/time limits use

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)  # unwinds into the finally below, which stops the workers

    signal.signal(signal.SIGTERM, on_signal)
    # the watchdog: well after Sample Factory's own time limit would have stopped a healthy run
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(args.time_limit + 120)

    register_env(ENV_NAME, make_cartpole)
    train_dir = tempfile.mkdtemp(prefix="sf-appo-")
    observer = StopAtReturn()
    status = ExperimentStatus.FAILURE
    try:
        sf_args = sf_argv(args, train_dir, max_steps)
        parser, _ = parse_sf_args(argv=sf_args)
        cfg = parse_full_cfg(parser, sf_args)
        cfg, runner = make_runner(cfg)
        runner.register_observer(observer)
        t_train = time.perf_counter()
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
        train_time = time.perf_counter() - t_train
        episodes = observer.returns(runner)
        env_steps = int(runner.env_steps.get(0, 0))
    finally:
        signal.alarm(0)
        note_children()
        for proc in started.values():
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(list(started.values()), timeout=5)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(train_dir, ignore_errors=True)
        # Sample Factory shares tensors through torch's file_system strategy: segments named
        # torch_<creator pid>_* that only a clean exit removes. Ours were stopped, so sweep them.
        for pid in [os.getpid(), *started]:
            for leftover in glob.glob(f"/dev/shm/torch_{pid}_*"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    steady = None
    if observer.first and observer.last and observer.last[0] > observer.first[0]:
        (t1, s1), (t2, s2) = observer.first, observer.last
        steady = round((s2 - s1) / (t2 - t1), 1)
    result = {
        "library": "sample-factory",
        "wall_time_s": round(time.perf_counter() - T0, 3),
        "train_time_s": round(train_time, 3),
        "env_steps": env_steps,
        "steps_per_s": steady,
        "episode_return_mean": round(float(np.mean(episodes)), 2) if episodes else None,
        "episodes": len(episodes),
        "reached": observer.reached,
        "status": int(status),
    }
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if status == ExperimentStatus.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())
