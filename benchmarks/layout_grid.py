"""The layout `auto` chooses against a grid of hand layouts: trained env steps/s of each.

Each point is `srl bench`'s T (srl.bench.system_rate): the steady env steps/s the trainers
learned from in a real local run, after start-up and a warm-up, samples dropped as too stale
not counted. That is the figure a layout is for, free of start-up time (which differs with the
number of processes and, for `auto`, holds its measurement) and of the run's first seconds.

`auto` is every layout field set to `auto` (srl.layout, measured on this machine, cached);
`auto-count` only `actors.count`, the others as the config gives them.

    python benchmarks/layout_grid.py cartpole-ppo --seconds 8 --json out.json
    python benchmarks/layout_grid.py pong-ppo --seconds 30 --points 0 1 2 3 --json a.json   # a part of the grid
    python benchmarks/layout_grid.py cartpole-ppo --seconds 1 --points 0 auto               # smoke
"""

from __future__ import annotations

import argparse
import json
import sys

from srl.api.config import AUTO_FIELDS, take_auto, validate
from srl.api.config_files import apply_overrides, read_config_file
from srl.bench import system_rate

# Hand layouts per config: actors x envs per slot x ring, inline or remote inference, trainer threads.
# Each keeps every env in flight within one training batch (actors x ring x envs x trajectory
# length <= batch_steps), as the shipped layout (the first) does.
GRIDS: dict[str, list[dict[str, object]]] = {
    "cartpole-ppo": [  # trajectories of 16, batches of 2048: at most 128 envs in flight
        {"actors.count": 2, "actors.envs_per_slot": 64},
        {"actors.count": 1, "actors.envs_per_slot": 128},
        {"actors.count": 4, "actors.envs_per_slot": 32},
        {"actors.count": 2, "actors.envs_per_slot": 32},
        {"actors.count": 2, "actors.envs_per_slot": 16},
        {"actors.count": 2, "actors.envs_per_slot": 64, "trainers.placement.threads": 2},
        {"actors.count": 2, "actors.envs_per_slot": 32, "actors.ring_size": 2, "actors.inference": "remote"},
        {"actors.count": 4, "actors.envs_per_slot": 32, "actors.inference": "remote"},
    ],
    "halfcheetah-ppo": [  # trajectories of 32: at most 64 envs in flight
        {"actors.count": 2, "actors.envs_per_slot": 32},
        {"actors.count": 1, "actors.envs_per_slot": 64},
        {"actors.count": 4, "actors.envs_per_slot": 16},
        {"actors.count": 2, "actors.envs_per_slot": 16},
        {"actors.count": 2, "actors.envs_per_slot": 8},
        {"actors.count": 2, "actors.envs_per_slot": 32, "trainers.placement.threads": 2},
        {"actors.count": 2, "actors.envs_per_slot": 16, "actors.ring_size": 2, "actors.inference": "remote"},
    ],
    "pong-ppo": [  # trajectories of 128: at most 16 envs in flight
        {"actors.count": 2, "actors.envs_per_slot": 8, "trainers.placement.threads": 2},
        {"actors.count": 2, "actors.envs_per_slot": 8, "trainers.placement.threads": 1},
        {"actors.count": 1, "actors.envs_per_slot": 16, "trainers.placement.threads": 2},
        {"actors.count": 4, "actors.envs_per_slot": 4, "trainers.placement.threads": 2},
        {"actors.count": 2, "actors.envs_per_slot": 4, "trainers.placement.threads": 2},
        {"actors.count": 2, "actors.envs_per_slot": 4, "actors.ring_size": 2, "actors.inference": "remote",
         "trainers.placement.threads": 2},
        {"actors.count": 3, "actors.envs_per_slot": 4, "actors.inference": "remote", "trainers.placement.threads": 2},
    ],
}


def point(config: str, overrides: list[str], layout: dict[str, object] | str, seconds: float) -> dict[str, object]:
    """T for one layout (a dict of fields, or `auto` / `auto-count`), with what ran."""
    data = apply_overrides(read_config_file(config), overrides)
    record = None
    if isinstance(layout, str):
        from srl.layout import resolve

        fields = AUTO_FIELDS if layout == "auto" else ("actors.count",)
        data, auto = take_auto(apply_overrides(data, [f"{name}=auto" for name in fields]))
        resolved, record = resolve(validate(data), auto, say=lambda line: print(line, file=sys.stderr))
        data = resolved.model_dump(mode="json")
    else:
        data = apply_overrides(data, [f"{k}={v}" for k, v in layout.items()])
    config = validate(data)
    # Every env is built before the first step: allow for it (Atari: ~50 ms an env).
    envs = config.actors.count * config.actors.ring_size * config.actors.envs_per_slot
    rate, status = system_rate(config.model_dump(mode="json"), seconds, sampling_only=False,
                               startup_s=4.0 + 0.05 * envs)
    ran = {name: _get(config.model_dump(mode="json"), name) for name in AUTO_FIELDS}
    out = {"layout": layout if isinstance(layout, str) else "hand", **ran, "trained_steps_per_s": round(rate, 1)}
    # Why: how fast the trainer learns while it steps, and what it threw away as too stale.
    trainer = next((w.get("stats") or {} for w in status["workers"] if w["kind"] == "trainer"), {})
    out.update({k: trainer[k] for k in ("train_fps", "dropped_stale", "version_lag") if k in trainer})
    if record is not None:
        out.update(predicted=record["predicted_trained_steps_per_s"], bound=record["bound"],
                   from_cache=record["from_cache"], reason=record["reason"])
    return out


def _get(data: dict, dotted: str) -> object:
    for part in dotted.split("."):
        data = data[part]
    return data


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", choices=sorted(GRIDS))
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady-state window of each point")
    parser.add_argument("--points", nargs="+", default=None,
                        help="grid indices and/or auto, auto-count (default: the whole grid, then both autos)")
    parser.add_argument("--json", metavar="FILE", help="append each point as a JSON line")
    args = parser.parse_intermixed_args(argv)
    grid = GRIDS[args.config]
    chosen = args.points or [*map(str, range(len(grid))), "auto", "auto-count"]
    results = []
    for name in chosen:
        layout = name if name.startswith("auto") else grid[int(name)]
        try:
            result = {"config": args.config, "point": name, **point(args.config, args.overrides, layout, args.seconds)}
        except RuntimeError as exc:  # a layout too slow to train twice in the window: recorded, not fatal
            result = {"config": args.config, "point": name, "layout": layout, "error": str(exc)}
            print(f"{args.config} {name:>10}: {exc}", flush=True)
        else:
            shown = " ".join(f"{k.split('.')[-1]}={result[k]}" for k in AUTO_FIELDS)
            print(f"{args.config} {name:>10}: {result['trained_steps_per_s']:>10,.0f} trained env steps/s  ({shown})",
                  flush=True)
        results.append(result)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(result) + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
