"""Cross-play down a self-play run's ladder: its newest pool version against every `--every`-th
version of its pool, `--games` games each, counted won / drawn / lost from the newest one's
side (draws count half in the score). A check of the rating that uses no rating: if the newest
version is stronger than the past, it wins against it, and more clearly the older the version.

    python benchmarks/selfplay_ladder.py runs/duel-selfplay/<run> --games 200 --every 5
    python benchmarks/selfplay_ladder.py RUN_A --against RUN_B RUN_C   # newest against newest, run by run

With `--against`, the newest version of RUN plays the newest version of each other run instead
(runs of one env and policy, e.g. one config with different opponent strategies).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from srl.api.components import make_env, make_policy
from srl.api.config import run_config
from srl.api.env import spaces_of
from srl.api.run_paths import RunPaths
from srl.league.match import play_games, split_agents
from srl.league.pool import Pool
from srl.learn import checkpoint
from srl.workers.threads import compute_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--every", type=int, default=5, help="play every n-th pool version (and the first)")
    parser.add_argument("--envs", type=int, default=20)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--against", type=Path, nargs="+", help="other runs: play their newest versions instead")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    compute_threads(1)
    config = run_config(args.run)
    envs = [make_env(config.env) for _ in range(args.envs)]
    seats = split_agents(envs[0].agent_ids, config.self_play.learner)
    entries = Pool(RunPaths(args.run).pool).entries()
    newest, opponent = (make_policy(config.policy, *spaces_of(envs[0])) for _ in range(2))
    newest.load_state_dict(checkpoint.load(entries[-1].path)["policy"])
    rows = []
    if args.against:
        opponents = [Pool(RunPaths(run).pool).entries()[-1] for run in args.against]
    else:
        opponents = [e for i, e in enumerate(entries) if i % args.every == 0 or e is entries[-1]]
    for i, entry in enumerate(opponents):
        opponent.load_state_dict(checkpoint.load(entry.path)["policy"])
        games = play_games(envs, seats, newest, opponent, args.games, seed=1_000_000 + i,
                           deterministic=args.deterministic)
        score = (games.wins + 0.5 * games.draws) / args.games
        mu = entry.metadata["rating"]["mu"]
        rows.append({"opponent": str(entry.path), "opponent_version": entry.version, "opponent_rating_mu": mu,
                     "wins": games.wins, "draws": games.draws, "losses": games.losses, "score": score})
        print(f"v{entries[-1].version} vs {entry.path.parent.parent.name}/v{entry.version:<5d} (mu {mu:5.1f}): "
              f"{games.wins:4d} won {games.draws:4d} drawn {games.losses:4d} lost  score {score:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"newest_version": entries[-1].version, "games": args.games, "rows": rows}))


if __name__ == "__main__":
    main()
