"""Run modes: ways of running an experiment that plug into the graph and the controller
(`RunMode`). Evaluation during training, self-play against a policy pool, population-based
training. A new mode is a `RunMode` subclass added to `MODES`; the controller names none.
"""

from __future__ import annotations

from srl.api.config import ExperimentConfig
from srl.launch.modes.base import RunMode
from srl.launch.modes.evaluation import Evaluation
from srl.launch.modes.population import Population
from srl.launch.modes.self_play import SelfPlay

#: In the order their graphs apply, within each stage.
MODES: list[type[RunMode]] = [Evaluation, SelfPlay, Population]


def active_modes(config: ExperimentConfig) -> list[type[RunMode]]:
    return [mode for mode in MODES if mode.active(config)]


__all__ = ["MODES", "RunMode", "active_modes"]
