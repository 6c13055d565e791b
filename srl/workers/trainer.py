"""The trainer worker: a thin shell around a `Batcher` and a `Learner` (`srl.learn`).

Samples come in on `samples`: actors' trajectories go through the batcher (the staleness
bound) into training batches; a replay buffer's batches (`srl.workers.buffer`) are each one
step as they come, counted as the env steps the buffer says they stand for, and the
algorithm's new priorities for their rows (`Algorithm.priorities`) go back to that buffer.
Each new version goes out on `parameters`. Data-parallel trainers (`trainers.count` > 1)
share their gradients (`srl.workers.ddp`); rank 0 publishes and checkpoints for all.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import numpy as np

from srl.api.components import make_algorithm, make_env, make_policy, spaces_of
from srl.api.run_paths import RunPaths
from srl.api.settings import TrainerSettings
from srl.api.worker import Port, Supervision
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.learn import checkpoint
from srl.learn.batcher import Batcher
from srl.learn.learner import Diverged, Learner
from srl.streams.meter import Mean
from srl.streams.parameters import FanOut, open_publisher
from srl.streams.samples import DrainingConsumer, Meta, SampleConsumer
from srl.workers.base import FatalError, Worker
from srl.workers.ddp import DataParallel

log = logging.getLogger(__name__)
#: Versions whose weight digests a data-parallel trainer reports (a few heartbeats' worth).
DIGESTS_KEPT = 256


class TrainerWorker(Worker):
    ports = {"samples": Port("samples", "consume"), "parameters": Port("parameters", "produce")}
    # Data-parallel trainers wait on each other in every gradient exchange: they restart
    # together, from the last checkpoint.
    supervision = Supervision(scope="group", from_checkpoint=True)
    counters = ("trained_steps",)
    progress = "trained_steps"
    # A population manager tells it to save, to load another member's weights, to change settings.
    takes_commands = True
    Config = TrainerSettings
    settings: TrainerSettings

    def setup(self) -> None:
        s = self.settings
        env = make_env(s.env)
        #: With several policies: the one this group trains (its agents' spaces, its checkpoint directory).
        self.policy_name = s.policy_name
        policy = make_policy(s.policy, *spaces_of(env, s.agents[0] if s.agents else None), device=s.trainers.device)
        env.close()
        checkpoints = RunPaths(self.spec.run_dir).checkpoints(self.policy_name)
        path = checkpoint.latest(checkpoints) if self.spec.resume else None
        state = checkpoint.load(path) if path is not None else None
        self.env_steps_at_start = checkpoint.info(path).get("env_steps", 0) if path is not None else 0
        if state is not None:
            policy.load_state_dict(state["policy"])
            log.info("restored %s: version %d, %d env steps", path.name, policy.version, self.env_steps_at_start)
        self.rank, world_size = self.spec.index, self.spec.group_size
        self.ddp = None
        if world_size > 1:
            self.ddp = DataParallel(self.ctx.names, self.ctx.host, self.rank, world_size, s.trainers.device,
                                    generation=self.spec.generation, shm_prefix=self.ctx.shm_prefix,
                                    mode=s.trainers.data_parallel, group=self.spec.group,
                                    stopping=lambda: self.stopping)
            self.ddp.attach(policy)
        self.publisher = None
        if self.rank == 0:  # one trainer speaks for all: they hold identical parameters
            ends = [self.spec.streams["parameters"], *self.spec.streams["parameters"].copies]
            self.publisher = FanOut([open_publisher(self.ctx, end.key, end.transport) for end in ends])
            # Publish before building the algorithm: the first optimiser import takes most of
            # a second, and the actors can sample meanwhile.
            self.publisher.publish(policy.version, policy.get_params())
        self.published_version = policy.version
        self.learner = Learner(policy, make_algorithm(s.algorithm, policy), checkpoints, s.checkpoint.keep)
        self.learner.shared_weights = self.ddp is not None and self.ddp.shares_weights
        if state is not None:
            self.learner.restore(state)
        self.policy = policy
        self.batcher = Batcher(s.trainers.batch_steps, s.trainers.max_staleness,
                               self.learner.algorithm.corrects_staleness)
        samples = self.spec.streams["samples"]
        self.consumer = SampleConsumer(self.ctx, samples.key, samples.transport)
        if s.streams.when_full == "drop_oldest":
            self.consumer = DrainingConsumer(self.consumer, s.streams.trainer_queue)
        self.trained_steps = 0
        self.train_time = 0.0
        #: Per training step: its seconds, and how many versions behind the policy its samples were.
        self.step_time, self.version_lag = Mean(), Mean()
        #: Data-parallel: the digest of the weights at each of the last versions (equal on every rank).
        self.digests: dict[int, str] = {}
        self.last_stats: dict[str, float] = {}
        #: The checkpoint the last `load_checkpoint` command loaded.
        self.loaded = ""
        self.last_checkpoint = time.monotonic()
        self.started = time.monotonic()

    def poll(self) -> None:
        self.waiting_on = "samples"  # until a batch is complete and trains (`busy` clears it)
        got = self.consumer.get(self.wait_ms(100))
        while got is not None:
            meta, batch = got
            if meta.get("replay"):  # a replay buffer's batch: learn from it as it is
                self._train(batch, int(meta["env_steps"]), meta)
                break
            if (ready := self.batcher.add(batch, self.policy.version)) is not None:
                self._train(*ready)
                break
            got = self.consumer.get(0)
        if self.publisher is not None:
            self.publisher.tick()
            if time.monotonic() - self.last_checkpoint > self.settings.checkpoint.every_s:
                self.save_checkpoint()

    def _train(self, batch: NamedArray, env_steps: int, replay: Meta | None = None) -> None:
        """One learner step: on a batch of trajectories, or on a replay buffer's batch (`replay`:
        its meta), whose sender then gets the rows' new priorities if the algorithm has them."""
        version = batch[keys.VERSION] if replay else batch[keys.VERSION][:-1]
        self.version_lag.add(self.policy.version - float(version.mean()))
        start = time.monotonic()
        with self.busy():  # a CNN step on a CPU can outlast the heartbeat timeout
            self.last_stats = self.learner.step(batch, replayed=replay is not None)
        if replay is not None and (priorities := self.learner.algorithm.priorities()) is not None:
            self.consumer.reply(replay, NamedArray({keys.REPLAY_INDEX: batch[keys.REPLAY_INDEX],
                                                    keys.PRIORITY: priorities}))
        if self.ddp is not None:
            self.ddp.sync_buffers(self.policy)
            self.digests[self.policy.version] = self._digest()
            if len(self.digests) > DIGESTS_KEPT:
                del self.digests[min(self.digests)]
        took = time.monotonic() - start
        self.step_time.add(took)
        self.train_time += took
        self.trained_steps += env_steps
        if not self.learner.finite():
            try:
                self.learner.roll_back(self.settings.trainers.on_diverge)
            except Diverged as exc:
                raise FatalError(str(exc)) from None
        self._publish()

    def _publish(self) -> None:
        if self.publisher is not None and self.policy.version != self.published_version:
            self.publisher.publish(self.policy.version, self.policy.get_params())
            self.published_version = self.policy.version

    def save_checkpoint(self) -> None:
        env_steps = self.controller_info.get("env_steps", self.env_steps_at_start)
        try:
            saved = self.learner.save(env_steps, self.trained_steps)
        except OSError as exc:  # a full disk or a read-only run directory: a restart cannot mend it
            raise FatalError(f"cannot write a checkpoint: {exc}") from exc
        if saved:
            self.last_checkpoint = time.monotonic()

    def command(self, command: dict[str, Any]) -> None:
        """A population manager's command, any of: `save_checkpoint` (now, so another member
        can copy it), `load_checkpoint` (the newest checkpoint in that directory: another
        member's weights, optimiser state and changed settings), `hyperparameters` (set these
        `algorithm.args` fields). The result goes out at once as a new version."""
        if command.get("save_checkpoint") and self.publisher is not None:
            self.save_checkpoint()
        if directory := command.get("load_checkpoint"):
            path = self.learner.load_from(directory)
            self.batcher.clear()  # the samples waiting were acted by the old weights
            self.loaded = path.name
            log.info("loaded %s as version %d", path, self.policy.version)
        self.learner.set_hyperparameters(command.get("hyperparameters") or {})
        self._publish()

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "consumer"):
            return {}
        return {"policy_version": self.policy.version, "trained_steps": self.trained_steps,
                "fps": self.trained_steps / max(time.monotonic() - self.started, 1e-9),
                "dropped_stale": self.batcher.dropped_stale, "kept_stale": self.batcher.kept_stale,
                "rollbacks": self.learner.rollbacks, "dropped": self.consumer.dropped,
                "dropped_oldest": getattr(self.consumer, "dropped_oldest", 0),
                "train_fps": self.trained_steps / max(self.train_time, 1e-9), "train": self.last_stats,
                "step_ms": self.step_time.take(1000), "version_lag": self.version_lag.take(),
                "sample_queue": len(self.batcher.held) + self.consumer.queued,
                # The algorithm's numeric settings as they are now (a population changes some).
                "hyperparameters": {k: v for k, v in self.learner.algorithm.config.model_dump().items()
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)},
                **({"loaded": self.loaded} if self.loaded else {}),
                **({"param_digest": self.digests.get(self.policy.version) or self._digest(),
                    "param_digests": dict(self.digests)} if self.ddp is not None else {}),
                **({"metrics": self._policy_metrics()} if self.policy_name and self.rank == 0 else {})}

    def _policy_metrics(self) -> dict[str, Any]:
        """This policy's numbers in the run's metrics, under its name (several policies train at once)."""
        p = self.policy_name
        return {f"{p}/policy_version": self.policy.version, f"{p}/train": self.last_stats}

    def _digest(self) -> str:
        """A short hash of the weights: equal across data-parallel trainers, step after step."""
        digest = hashlib.sha256()
        for _, leaf in self.policy.get_params().items_flat():
            digest.update(np.ascontiguousarray(leaf).tobytes())
        return digest.hexdigest()[:16]

    def endpoints(self) -> list[str]:
        if not hasattr(self, "consumer"):
            return []
        return [self.consumer.link.address, *(self.publisher.addresses if self.publisher is not None else [])]

    def teardown(self) -> None:
        if hasattr(self, "consumer") and self.publisher is not None:
            self.save_checkpoint()
        for closable in ("consumer", "publisher", "ddp"):
            if getattr(self, closable, None) is not None:
                getattr(self, closable).close()
