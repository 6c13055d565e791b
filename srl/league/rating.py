"""Skill ratings (OpenSkill's Plackett-Luce model) of one player against a frozen pool.

The rated player is the run's newest version: one player whose skill moves as it trains.
Each game updates its rating and leaves the opponent's alone: a pool entry keeps the rating
the newest version had when the entry was taken. The pool is a fixed ladder, so the player
climbs it only by beating stronger versions, and its rating says how strong it is against
the past, in one unit. OpenSkill's `tau` widens the player's uncertainty a little before
each game, so the rating keeps following a player that improves.

    ratings = Ratings()
    me = ratings.initial()
    me = ratings.update(me, opponent=Rating(25.0, 8.3), score=1.0)   # won; 0.5 a draw, 0.0 lost
    ratings.conservative(me)                                          # mu - 3 sigma
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rating:
    mu: float
    sigma: float

    def as_dict(self) -> dict[str, float]:
        return {"mu": self.mu, "sigma": self.sigma}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rating:
        return cls(float(data["mu"]), float(data["sigma"]))


class Ratings:
    """A rating model (OpenSkill's defaults: mu 25, sigma 25/3, beta 25/6, tau 25/300)."""

    def __init__(self) -> None:
        from openskill.models import PlackettLuce

        self.model = PlackettLuce()

    def initial(self) -> Rating:
        return Rating(float(self.model.mu), float(self.model.sigma))

    def update(self, player: Rating, opponent: Rating, score: float) -> Rating:
        """The player's rating after one game against a frozen `opponent`: `score` 1 won, 0.5 a draw, 0 lost."""
        if score not in (0.0, 0.5, 1.0):
            raise ValueError(f"a game's score is 1 (won), 0.5 (draw) or 0 (lost), not {score}")
        ranks = [0, 0] if score == 0.5 else ([0, 1] if score == 1.0 else [1, 0])
        me = self.model.rating(mu=player.mu, sigma=player.sigma)
        them = self.model.rating(mu=opponent.mu, sigma=opponent.sigma)
        [[new], _] = self.model.rate([[me], [them]], ranks=ranks)
        return Rating(float(new.mu), float(new.sigma))

    def win_probability(self, player: Rating, opponent: Rating) -> float:
        """The model's chance that `player` beats `opponent`."""
        me = self.model.rating(mu=player.mu, sigma=player.sigma)
        them = self.model.rating(mu=opponent.mu, sigma=opponent.sigma)
        return float(self.model.predict_win([[me], [them]])[0])

    @staticmethod
    def conservative(rating: Rating) -> float:
        """mu - 3 sigma: a rating the player is very likely above (what leaderboards rank by)."""
        return rating.mu - 3.0 * rating.sigma
