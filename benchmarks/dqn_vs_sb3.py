"""Wall-clock time to a mean return of 475 on CartPole-v1: Stable-Baselines3 DQN vs `srl train`.

Measured, per seed, in one sitting, the two sides alternating (sb3 seed 0, srl seed 0,
sb3 seed 1, ...) so machine noise hits both alike:

* sb3: DQN in this process with the RL Zoo's CartPole-v1 hyper-parameters (below; checked
  against DLR-RM/rl-baselines3-zoo `hyperparams/dqn.yml` at commit ce95481b, where the entry is
  marked "Almost Tuned"). One env (`make_vec_env`, Monitor-wrapped, as the zoo does), torch
  left at its default thread count (recorded). The clock starts before the env and `DQN(...)`
  are built (torch and SB3 already imported) and stops inside the callback at the first step
  where the mean of the last 100 training-episode returns (Monitor's `r`, the values SB3 keeps
  in `ep_info_buffer`) is >= 475 with 100 episodes seen. `exploration_fraction` is rescaled to
  0.16 * 5e4 / max_steps so epsilon still reaches 0.04 after 8000 steps, as in the zoo's run. Up to `--sb3-max-steps` env steps,
  else "not reached".
* srl: `python -m srl.cli train CONFIG --run-dir TMP seed=N log.progress=false
  log.tensorboard=false` as a subprocess (its own stop rule: mean of the last 100 episodes
  >= 475; note srl may stop once 10 episodes are in the window, so `episodes` is reported).
  Clock: process start to exit, so interpreter start, imports and worker start-up count.
  Env steps, episodes and stop reason come from the run's `summary.json` (else the last line
  of `metrics.jsonl`).

SB3 is not a dependency of srl; install it for this benchmark only (it keeps the installed
torch): `pip install stable-baselines3`. Nothing is downloaded at run time.

    python benchmarks/dqn_vs_sb3.py --seeds 0 1 2 --out results.json
    python benchmarks/dqn_vs_sb3.py --only sb3                 # baseline only
    python benchmarks/dqn_vs_sb3.py --only srl --srl-config cartpole-ppo
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 475.0
WINDOW = 100
#: rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4 there; we run to the target).
SB3_HYPERPARAMS: dict[str, Any] = {
    "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000, "gamma": 0.99,
    "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128, "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]}}
ZOO_TIMESTEPS = 50_000
EXPLORATION_STEPS = SB3_HYPERPARAMS["exploration_fraction"] * ZOO_TIMESTEPS


def run_sb3(seed: int, max_steps: int) -> dict[str, Any]:
    try:
        import torch
        from stable_baselines3 import DQN
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as exc:
        sys.exit(f"dqn_vs_sb3: Stable-Baselines3 is needed for the sb3 side ({exc}); "
                 "install it with `pip install stable-baselines3`, or pass --only srl")

    class StopAtTarget(BaseCallback):
        def __init__(self, start: float) -> None:
            super().__init__()
            self.start, self.returns = start, collections.deque(maxlen=WINDOW)
            self.hit: dict[str, Any] | None = None

        def _on_step(self) -> bool:
            # SB3 fills ep_info_buffer after this call, so read the same Monitor values here.
            self.returns.extend(info["episode"]["r"] for info in self.locals["infos"] if "episode" in info)
            if self.num_timesteps % 50_000 == 0:  # a sign of life on long runs
                print(f"  sb3 {self.num_timesteps:,} steps, {time.perf_counter() - self.start:.0f} s, mean return "
                      f"{statistics.fmean(self.returns or [0.0]):.1f}", file=sys.stderr, flush=True)
            if len(self.returns) == WINDOW and statistics.fmean(self.returns) >= TARGET:
                self.hit = {"time_s": time.perf_counter() - self.start, "env_steps": self.num_timesteps}
                return False
            return True

    start, cpu_start = time.perf_counter(), time.process_time()
    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
    # exploration_fraction is a fraction of learn()'s total_timesteps: rescale it so epsilon reaches its
    # final value after 0.16 * 5e4 = 8000 steps, as in the zoo's 5e4-step run, not 0.16 * max_steps.
    hyperparams = {**SB3_HYPERPARAMS, "exploration_fraction": min(1.0, EXPLORATION_STEPS / max_steps)}
    model = DQN("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **hyperparams)
    callback = StopAtTarget(start)
    model.learn(total_timesteps=max_steps, callback=callback)
    env.close()
    hit = callback.hit or {"time_s": time.perf_counter() - start, "env_steps": model.num_timesteps}
    return {"side": "sb3", "seed": seed, "reached": callback.hit is not None, **hit,
            "cpu_s": time.process_time() - cpu_start, "exploration_fraction": hyperparams["exploration_fraction"], "episodes": len(callback.returns), "episode_return_mean": statistics.fmean(callback.returns or [0.0]),
            "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads()}


def run_srl(seed: int, config: str, timeout_s: float, overrides: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="srl-vs-sb3-") as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, "-m", "srl.cli", "train", config, "--run-dir", str(run_dir), f"seed={seed}",
                   "log.progress=false", "log.tensorboard=false", *overrides]
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=tmp, start_new_session=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except BaseException:  # timeout or Ctrl-C: stop the run (and its workers, in its session)
            stop_group(process)
            raise
        elapsed = time.perf_counter() - start
        summary = read_summary(run_dir)
    reason = str(summary.get("stop_reason", ""))
    result = {"side": "srl", "seed": seed, "config": config, "time_s": elapsed, "exit_code": process.returncode,
              "reached": process.returncode == 0 and reason.startswith("episode_return_mean"),
              "env_steps": summary.get("env_steps"), "episodes": summary.get("episodes"),
              "episode_return_mean": summary.get("episode_return_mean"), "stop_reason": reason,
              "internal_wall_time_s": summary.get("wall_time_s")}
    if process.returncode != 0:
        result["stderr_tail"] = stderr[-2000:]
    return result


def read_summary(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        try:
            return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            return {}


def stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the subprocess's group (its PID), then SIGKILL what is left after 15 s."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_seed: dict[int, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for r in runs:
        by_seed[r["seed"]][r["side"]] = r
    ratios = [s["srl"]["time_s"] / s["sb3"]["time_s"] for s in by_seed.values()
              if "srl" in s and "sb3" in s and s["srl"]["reached"] and s["sb3"]["reached"]]
    medians = {side: statistics.median([r["time_s"] for r in runs if r["side"] == side and r["reached"]] or [None])
               for side in ("sb3", "srl")}
    return {"median_time_s": medians, "ratios_srl_over_sb3": ratios,
            "median_ratio_srl_over_sb3": statistics.median(ratios) if ratios else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", choices=["sb3", "srl"], help="run one side only")
    parser.add_argument("--srl-config", default="cartpole-dqn", help="bundled config name or YAML path")
    parser.add_argument("--srl-override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--srl-timeout", type=float, default=1800.0, help="seconds per srl run")
    parser.add_argument("--sb3-max-steps", type=int, default=500_000)
    parser.add_argument("--out", default="results.json")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console, runs = Console(), []
    result: dict[str, Any] = {"target": TARGET, "window": WINDOW, "cpus": os.cpu_count(),
                              "sb3_hyperparams": SB3_HYPERPARAMS, "srl_config": args.srl_config, "runs": runs}
    for seed in args.seeds:
        for side in ("sb3", "srl"):
            if args.only in (None, side):
                console.print(f"[dim]{side} seed {seed} ...[/dim]")
                load_before = os.getloadavg()[0]  # the machine is shared: how busy it was, for reading the times
                runs.append(run_sb3(seed, args.sb3_max_steps) if side == "sb3"
                            else run_srl(seed, args.srl_config, args.srl_timeout, args.srl_override))
                runs[-1]["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
                result.update(summarize(runs))
                Path(args.out).write_text(json.dumps(result, indent=1))  # partial results survive a Ctrl-C
    table = Table(title=f"CartPole-v1: time to mean return {TARGET:g} over the last {WINDOW} episodes")
    for column in ("side", "seed", "reached", "time_s", "env_steps", "episodes", "mean return", "note"):
        table.add_column(column)
    for r in runs:
        note = f"torch threads {r['torch_threads']}" if r["side"] == "sb3" else f"exit {r['exit_code']}"
        note += f", load {r['load_1min'][0]:.1f}-{r['load_1min'][1]:.1f}"
        mean = r.get("episode_return_mean")
        table.add_row(r["side"], str(r["seed"]), "yes" if r["reached"] else "[red]not reached[/red]",
                      f"{r['time_s']:.1f}", f"{r['env_steps'] or 0:,}", str(r.get("episodes")),
                      "-" if mean is None else f"{mean:.1f}", note)
    console.print(table)
    ratio = result.get("median_ratio_srl_over_sb3")
    medians = ", ".join(f"{side} {'n/a' if t is None else f'{t:.1f} s'}" for side, t in result["median_time_s"].items())
    console.print(f"median time (reached runs): {medians}; median per-seed ratio srl/sb3: "
                  f"{'n/a' if ratio is None else f'{ratio:.2f}'}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
