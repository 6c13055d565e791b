"""Env ring sweep: actor throughput at ring sizes 1, 2, 4, 8, 16 with remote inference.

Sampling only (the trainer runs the no-op algorithm). The speed-up over ring size 1 shows
how much inference latency the ring hides: with one slot the actor idles while its request
is answered; with more, other slots step meanwhile.

    python benchmarks/ring_sweep.py pong-ppo actors.count=1 --seconds 20   # one actor: the ring alone overlaps
    python benchmarks/ring_sweep.py cartpole-ppo --seconds 2 --sizes 1 2   # smoke
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from srl.api.config import load
from srl.bench import system_rate
from srl.launch.run_dir import write_json_atomic


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_intermixed_args(argv)
    results = {}
    for size in args.sizes:
        config = load(args.config, [*args.overrides, "actors.inference=remote", f"actors.ring_size={size}"])
        # Every slot's envs are built before the first step: allow for it (Atari: ~50 ms an env).
        startup = 4.0 + 0.05 * size * config.actors.envs_per_slot * config.actors.count
        rate, _ = system_rate(config.model_dump(mode="json"), args.seconds, sampling_only=True, startup_s=startup)
        results[size] = rate
        print(f"ring {size:>2}: {rate:>10,.0f} env steps/s  ({rate / results[args.sizes[0]]:.2f}x ring {args.sizes[0]})",
              flush=True)
    if args.json:
        write_json_atomic(Path(args.json), {"config": args.config, "steps_per_s": results})
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
