"""Hide-and-seek env speed: env steps/s with random actions on one core, resets included.

One process, one env, pinned to one core; every episode runs to its end (240 steps by
default) and is reset. Reports steps/s over the whole run (resets included), the time
per reset, and the share of a step spent in the physics (15 `mj_step` substeps).
Processor time is reported beside wall time: on a busy machine the wall figure
understates what a free core does.

    python benchmarks/hide_and_seek_speed.py                 # 2v2, 20 episodes
    python benchmarks/hide_and_seek_speed.py --episodes 5 --hiders 3 --seekers 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from srl.launch.run_dir import write_json_atomic


def measure(episodes: int, seed: int = 0, **options) -> dict:
    from srl.envs import hide_and_seek

    env = hide_and_seek.parallel_env(**options)
    rng = np.random.default_rng(seed)
    nvec = env.action_space(env.possible_agents[0]).nvec
    env.reset(seed=seed)  # warm up: first calls allocate
    steps, reset_s, reset_cpu = 0, 0.0, 0.0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for episode in range(episodes):
        t, c = time.perf_counter(), time.process_time()
        env.reset(seed=seed + episode)
        reset_s += time.perf_counter() - t
        reset_cpu += time.process_time() - c
        while env.agents:
            actions = rng.integers(0, nvec, size=(len(env.agents), len(nvec)))
            env.step(dict(zip(env.agents, actions)))
            steps += 1
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    physics = _physics_share(env, rng, nvec)
    return {"agents": len(env.possible_agents), "episodes": episodes, "steps": steps,
            "steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu,
            "reset_ms": 1e3 * reset_s / episodes, "reset_cpu_ms": 1e3 * reset_cpu / episodes,
            "physics_share": physics}


def _physics_share(env, rng: np.random.Generator, nvec: np.ndarray, steps: int = 200) -> float:
    """Fraction of a step's processor time spent inside mj_step (timed by replaying the same steps)."""
    import mujoco

    env.reset(seed=12345)
    total = physics = 0.0
    for _ in range(steps):
        if not env.agents:
            env.reset()
        actions = dict(zip(env.agents, rng.integers(0, nvec, size=(len(env.agents), len(nvec)))))
        c = time.process_time()
        env.step(actions)
        total += time.process_time() - c
        saved = mujoco.MjData(env.model)
        mujoco.mj_copyData(saved, env.model, env.data)
        c = time.process_time()
        mujoco.mj_step(env.model, saved, nstep=env.substeps)
        physics += time.process_time() - c
    return physics / total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--hiders", type=int, default=2)
    parser.add_argument("--seekers", type=int, default=2)
    parser.add_argument("--episode-length", type=int, default=240)
    parser.add_argument("--core", type=int, default=0, help="core to pin to (-1: no pinning)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    result = measure(args.episodes, n_hiders=args.hiders, n_seekers=args.seekers, episode_length=args.episode_length)
    print(f"{args.hiders}v{args.seekers}: {result['steps_per_s']:,.0f} env steps/s wall "
          f"({result['steps_per_cpu_s']:,.0f} per processor second), resets included; "
          f"{result['reset_ms']:.2f} ms per reset ({result['reset_cpu_ms']:.2f} processor ms); "
          f"physics {100 * result['physics_share']:.0f}% of a step")
    if args.json:
        write_json_atomic(Path(args.json), result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
