"""The run's numbers: totals over workers, the window of episode returns, the stop rules.

Which worker's stats count toward which total is its kind's declaration
(`Worker.counters`): actors count env steps and episode returns, trainers the env steps
they learned from. A replaced worker's totals are kept, so a restart loses no count.
A worker may also put numbers of its own into the run's metrics: a `metrics` dict in its
stats lands once, in the next metrics line (an evaluation worker's `eval_return_mean`).
Envs' own per-episode statistics (`srl.api.env.EPISODE_STATS`, an actor's `episode_stats`)
are averaged over the same window as the returns, each on its own, and reported under
`env` (`env/box_move_max_m` in TensorBoard).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, Protocol

from srl.api.config import StopConfig
from srl.launch.supervision import WorkerState

#: Episodes in the window whose mean return the stop rule and the reports read.
RETURN_WINDOW = 100


class RunMetrics:
    def __init__(self, env_steps_at_start: int = 0) -> None:
        self.env_steps_at_start = env_steps_at_start
        self.returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW)
        #: The envs' own statistics of the last RETURN_WINDOW episodes that reported each.
        self.episode_stats: dict[str, collections.deque[float]] = {}
        #: Totals of workers that were replaced (their successors count from zero).
        self.retired: collections.Counter[str] = collections.Counter()
        self.frozen = False
        #: Returns taken since the last metrics line, in the order received (`record` empties it).
        self.unreported: list[float] = []
        #: Workers' own metrics (a `metrics` dict in their stats) for the next line, and the latest of each.
        self.reported_since: dict[str, Any] = {}
        self.reported: dict[str, Any] = {}
        #: Env steps that workers which died (alone or with their node) had stepped and not
        #: delivered to a trainer, as of their last heartbeats: what a fault cost.
        self.lost_env_steps = 0
        #: With several policies: each one's window of episode returns (averaged over its agents).
        self.policy_returns: dict[str, collections.deque[float]] = {}

    def take(self, worker: WorkerState, stats: dict[str, Any]) -> None:
        """A worker's newest stats; its finished episodes join the window (until the run stops)."""
        returns = stats.pop("episode_returns", [])
        episode_stats = stats.pop("episode_stats", None) or {}
        by_policy = stats.pop("policy_episode_returns", None) or {}
        if "episode_returns" in worker.counters and not self.frozen:
            self.returns.extend(float(r) for r in returns)
            self.unreported.extend(float(r) for r in returns)
            for name, values in episode_stats.items():
                self.episode_stats.setdefault(name, collections.deque(maxlen=RETURN_WINDOW)).extend(values)
            for policy, some in by_policy.items():
                window = self.policy_returns.setdefault(str(policy), collections.deque(maxlen=RETURN_WINDOW))
                window.extend(float(r) for r in some)
        own = stats.pop("metrics", None)
        if isinstance(own, dict):  # taken while stopping too: the summary shows what the worker last did
            self.reported_since.update(own)
            self.reported.update(own)
        worker.stats = stats

    def freeze(self) -> None:
        """The run is stopping: the summary reports the window that met the stop condition."""
        self.frozen = True

    def retire(self, worker: WorkerState) -> None:
        for counter in worker.counters:
            if counter != "episode_returns":
                self.retired[counter] += int(worker.stats.get(counter, 0))

    def total(self, counter: str, workers: Iterable[WorkerState]) -> int:
        live = sum(int(w.stats.get(counter, 0)) for w in workers if counter in w.counters)
        return self.retired[counter] + live + (self.env_steps_at_start if counter == "env_steps" else 0)

    @property
    def return_mean(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def env_stats(self) -> dict[str, float]:
        """The mean of each env statistic over its window, by name."""
        return {name: round(sum(values) / len(values), 4) for name, values in sorted(self.episode_stats.items())}

    def policy_return_means(self) -> dict[str, float]:
        """`<policy>/episode_return_mean` of each policy's window (several policies)."""
        return {f"{p}/episode_return_mean": sum(w) / len(w) for p, w in self.policy_returns.items() if w}

    def record(self, workers: list[WorkerState], elapsed: float, fps: float) -> dict[str, Any]:
        """One line of metrics.jsonl.

        Lines come on a timer, so their numbers differ between two runs of one seed; their
        `episode_returns` (every episode finished since the line before), read in sequence
        across the file, do not.
        """
        train = next((w.stats["train"] for w in workers if w.stats.get("train")), {})
        returns, self.unreported = self.unreported, []
        own, self.reported_since = self.reported_since, {}
        line = {"time_s": round(elapsed, 3), "env_steps": self.total("env_steps", workers), "fps": round(fps, 1),
                "episode_return_mean": self.return_mean, "episodes": len(self.returns),
                "policy_version": policy_version(workers), "trained_steps": self.total("trained_steps", workers),
                **{counter: sum(int(w.stats.get(counter, 0)) for w in workers)
                   for counter in ("dropped_stale", "kept_stale")}, "train": train,
                "episode_returns": returns, **self.policy_return_means()}
        if self.episode_stats:
            line["env"] = self.env_stats()
        if self.lost_env_steps:
            line["lost_env_steps"] = self.lost_env_steps
        return {**line, **{key: value for key, value in own.items() if key not in line}}


def policy_version(workers: Iterable[WorkerState]) -> int:
    """The newest version any worker holds (the publishing trainer's)."""
    return max((int(w.stats.get("policy_version") or 0) for w in workers), default=0)


class StopRule(Protocol):
    """When a run stops: a reason once it should, else None."""

    def reason(self, metrics: RunMetrics, env_steps: int, elapsed: float) -> str | None: ...


class StopRules:
    """The config's `stop:` section: whichever condition is met first."""

    def __init__(self, stop: StopConfig) -> None:
        self.stop = stop

    def reason(self, metrics: RunMetrics, env_steps: int, elapsed: float) -> str | None:
        stop = self.stop
        if stop.env_steps is not None and env_steps >= stop.env_steps:
            return f"env_steps reached {stop.env_steps}"
        if stop.time_s is not None and elapsed >= stop.time_s:
            return f"time_s reached {stop.time_s}"
        mean = metrics.return_mean
        if (stop.episode_return is not None and len(metrics.returns) >= min(RETURN_WINDOW, 10)
                and mean is not None and mean >= stop.episode_return):
            return f"episode_return_mean {mean:.1f} >= {stop.episode_return}"
        evaluated = metrics.reported.get("eval_return_mean")
        if stop.eval_return is not None and evaluated is not None and evaluated >= stop.eval_return:
            return f"eval_return_mean {evaluated:.1f} >= {stop.eval_return}"
        return None
