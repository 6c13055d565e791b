"""Replay buffer throughput, alone: env steps stored per second, batches drawn per second,
memory per million env steps, for CartPole-sized and Atari-sized observations.

What a buffer worker does per message, timed on one core without the streams around it:
`insert` of one trajectory [T + 1, envs] (n-step targets and new priorities included);
`sample` of one message (`updates` batches, prioritized) followed by the priority update
the trainer's answer brings.

    python benchmarks/replay_buffer.py --seconds 3 --json replay.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.replay.buffer import ReplayBuffer

#: name -> (observation shape, dtype, trajectory length, envs per trajectory, batch size)
CASES: dict[str, tuple[tuple[int, ...], Any, int, int, int]] = {
    "cartpole (4 float32)": ((4,), np.float32, 16, 64, 64),
    "atari (4x84x84 uint8)": ((4, 84, 84), np.uint8, 32, 8, 32),
}


def trajectory(shape: tuple[int, ...], dtype: Any, T: int, envs: int, rng: np.random.Generator) -> NamedArray:
    obs = rng.integers(0, 255, (T + 1, envs, *shape)).astype(dtype)
    traj = NamedArray({keys.OBS: {keys.OBS: obs}})
    traj[keys.ACTION] = rng.integers(0, 6, (T + 1, envs))
    traj[keys.REWARD] = rng.standard_normal((T + 1, envs)).astype(np.float32)
    traj[keys.TERMINATED] = rng.random((T + 1, envs)) < 0.01
    traj[keys.TRUNCATED] = np.zeros((T + 1, envs), bool)
    traj[keys.ALIVE] = np.ones((T + 1, envs), bool)
    traj[keys.VERSION] = np.zeros((T + 1, envs), np.int64)
    return traj


def measure(shape: tuple[int, ...], dtype: Any, T: int, envs: int, batch: int, capacity: int,
            seconds: float, updates: int = 4) -> dict[str, float]:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity, T, n_step=3, gamma=0.99, alpha=0.6, beta=0.4)
    data = [trajectory(shape, dtype, T, envs, rng) for _ in range(4)]
    while buffer.filled < buffer.segments:  # fill it: sampling from a full tree is the steady state
        buffer.insert(data[buffer.inserted % 4])
    stored, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        stored += buffer.insert(data[stored % 4])
    insert_rate = stored / (time.perf_counter() - start)
    drawn, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sampled = buffer.sample(batch, updates)
        buffer.update_priorities(sampled[keys.REPLAY_INDEX], rng.random(sampled[keys.REPLAY_INDEX].shape))
        drawn += updates
    batch_rate = drawn / (time.perf_counter() - start)
    return {"insert_env_steps_per_s": insert_rate, "batches_per_s": batch_rate,
            "transitions_per_s": batch_rate * batch, "batch_size": batch,
            "mb_per_million_env_steps": buffer.nbytes / buffer.env_steps * 1e6 / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--capacity", type=int, default=100_000, help="env steps held")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    results = {name: measure(*case[:4], case[4], args.capacity, args.seconds) for name, case in CASES.items()}
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"replay buffer alone (capacity {args.capacity:,} env steps, prioritized, 3-step)")
    for column in ("observations", "stored env steps/s", "batches/s (x batch)", "MB per 1M env steps"):
        table.add_column(column, justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['insert_env_steps_per_s']:,.0f}", f"{r['batches_per_s']:,.0f} (x{r['batch_size']})",
                      f"{r['mb_per_million_env_steps']:,.0f}")
    Console(width=120).print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
