"""How a learner's next opponent is drawn from the pool: pure functions of the entries.

    entry = choose("pfsp", pool.entries(recent=5), rng)

- `latest`: the newest version (naive self-play, against a snapshot of itself);
- `uniform`: any version, all alike (fictitious self-play over the past);
- `pfsp`: prioritized fictitious self-play (AlphaStar): versions the learner loses to more
  often drawn more often. Each entry weighs `f(w)`, `w` its win rate against it:
  `hard`, `(1 - w) ** exponent` (the opponents it cannot beat yet), or `variance`,
  `w * (1 - w)` (the ones at its level).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from srl.league.pool import Entry

Strategy = Literal["latest", "uniform", "pfsp"]
Weighting = Literal["hard", "variance"]


def pfsp_weights(win_rates: Sequence[float], weighting: Weighting = "hard", exponent: float = 2.0) -> np.ndarray:
    """Probabilities of drawing each opponent, from the learner's win rate against each."""
    w = np.clip(np.asarray(win_rates, np.float64), 0.0, 1.0)
    f = (1.0 - w) ** exponent if weighting == "hard" else w * (1.0 - w)
    if not f.sum() > 0:  # beats (or loses to) every one for sure: no preference left
        f = np.ones_like(w)
    return f / f.sum()


def probabilities(strategy: Strategy, entries: Sequence[Entry], weighting: Weighting = "hard",
                  exponent: float = 2.0) -> np.ndarray:
    """The chance of each entry being drawn."""
    if not entries:
        raise ValueError("the pool is empty: no opponent to draw")
    if strategy == "latest":
        p = np.zeros(len(entries))
        p[max(range(len(entries)), key=lambda i: (entries[i].version, entries[i].id))] = 1.0
        return p
    if strategy == "uniform":
        return np.full(len(entries), 1.0 / len(entries))
    if strategy == "pfsp":
        return pfsp_weights([e.win_rate for e in entries], weighting, exponent)
    raise ValueError(f"unknown opponent strategy {strategy!r} (latest, uniform or pfsp)")


def choose(strategy: Strategy, entries: Sequence[Entry], rng: np.random.Generator, weighting: Weighting = "hard",
           exponent: float = 2.0) -> Entry:
    """One opponent, drawn with `probabilities`."""
    return entries[int(rng.choice(len(entries), p=probabilities(strategy, entries, weighting, exponent)))]
