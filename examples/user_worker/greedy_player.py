"""A worker kind of your own that acts: it plays greedy episodes of the run's env with the run's
policy, at each new version published, and reports their returns beside the run's training.

Nothing inside `srl/` changes to run it. A config adds a group of this kind by import path and
joins its port to the experiment's parameter stream (`greedy-cartpole.yaml` beside this file):

    workers:
      greedy:
        kind: user_worker.greedy_player:GreedyPlayer   # importable: PYTHONPATH=examples
        settings: {episodes: 2}
        streams: {parameters: parameters}

Its `Config` names `env` and `policy`, sections of the experiment's config, and leaves them out of
the group's settings: the run's own sections fill them in. Its numbers appear in
`srl status --json` under the worker's `stats`.
"""

from __future__ import annotations

import logging
from typing import Any

import pydantic

from srl.api.components import make_policy
from srl.api.config import ComponentConfig, EnvConfig
from srl.api.worker import Port
from srl.workers.base import Worker
from srl.workers.play import env_slot, play_policy

log = logging.getLogger(__name__)


class GreedyPlayer(Worker):
    """Plays `episodes` greedy episodes with each version at least `every_versions` past the last one played."""

    ports = {"parameters": Port("parameters", "consume")}

    class Config(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        #: The run's env and policy sections (the group's settings leave them out).
        env: EnvConfig
        policy: ComponentConfig
        #: Episodes played with each version.
        episodes: pydantic.PositiveInt = 2
        #: Versions to skip between two rounds of play.
        every_versions: pydantic.PositiveInt = 1

    settings: Config

    def setup(self) -> None:
        # Seeds apart from the actors', so these episodes start where training did not.
        self.slot = env_slot(self.settings.env, n_envs=1, seed=2**30 + self.spec.seed)
        self.policy = make_policy(self.settings.policy, *self.slot.spaces)
        self.parameters = self.subscribe("parameters")
        self.played_version, self.return_mean, self.rounds = -1, None, 0

    def poll(self) -> None:
        got = self.parameters.poll()
        if got is None or got[0] < self.played_version + self.settings.every_versions:
            self.waiting_on = "parameters"
            self.pause(0.01)  # a new version comes a few times a second at most
            return
        self.waiting_on = ""
        version, weights, _ = got
        self.policy.set_params(weights, version)
        result = play_policy(self.slot, self.policy, self.settings.episodes, deterministic=True)
        self.played_version, self.return_mean, self.rounds = version, result.return_mean, self.rounds + 1
        log.info("version %d: greedy return %.1f over %d episodes", version, result.return_mean, result.episodes)

    def stats(self) -> dict[str, Any]:
        return {"greedy_version": self.played_version, "greedy_return_mean": self.return_mean,
                "greedy_rounds": self.rounds}

    def teardown(self) -> None:
        if hasattr(self, "parameters"):
            self.parameters.close()
            self.slot.close()
