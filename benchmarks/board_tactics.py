"""A connect-four run's policy in positions from random play: does it take a win in one, and
block the other player's?

    python benchmarks/board_tactics.py RUN                      # 2,000 positions of each kind
    python benchmarks/board_tactics.py RUN --source best --positions 500 --deterministic
    python benchmarks/board_tactics.py RUN --against benchmarks/board_players.py:connect4_depth2

Games of random legal moves are played on the run's own env; every position where the player
to move can win at once (a "win" position), or where the other player threatens exactly one win
at once and the mover has none (a "block" position), is kept, as that player sees it. The policy
acts in each once; the table gives how often it picks a right column, beside how often a random
legal move would. A policy trained only against itself can score far better in its own games
than here: these positions are the ones a different player leads to (docs/selfplay.md).

`--against SOURCE` looks at the policy's own games instead: `--games` games a side against
SOURCE (`random` or `FILE.py:NAME`), and the positions of each kind that the policy met in them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from board_players import _connect4_scores  # noqa: E402

from srl.api.components import make_env  # noqa: E402
from srl.api.config import run_config  # noqa: E402
from srl.api.env import spaces_of  # noqa: E402
from srl.data import keys  # noqa: E402
from srl.data.named_array import NamedArray  # noqa: E402
from srl.evaluate import policy_for  # noqa: E402
from srl.workers.threads import compute_threads  # noqa: E402

_KINDS = {"win": "a win in one", "block": "the other player threatens one win"}


def winning_columns(board: np.ndarray) -> set[int]:
    """The columns where the player whose pieces are plane 0 completes four at once."""
    return {column for column, score in _connect4_scores(board, 1).items() if score == 1}


def kind_of(board: np.ndarray) -> tuple[str | None, set[int]]:
    """("win", the winning columns) where the mover can win at once, else ("block", the column)
    where the other player threatens exactly one win, else (None, no columns)."""
    wins = winning_columns(board)
    if wins:
        return "win", wins
    threats = winning_columns(board[..., ::-1])
    return ("block", threats) if len(threats) == 1 else (None, set())


def tactical_positions(env, count: int, seed: int) -> dict[str, list[tuple[dict, set[int]]]]:
    """`count` positions of each kind ("win", "block"), each with the columns that answer it."""
    rng = np.random.default_rng(seed)
    found: dict[str, list[tuple[dict, set[int]]]] = {"win": [], "block": []}
    steps, turn = env.reset(seed=seed), 0
    while min(len(v) for v in found.values()) < count:
        mover = env.agent_ids[turn % 2]  # the players take turns, the first agent first
        obs = steps[mover].obs
        kind, answers = kind_of(obs[keys.OBS])
        if kind and len(found[kind]) < count:
            found[kind].append((obs, answers))
        legal = np.flatnonzero(obs[keys.ACTION_MASK])
        steps, turn = env.step({a: (rng.choice(legal) if a == mover else 0) for a in steps}), turn + 1
        if all(s.done for s in steps.values()):
            steps, turn = env.reset(), 0
    return found


def answered_in_games(env, policy, opponent, games: int, seed: int, deterministic: bool) -> dict[str, tuple[int, int]]:
    """(positions answered, positions met) of each kind, in `policy`'s own games against
    `opponent`: `games` with each side first."""
    counts = {"win": [0, 0], "block": [0, 0]}
    for game in range(2 * games):
        steps, turn = env.reset(seed=seed + game), 0
        mine = env.agent_ids[game % 2]
        while not all(s.done for s in steps.values()):
            mover = env.agent_ids[turn % 2]
            obs = steps[mover].obs
            player = policy if mover == mine else opponent
            batch = NamedArray({k: np.asarray(v)[None] for k, v in obs.items()})
            action = int(np.asarray(player.rollout(batch, player.initial_state(1), deterministic)[keys.ACTION])[0])
            kind, answers = kind_of(obs[keys.OBS]) if mover == mine else (None, set())
            if kind:
                counts[kind][0] += action in answers
                counts[kind][1] += 1
            steps, turn = env.step({a: (action if a == mover else 0) for a in steps}), turn + 1
    return {kind: (answered, met) for kind, (answered, met) in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--source", default="latest", help="the run's policy: latest, best, initial or a ckpt path")
    parser.add_argument("--positions", type=int, default=2000, help="positions of each kind")
    parser.add_argument("--seed", type=int, default=30_000)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--against", metavar="SOURCE", help="the positions of the policy's own games against SOURCE")
    parser.add_argument("--games", type=int, default=200, help="with --against: games a side")
    args = parser.parse_args(argv)
    compute_threads(1)
    config = run_config(args.run_dir)
    if config.env.id != "classic/connect_four-v3":
        parser.error(f"{args.run_dir} plays {config.env.id}; this looks at connect four (classic/connect_four-v3)")
    env = make_env(config.env)
    policy, label = policy_for(args.source, args.run_dir, config, spaces_of(env))
    if args.against:
        source = args.against if args.against == "random" else str(Path(args.against).resolve())
        opponent, name = policy_for(source, args.run_dir, config, spaces_of(env))
        print(f"{args.run_dir} ({label}), {args.games} games a side against {name}\n")
        print("| position | met | the policy's move answered it |")
        print("|---|---:|---:|")
        counts = answered_in_games(env, policy, opponent, args.games, args.seed, args.deterministic)
        for kind, (answered, met) in counts.items():
            print(f"| {_KINDS[kind]} | {met} | {answered / max(met, 1):.1%} |")
        return 0
    print(f"{args.run_dir} ({label}), {args.positions} positions of each kind from random play\n")
    print("| position | the policy's move answers it | a random legal move would |")
    print("|---|---:|---:|")
    for kind, positions in tactical_positions(env, args.positions, args.seed).items():
        obs = NamedArray({k: np.stack([o[k] for o, _ in positions]) for k in positions[0][0]})
        actions = np.asarray(policy.rollout(obs, policy.initial_state(len(positions)), args.deterministic)[keys.ACTION])
        right = np.mean([a in answers for a, (_, answers) in zip(actions, positions)])
        chance = np.mean([len(answers) / o[keys.ACTION_MASK].sum() for o, answers in positions])
        print(f"| {_KINDS[kind]} | "
              f"{right:.1%} | {chance:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
