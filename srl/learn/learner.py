"""The learner: the policy and the algorithm that trains it, their versions, checkpoints and rollback.

No sockets and no process: a trainer worker feeds it batches and publishes `policy` when its
version changes; a test drives it by hand.

    learner = Learner(policy, algorithm, checkpoints_dir, keep=3)
    learner.restore(checkpoint.load(path))         # a resumed run or a restarted trainer
    stats = learner.step(batch)                    # one algorithm step; statistics folded in after
    if not learner.finite(): learner.roll_back(on_diverge)
    learner.save(env_steps, trained_steps)         # never non-finite weights

Rollback walks back through the kept checkpoints to the newest one whose weights are finite;
with none, the run stops (`FatalError`) with the reason.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from srl.api.algorithm import Algorithm
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.learn import checkpoint

log = logging.getLogger(__name__)


class Diverged(RuntimeError):
    """The weights became non-finite and the run must stop (the message says why)."""


class Learner:
    def __init__(self, policy: Policy, algorithm: Algorithm, checkpoints: str | Path, keep: int) -> None:
        self.policy = policy
        self.algorithm = algorithm
        self.checkpoints = Path(checkpoints)
        self.keep = keep
        #: `algorithm.args` fields changed while training (a population's explore), saved with
        #: the checkpoints so that a restart keeps them.
        self.hyperparameters: dict[str, float] = {}
        self.rollbacks = 0
        #: Weights other processes write as this one reads (hogwild): `finite` reads a copy.
        self.shared_weights = False

    # ---------------------------------------------------------------- training
    def step(self, batch: NamedArray, replayed: bool = False) -> dict[str, float]:
        """One algorithm step. Learn first, with the statistics the actors normalised this batch
        with (so log-prob ratios compare like with like); then fold the batch into them for the
        next version. Replayed rows repeat, so they are not folded into running statistics."""
        stats = self.algorithm.step(batch)
        if not replayed:
            self.policy.update_statistics(batch[keys.OBS][:-1])
        return stats

    def finite(self) -> bool:
        """Whether every weight is finite (one small reduction per tensor, once per training step)."""
        params = self.policy.parameters()
        if self.shared_weights:
            # Other trainers write these weights as we read them, and `isfinite` reads each
            # element twice (x == x): two different values would pass for a NaN. A copy holds still.
            params = [p.detach().clone() for p in params]
        return all(bool(p.isfinite().all()) for p in params)

    def roll_back(self, on_diverge: str) -> str:
        """Non-finite weights after a step: raise `Diverged` (`on_diverge: stop`, or nothing finite
        to go back to), or load the newest checkpoint with finite weights under a new version
        (readers take only newer versions). Returns the checkpoint's name."""
        version = self.policy.version
        kept = [path for v in reversed(checkpoint.versions(self.checkpoints))
                if checkpoint.is_valid(path := checkpoint.path_of(self.checkpoints, v))]
        if not kept:
            raise Diverged(f"the policy's weights became non-finite (NaN or infinity) at version {version}, "
                           "and there is no checkpoint to roll back to")
        if on_diverge == "stop":
            raise Diverged(f"the policy's weights became non-finite (NaN or infinity) at version {version}; "
                           f"stopping (trainers.on_diverge=stop); {kept[0].name} holds the last finite weights")
        for path in kept:
            state = checkpoint.load(path)
            if not checkpoint.finite(state["policy"]):
                log.warning("%s holds non-finite weights: not a point to roll back to", path.name)
                continue
            self._load(state)
            self.policy.version = version + 1
            self.rollbacks += 1
            log.warning("weights non-finite at version %d: rolled back to %s, published as version %d",
                        version, path.name, self.policy.version)
            return path.name
        raise Diverged(f"the policy's weights became non-finite (NaN or infinity) at version {version}, and none "
                       f"of the {len(kept)} checkpoints in {self.checkpoints} holds finite weights")

    # ---------------------------------------------------------------- checkpoints
    def restore(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state (`checkpoint.load`): weights, optimiser, changed settings."""
        self._load(state)

    def save(self, env_steps: int, trained_steps: int) -> bool:
        """Checkpoint the weights, optimiser and changed settings; False (and nothing written) when
        the weights are non-finite: a good checkpoint is never rotated away for a diverged one.
        OSError when it cannot be written."""
        if not self.finite():
            log.warning("weights are non-finite: checkpoint skipped")
            return False
        state = {"policy": self.policy.state_dict(), "algorithm": self.algorithm.state_dict(),
                 **({"hyperparameters": dict(self.hyperparameters)} if self.hyperparameters else {})}
        checkpoint.save(self.checkpoints, self.policy.version, state,
                        {"env_steps": env_steps, "trained_steps": trained_steps}, self.keep)
        return True

    def load_from(self, directory: str | Path) -> Path:
        """Take the newest checkpoint of `directory` (another population member's): its weights,
        optimiser state and changed settings, under a new version. Returns its path."""
        path = checkpoint.latest(directory)
        if path is None:
            raise FileNotFoundError(f"no checkpoint to load in {directory}")
        version = self.policy.version
        self.hyperparameters = {}
        self._load(checkpoint.load(path))
        self.policy.version = version + 1  # readers take only newer versions
        return path

    def _load(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.set_hyperparameters(state.get("hyperparameters") or {})

    def set_hyperparameters(self, values: dict[str, float]) -> None:
        if values:
            self.algorithm.set_hyperparameters(values)
            self.hyperparameters.update(values)
            log.info("hyper-parameters now %s", values)
