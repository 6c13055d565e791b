"""What every peer runner of side_by_side.py shares: its command line and its progress lines.

Imported by the runners (`sb3_run.py`, `sf_run.py`, `rllib_run.py`), each in its peer's own
venv, so it needs nothing beyond the standard library. A runner prints, besides whatever its
library logs:

    @peer {"library": ..., "version": ..., "torch": ...}        once, before training
    @progress {"wall": ..., "frames": ..., "episodes": ..., "score": ...}   as training goes

`wall` is `time.time()` (the harness shares the clock), `frames` the env steps taken so far in
the unit the harness reports (env steps after frame skip; for multi-agent envs env steps, not
agent steps), `episodes` the episodes finished so far and `score` the mean return of the last
100 (None before the first). The harness reads these lines and stops the runner's process
group when its window or target is reached; a runner also stops itself after --max-seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections import deque

#: Episodes in the running mean of the score, as SRL's controller.
RETURN_WINDOW = 100
PEER_PREFIX = "@peer "
PROGRESS_PREFIX = "@progress "


def parse_args(description: str, argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--task", required=True, choices=["pong", "halfcheetah", "spread"])
    p.add_argument("--mode", required=True, choices=["throughput", "score"],
                   help="throughput: the matched update shape (--shape); score: the library's own config")
    p.add_argument("--shape", type=json.loads, default=None,
                   help="the matched update shape, as JSON (see side_by_side.py, SHAPES)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="stop training after this long")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.mode == "throughput" and not args.shape:
        p.error("--mode throughput needs --shape")
    return args


def announce(library: str, version: str, **extra) -> None:
    """The `@peer` line: which library and version run."""
    import importlib.metadata as md

    info = {"library": library, "version": version, "torch": md.version("torch"), **extra}
    print(PEER_PREFIX + json.dumps(info), flush=True)


class Progress:
    """Counts finished episodes and prints `@progress` lines, at most every `every_s` seconds
    (`force=True` prints regardless: at the boundaries of training iterations)."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.episodes = 0
        self.last_print = 0.0

    def episode(self, episode_return: float) -> None:
        self.returns.append(float(episode_return))
        self.episodes += 1

    @property
    def score(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def report(self, frames: int, *, score: float | None = None, episodes: int | None = None,
               force: bool = False, **extra) -> None:
        now = time.time()
        if not force and now - self.last_print < self.every_s:
            return
        self.last_print = now
        score = self.score if score is None else score
        if score is not None and not math.isfinite(score):
            score = None
        line = {"wall": now, "frames": int(frames), "episodes": self.episodes if episodes is None else int(episodes),
                "score": score, **extra}
        print(PROGRESS_PREFIX + json.dumps(line), flush=True)


def exit_on_sigterm() -> None:
    """SIGTERM (the harness stopping the run) unwinds through `finally` blocks, as Ctrl-C does."""
    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.exit(2)
