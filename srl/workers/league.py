"""The league worker: keeps the self-play pool and rates the newest version against it.

It reads the parameter stream as an evaluation worker does and sends no samples. Every
`snapshot_every_versions` versions it freezes the newest one into the pool (the first version
it holds, tagged `initial`, is the ladder's foot and never pruned); every `every_s` seconds it
plays the newest version against `opponents_per_round` versions of the pool (the initial one
and others drawn uniformly), `episodes` games each, and updates the newest version's rating
against their frozen ratings (`srl.league.rating`). The results go into the pool (which is
what the actors' PFSP draws from) and once into the run's metrics:

| key | what |
|---|---|
| `selfplay_rating` | the newest version's conservative rating, mu - 3 sigma |
| `selfplay_rating_mu`, `selfplay_rating_sigma` | its rating's mean and uncertainty |
| `eval_win_rate`, `eval_draw_rate` | its share of the round's games won, drawn |
| `eval_win_rate_initial` | its share of games won against the initial version |
| `selfplay_version`, `selfplay_games`, `selfplay_pool_size` | the version rated, games played, versions in the pool |

    while running:
        version, weights = newest on `parameters`
        if league.snapshot_due(): league.snapshot()                  # into the pool, with its rating
        if league.round_due(now): metrics = league.play_round(now)   # srl.league.match.play_games
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from srl.api.components import make_env, make_policy
from srl.api.config import ComponentConfig, EnvConfig, SelfPlayConfig
from srl.api.env import spaces_of
from srl.api.run_paths import RunPaths
from srl.api.settings import LeagueSettings
from srl.league.match import Games, play_games, split_agents
from srl.league.pool import Entry, Pool
from srl.league.rating import Rating, Ratings
from srl.learn import checkpoint
from srl.workers.base import FatalError
from srl.workers.rounds import RoundsWorker

log = logging.getLogger(__name__)

#: The first version frozen: never pruned, played every round.
INITIAL = "initial"
SNAPSHOT = "snapshot"
#: The pool's state key of the newest version's rating (a restarted league goes on from it).
PLAYER_RATING = "player_rating"
#: League envs take seeds from here on, apart from the actors' and the evaluation worker's.
SEED_BASE = 3 * 2**30


class League:
    """The league's work without a process or a stream: `hold` the newest weights, then
    `snapshot` and `play_round` when due."""

    def __init__(self, env: EnvConfig, policy: ComponentConfig, settings: SelfPlayConfig, run_dir: Path,
                 seed: int) -> None:
        self.settings = settings
        self.envs = [make_env(env) for _ in range(min(settings.envs, settings.episodes))]
        self.seats = split_agents(self.envs[0].agent_ids, settings.learner)
        spaces = spaces_of(self.envs[0])
        self.learner, self.opponent = make_policy(policy, *spaces), make_policy(policy, *spaces)
        self.pool = Pool(RunPaths(run_dir).pool)
        self.directory = self.pool.path.parent
        self.ratings = Ratings()
        saved = self.pool.state(PLAYER_RATING)
        self.rating = Rating.from_dict(saved) if saved else self.ratings.initial()
        latest = self.pool.latest()
        self.snapshot_version: int | None = latest.version if latest else None
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.version, self.env_steps = -1, 0
        self.rounds, self.games_played, self.matches = 0, 0, 0
        self.last_round = -math.inf

    def hold(self, version: int, weights: Any, env_steps: int) -> None:
        self.learner.set_params(weights, version)
        self.version, self.env_steps = version, env_steps

    def snapshot_due(self) -> bool:
        if self.version < 0:
            return False
        last = self.snapshot_version
        return last is None or self.version - last >= self.settings.snapshot_every_versions

    def snapshot(self) -> Entry:
        """Freeze the held version into the pool, with the newest version's rating as its own."""
        name = f"v-{self.version:09d}"
        try:
            checkpoint.save_tagged(self.directory, name, self.version, {"policy": self.learner.state_dict()},
                                   {"env_steps": self.env_steps, "policy_only": True})
        except OSError as exc:
            raise FatalError(f"cannot write a pool version: {exc}") from exc
        tags = [SNAPSHOT] + ([INITIAL] if not self.pool.entries(tag=INITIAL) else [])
        metadata = {"rating": self.rating.as_dict(), "rating_conservative": self.ratings.conservative(self.rating)}
        entry = self.pool.add(self.version, self.env_steps, f"{name}.pt", tags, metadata)
        self.snapshot_version = self.version
        for gone in self.pool.prune(self.settings.pool_size, protect=INITIAL):
            gone.path.unlink(missing_ok=True)
            gone.path.with_suffix(".json").unlink(missing_ok=True)
        return entry

    def round_due(self, now: float) -> bool:
        return self.version >= 0 and now - self.last_round >= self.settings.every_s and len(self.pool) > 0

    def play_round(self, now: float) -> dict[str, Any]:
        """Play the held version against some of the pool; update its rating; returns the metrics."""
        self.last_round = now
        entries = self.pool.entries()
        initial = [e for e in entries if INITIAL in e.tags][:1]
        others = [e for e in entries if e not in initial]  # (entries of one read compare by value)
        k = min(self.settings.opponents_per_round - len(initial), len(others))
        picked = initial + [others[i] for i in self.rng.choice(len(others), max(k, 0), replace=False)]
        total, against_initial = Games(), None
        for entry in picked:
            games = self._play(entry)
            if games is None:
                continue
            opponent = Rating.from_dict(entry.metadata["rating"])
            for score in games.scores:
                self.rating = self.ratings.update(self.rating, opponent, score)
            self.pool.record_match(self.version, entry.id, games.wins, games.draws, games.losses, self.env_steps)
            total.scores += games.scores
            if entry in initial:
                against_initial = games
        self.rounds += 1
        self.games_played += len(total.scores)
        self.pool.set_state(PLAYER_RATING, {**self.rating.as_dict(), "version": self.version})
        n = max(len(total.scores), 1)
        return {"selfplay_rating": self.ratings.conservative(self.rating), "selfplay_rating_mu": self.rating.mu,
                "selfplay_rating_sigma": self.rating.sigma, "eval_win_rate": total.wins / n,
                "eval_draw_rate": total.draws / n,
                **({"eval_win_rate_initial": against_initial.wins / max(len(against_initial.scores), 1)}
                   if against_initial is not None else {}),
                "selfplay_version": self.version, "selfplay_games": len(total.scores),
                "selfplay_pool_size": len(self.pool), "selfplay_opponents": [e.version for e in picked]}

    def _play(self, entry: Entry) -> Games | None:
        try:
            self.opponent.load_state_dict(checkpoint.load(entry.path)["policy"])
        except (OSError, checkpoint.CheckpointError) as exc:
            log.warning("cannot load pool version %d (%s): skipped this round", entry.version, exc)
            return None
        self.matches += 1  # each match plays fresh starts
        seed = self.seed + self.matches * self.settings.episodes
        s = self.settings
        if not s.swap_sides:
            return play_games(self.envs, self.seats, self.learner, self.opponent, s.episodes, seed, s.deterministic)
        # Half the games on each side, every result from the learner's side.
        mine, theirs = self.seats
        first = play_games(self.envs, (mine, theirs), self.learner, self.opponent, (s.episodes + 1) // 2, seed,
                           s.deterministic)
        second = play_games(self.envs, (theirs, mine), self.learner, self.opponent, s.episodes // 2, seed + s.episodes,
                            s.deterministic)
        return Games(first.scores + second.scores)

    def close(self) -> None:
        self.pool.close()
        for env in self.envs:
            env.close()


class LeagueWorker(RoundsWorker):
    """A shell around a `League`: the parameter stream in, `selfplay_*` and `eval_win_rate` metrics out."""

    seconds_key = "selfplay_s"

    Config = LeagueSettings
    settings: LeagueSettings

    def setup(self) -> None:
        s = self.settings
        try:
            self.league = League(s.env, s.policy, s.self_play, Path(self.spec.run_dir),
                                 seed=SEED_BASE + self.spec.seed + self.spec.index * 2**24)
        except ValueError as exc:  # the learner's patterns do not fit the env: a restart cannot help
            raise FatalError(str(exc)) from exc
        self.open_parameters()

    def take(self, version: int, weights: Any) -> None:
        self.league.hold(version, weights, int(self.controller_info.get("env_steps", 0)))

    def between_rounds(self) -> None:
        if self.league.snapshot_due():
            entry = self.league.snapshot()
            log.info("version %d into the pool (rating %.2f)", entry.version, entry.metadata["rating_conservative"])

    def round_due(self, now: float) -> bool:
        return self.league.round_due(now)

    def play_round(self, now: float) -> dict[str, Any]:
        return self.league.play_round(now)

    def log_round(self, result: dict[str, Any]) -> None:
        log.info("version %d: rating %.2f (mu %.2f, sigma %.2f), won %.0f%% of %d games against versions %s",
                 result["selfplay_version"], result["selfplay_rating"], result["selfplay_rating_mu"],
                 result["selfplay_rating_sigma"], 100 * result["eval_win_rate"], result["selfplay_games"],
                 result["selfplay_opponents"])

    def counts(self) -> dict[str, Any]:
        return {"rounds": self.league.rounds, "held_version": self.league.version}

    def close_rounds(self) -> None:
        if hasattr(self, "league"):
            self.league.close()
