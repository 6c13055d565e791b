"""Self-play: a pool of frozen policy versions, how opponents are drawn from it, skill ratings
and the games that produce them. Pure compute and an embedded store; the workers that use them
are `srl.workers.opponents` (the actors' opponents) and `srl.workers.league` (the ratings)."""
