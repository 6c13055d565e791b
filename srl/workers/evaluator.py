"""The evaluation worker: plays the newest policy version now and then, trains on nothing.

It reads the parameter stream as an actor does, but sends no samples: every `every_s`
seconds (or `every_versions` versions) it plays `episodes` episodes on envs of its own with
the version it holds, reports the result once into the run's metrics (`eval_return_mean`,
`eval_episodes`, `eval_version`, ...) and, when the score beats the best so far, saves the
weights it just played as the `best` checkpoint: the score and the weights are of one version.
`Evaluator` is that work without a process or a stream (tests drive it by hand);
`EvalWorker` is the shell around it.

    while running:
        version, weights = newest on `parameters`
        if schedule.due(version, now):
            result = play(slot, policy, episodes, deterministic)      # srl.workers.play
            if best.offer(result.return_mean, version): save `best`
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any


from srl.api.components import make_policy
from srl.api.config import ComponentConfig, EnvConfig, EvaluationConfig
from srl.api.run_paths import RunPaths
from srl.api.settings import EvalSettings
from srl.learn import checkpoint
from srl.workers.base import FatalError
from srl.workers.play import Evaluation, env_slot, play_policy
from srl.workers.rounds import RoundsWorker

log = logging.getLogger(__name__)

#: The longest an evaluation round may take for the final version to be evaluated as the run stops
#: (the controller waits `STOP_GRACE_S`, 10 s, for every worker's goodbye).
FINAL_ROUND_MAX_S = 4.0
#: The tag of the checkpoint with the best evaluation score (`checkpoints/best.pt`).
BEST = "best"
#: Eval envs take seeds from here on, apart from the actors' (run seed + 100,000 per actor).
SEED_BASE = 2**31


class EvalSchedule:
    """When to evaluate: a version newer than the last one evaluated, and either `every_s`
    seconds since the last evaluation began or `every_versions` versions past it. The first
    version held is evaluated at once (the untrained policy's score is the curve's start)."""

    def __init__(self, every_s: float | None, every_versions: int | None) -> None:
        self.every_s, self.every_versions = every_s, every_versions
        self.last_version: int | None = None
        self.last_time = -math.inf

    def due(self, version: int, now: float) -> bool:
        if self.last_version is None:
            return True
        if version <= self.last_version:
            return False
        return ((self.every_s is not None and now - self.last_time >= self.every_s)
                or (self.every_versions is not None and version - self.last_version >= self.every_versions))

    def started(self, version: int, now: float) -> None:
        self.last_version, self.last_time = version, now


class BestScore:
    """The best evaluation score so far; `offer` says whether a new one beats it (strictly)."""

    def __init__(self, score: float = -math.inf, version: int | None = None) -> None:
        self.score, self.version = score, version

    def offer(self, score: float, version: int) -> bool:
        if not score > self.score:  # NaN never wins
            return False
        self.score, self.version = score, version
        return True


class Evaluator:
    """The evaluation itself, without a process or a stream: envs of its own, a copy of the
    policy, the schedule and the best score. `hold` the newest weights, `evaluate` when `due`.

    The envs are reseeded each evaluation (seeds from `seed` up, none an actor's), so each
    evaluation plays fresh starts.
    """

    def __init__(self, env: EnvConfig, policy: ComponentConfig, settings: EvaluationConfig,
                 checkpoints: Path, seed: int) -> None:
        self.settings = settings
        self.slot = env_slot(env, min(settings.envs, settings.episodes), seed)
        self.policy = make_policy(policy, *self.slot.spaces)
        self.seed = seed
        self.version = -1  # none held yet
        self.schedule = EvalSchedule(settings.every_s, settings.every_versions)
        self.checkpoints = checkpoints
        self.best = BestScore()
        if (path := checkpoint.tagged(checkpoints, BEST)) is not None:  # a restarted worker, or --resume
            saved = checkpoint.info(path)
            self.best = BestScore(float(saved.get("eval_return_mean", -math.inf)), saved.get("version"))
        self.evaluations = 0

    def hold(self, version: int, weights: Any) -> None:
        """The newest weights published (the parameter stream's NamedArray)."""
        self.policy.set_params(weights, version)
        self.version = version

    def due(self, now: float) -> bool:
        return self.version >= 0 and self.schedule.due(self.version, now)

    def unevaluated(self) -> bool:
        """Whether the held version is newer than the last one evaluated."""
        return self.version >= 0 and self.version != self.schedule.last_version

    def evaluate(self, now: float, env_steps: int = 0) -> dict[str, Any]:
        """Play the held version; save it as `best` if it beats the best so far. Returns the metrics.

        `env_steps`: the run's count when the weights arrived, recorded with a `best`.
        """
        self.schedule.started(self.version, now)
        self.slot.seeds = [self.seed + self.evaluations * self.slot.n_envs + j for j in range(self.slot.n_envs)]
        result = play_policy(self.slot, self.policy, self.settings.episodes, self.settings.deterministic)
        self.evaluations += 1
        if self.best.offer(result.return_mean, self.version):
            self._save_best(result, env_steps)
        return {"eval_return_mean": result.return_mean,
                "eval_return_stderr": None if math.isnan(result.return_stderr) else result.return_stderr,
                "eval_length_mean": result.length_mean, "eval_episodes": result.episodes,
                "eval_version": self.version, "eval_best_return": self.best.score,
                "eval_best_version": self.best.version}

    def _save_best(self, result: Evaluation, env_steps: int) -> None:
        """The weights just played, as `best`: the policy only (all `srl evaluate` needs), no optimiser."""
        info = {"eval_return_mean": result.return_mean, "eval_episodes": result.episodes,
                "deterministic": self.settings.deterministic, "env_steps": env_steps, "policy_only": True}
        try:
            checkpoint.save_tagged(self.checkpoints, BEST, self.version, {"policy": self.policy.state_dict()}, info)
        except OSError as exc:  # a full disk or a read-only run directory: a restart cannot mend it
            raise FatalError(f"cannot write the best checkpoint: {exc}") from exc

    def close(self) -> None:
        self.slot.close()


class EvalWorker(RoundsWorker):
    """A shell around an `Evaluator`: the parameter stream in, `eval_*` metrics out (once each)."""

    seconds_key = "eval_s"
    Config = EvalSettings
    settings: EvalSettings

    def setup(self) -> None:
        s = self.settings
        self.evaluator = Evaluator(s.env, s.policy, s.evaluation, RunPaths(self.spec.run_dir).checkpoints(),
                                   seed=SEED_BASE + self.spec.seed + self.spec.index * 2**24)
        if self.evaluator.best.version is not None:
            log.info("the score to beat: %.2f (version %d, in best.json)", self.evaluator.best.score,
                     self.evaluator.best.version)
        self.env_steps_at_version = 0
        self.open_parameters()

    def take(self, version: int, weights: Any) -> None:
        self.evaluator.hold(version, weights)
        self.env_steps_at_version = int(self.controller_info.get("env_steps", 0))

    def round_due(self, now: float) -> bool:
        return self.evaluator.due(now)

    def play_round(self, now: float) -> dict[str, Any]:
        return self.evaluator.evaluate(now, self.env_steps_at_version)

    def log_round(self, result: dict[str, Any]) -> None:
        log.info("version %d: eval return %.2f over %d episodes in %.1f s; best %.2f (version %s)",
                 result["eval_version"], result["eval_return_mean"], result["eval_episodes"], result["eval_s"],
                 result["eval_best_return"], result["eval_best_version"])

    def counts(self) -> dict[str, Any]:
        return {"evaluations": self.evaluator.evaluations, "held_version": self.evaluator.version}

    def last_round_due(self) -> bool:
        """The final version is evaluated as the run stops, so `best` is the best of the whole run,
        when a round fits well within the controller's wait for goodbyes (a slow env's would be cut off)."""
        rounds_are_quick = self.last.get(self.seconds_key, math.inf) <= FINAL_ROUND_MAX_S
        return hasattr(self, "evaluator") and self.evaluator.unevaluated() and rounds_are_quick

    def close_rounds(self) -> None:
        if hasattr(self, "evaluator"):
            self.evaluator.close()
