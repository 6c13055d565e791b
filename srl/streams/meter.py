"""A mean since it was last read: how workers report latencies and queue depths per heartbeat.

Adding is two float operations, so a meter can sit on a path that runs once per inference
round trip or per batch (not per env step). `take()` empties it, so each heartbeat carries
the mean over its own interval rather than over the whole run; an interval in which nothing
was added (a trainer between slow steps) repeats the previous mean instead of going blank.

    rtt = Mean()
    rtt.add(time.monotonic() - sent)   # on the path being measured
    stats["inference_ms"] = rtt.take(1000)   # in stats(): the mean since the last take
"""

from __future__ import annotations


class Mean:
    __slots__ = ("total", "count", "last")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.last: float | None = None

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1

    def take(self, scale: float = 1.0) -> float | None:
        """The mean of what was added since the last take, times `scale` (the previous mean if
        nothing was; None before anything was)."""
        if self.count:
            self.last = round(self.total / self.count * scale, 3)
            self.total, self.count = 0.0, 0
        return self.last
