"""The shell shared by workers that play the newest published version now and then.

The evaluation worker and self-play's league both hold the newest parameters, play a round
when their schedule says so, and hand each round's result to the run's metrics exactly once
(through their heartbeats' stats). A subclass says how to take parameters, when a round is
due, how to play and log it, and what it counts.
"""

from __future__ import annotations

import time
from typing import Any

from srl.api.worker import Port
from srl.workers.base import Worker


class RoundsWorker(Worker):
    ports = {"parameters": Port("parameters", "consume")}
    # No counters: its env steps and returns are not the run's (the stop rule never sees them);
    # no progress stat: it waits on the clock by design, so heartbeats alone watch it.

    #: The key of a round's wall time in its result.
    seconds_key = "round_s"

    def open_parameters(self) -> None:
        """Subscribe to the parameter stream (call at the end of `setup`)."""
        self.params = self.subscribe("parameters")
        self.last: dict[str, Any] = {}
        #: The newest result, until a heartbeat carries it into the run's metrics (once).
        self.unreported: dict[str, Any] | None = None

    # ------------------------------------------------------------------ what a subclass says
    def take(self, version: int, weights: Any) -> None:
        """Hold a newly published version."""
        raise NotImplementedError

    def between_rounds(self) -> None:
        """Work done on every poll (none by default)."""

    def round_due(self, now: float) -> bool:
        raise NotImplementedError

    def play_round(self, now: float) -> dict[str, Any]:
        """One round; returns its metrics."""
        raise NotImplementedError

    def log_round(self, result: dict[str, Any]) -> None:
        raise NotImplementedError

    def counts(self) -> dict[str, Any]:
        """Totals for `srl status` (rounds played, the version held)."""
        raise NotImplementedError

    def close_rounds(self) -> None:
        raise NotImplementedError

    def last_round_due(self) -> bool:
        """Whether to play one more round as the run stops (none by default)."""
        return False

    # ------------------------------------------------------------------ the shell
    def poll(self) -> None:
        self._take_newest()
        self.between_rounds()
        now = time.monotonic()
        if not self.round_due(now):
            self.pause(0.05)
            return
        with self.busy():  # a round can outlast the heartbeat timeout
            self._play(now)

    def _take_newest(self) -> None:
        got = self.params.poll()
        if got is not None:
            version, weights, _ = got
            self.take(version, weights)

    def _play(self, now: float) -> None:
        result = self.play_round(now)
        self.last = {**result, self.seconds_key: round(time.monotonic() - now, 3)}
        self.unreported = dict(self.last)
        self.log_round(self.last)

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "unreported"):
            return {}
        report, self.unreported = self.unreported, None
        return {**self.counts(), **self.last, **({"metrics": report} if report else {})}

    def teardown(self) -> None:
        if hasattr(self, "params"):
            # The goodbye's stats carry this last round into the run's summary.
            self._take_newest()
            if self.last_round_due():
                self._play(time.monotonic())
            self.params.close()
        self.close_rounds()
