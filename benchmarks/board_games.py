"""A board-game run's policy against fixed players, as either side: wins, draws and losses.

    python benchmarks/board_games.py RUN                                  # vs random, 200 games a side
    python benchmarks/board_games.py RUN --opponents random benchmarks/board_players.py:connect4_depth2 \\
        --games 200 --json result.json

Each opponent plays `--games` games with the run's policy as the first agent and as many as
the second. A game's result comes from the env's `winner` (srl/envs/turn_based.py), as the
league counts it (`srl.league.match.play_games`). The policy plays sampled actions unless
`--deterministic`; an opponent is `random` or a player in a Python file (`FILE.py:NAME`, the
sources `srl evaluate` takes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from srl.api.components import make_env
from srl.api.config import run_config
from srl.api.env import spaces_of
from srl.evaluate import policy_for
from srl.league.match import play_games
from srl.workers.threads import compute_threads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--source", default="latest", help="the run's policy: latest, best, initial or a ckpt path")
    parser.add_argument("--opponents", nargs="+", default=["random"], metavar="SOURCE")
    parser.add_argument("--games", type=int, default=200, help="games per opponent and side")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=20_000)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    compute_threads(1)
    config = run_config(args.run_dir)
    envs = [make_env(config.env) for _ in range(args.envs)]
    spaces = spaces_of(envs[0])
    first, second = envs[0].agent_ids[:2]
    policy, label = policy_for(args.source, args.run_dir, config, spaces)
    rows = []
    print(f"{args.run_dir} ({label}), {args.games} games per opponent and side\n")
    print("| opponent | side | wins | draws | losses | not lost |")
    print("|---|---|---:|---:|---:|---:|")
    for source in args.opponents:
        source = source if source == "random" else str(Path(source).resolve())
        opponent, name = policy_for(source, args.run_dir, config, spaces)
        for seats in (([first], [second]), ([second], [first])):
            games = play_games(envs, seats, policy, opponent, args.games, args.seed, args.deterministic)
            row = {"opponent": name, "side": seats[0][0], "games": args.games, "wins": games.wins,
                   "draws": games.draws, "losses": games.losses}
            rows.append(row)
            print(f"| {name} | {seats[0][0]} | {games.wins / args.games:.1%} | {games.draws / args.games:.1%} | "
                  f"{games.losses / args.games:.1%} | {(games.wins + games.draws) / args.games:.1%} |")
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run_dir), "policy": label, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
