"""The trainer worker: samples in, `algorithm.step(batch)` out, parameters published.

Fed by actors, the buffer is on-policy with a staleness bound: a trajectory whose oldest
action came from a policy more than `max_staleness` versions behind is dropped (and
counted), unless the algorithm corrects for staleness (`Algorithm.corrects_staleness`,
V-trace), which learns from every sample. Reuse of each sample is bounded by the algorithm
(PPO's epochs). Fed by replay buffer workers (`srl.workers.buffer`), each batch is one
`step` as it comes, counted as the env steps the buffer says it stands for, and the
algorithm's new priorities for its rows (`Algorithm.priorities`) go back to that buffer.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import numpy as np

from srl.api.env import spaces_of
from srl.api.run_paths import RunPaths
from srl.api.worker import Port, Supervision
from srl.data import keys
from srl.data.named_array import NamedArray, concat
from srl.streams.meter import Mean
from srl.streams.parameters import FanOut, open_publisher
from srl.streams.samples import DrainingConsumer, Meta, SampleConsumer
from srl.workers import checkpoint
from srl.workers.base import FatalError, Worker
from srl.workers.components import make_algorithm, make_env, make_policy
from srl.workers.ddp import DataParallel

log = logging.getLogger(__name__)

class TrainerWorker(Worker):
    ports = {"samples": Port("samples", "consume"), "parameters": Port("parameters", "produce")}
    # Data-parallel trainers wait on each other in every gradient exchange: they restart
    # together, from the last checkpoint.
    supervision = Supervision(scope="group", from_checkpoint=True)
    counters = ("trained_steps",)
    progress = "trained_steps"
    # A population manager tells it to save, to load another member's weights, to change settings.
    takes_commands = True

    def setup(self) -> None:
        s = self.spec.settings
        env = make_env(s["env"])
        #: With several policies: the one this group trains (its agents' spaces, its checkpoint directory).
        self.policy_name = s.get("policy_name")
        agent = s["agents"][0] if s.get("agents") else None
        self.policy = make_policy(s["policy"], *spaces_of(env, agent), device=s["trainers"]["device"])
        env.close()
        self.batch_steps = s["trainers"]["batch_steps"]
        self.max_staleness = s["trainers"]["max_staleness"]
        self.checkpoint_dir = RunPaths(self.spec.run_dir).checkpoints(self.policy_name)
        self.checkpoint_every_s = s["checkpoint"]["every_s"]
        self.keep = s["checkpoint"]["keep"]
        self.env_steps_at_start = 0
        path = checkpoint.latest(self.checkpoint_dir) if self.spec.resume else None
        state = checkpoint.load(path) if path is not None else None
        #: `algorithm.args` fields changed while training (a population's explore), saved with
        #: the checkpoints so that a restart keeps them.
        self.hyperparameters: dict[str, float] = {}
        #: The checkpoint the last `load_checkpoint` command loaded.
        self.loaded = ""
        if state is not None:
            self.policy.load_state_dict(state["policy"])
            self.env_steps_at_start = checkpoint.info(path).get("env_steps", 0)
        self.rank, world_size = self.spec.index, self.spec.group_size
        self.ddp = None
        if world_size > 1:
            self.ddp = DataParallel(self.ctx.names, self.ctx.host, self.rank, world_size, s["trainers"]["device"],
                                    generation=self.spec.generation, shm_prefix=self.ctx.shm_prefix,
                                    mode=s["trainers"]["data_parallel"], group=self.spec.group,
                                    stopping=lambda: self.stopping)
            self.ddp.attach(self.policy)
        self.publisher = None
        if self.rank == 0:  # one trainer speaks for all: they hold identical parameters
            ends = [self.spec.streams["parameters"], *self.spec.streams["parameters"].copies]
            self.publisher = FanOut([open_publisher(self.ctx, end.key, end.transport) for end in ends])
            # Publish before building the algorithm: the first optimiser import takes most of
            # a second, and the actors can sample meanwhile.
            self.publisher.publish(self.policy.version, self.policy.get_params())
        self.published_version = self.policy.version
        self.algorithm = make_algorithm(s["algorithm"], self.policy)
        if state is not None:
            self.algorithm.load_state_dict(state["algorithm"])
            self._set_hyperparameters(state.get("hyperparameters") or {})
        samples = self.spec.streams["samples"]
        self.consumer = SampleConsumer(self.ctx, samples.key, samples.transport)
        if s["streams"]["when_full"] == "drop_oldest":
            self.consumer = DrainingConsumer(self.consumer, s["streams"]["trainer_queue"])
        self.buffer: list[NamedArray] = []
        self.buffered = 0
        self.trained_steps = 0
        self.dropped_stale = 0
        #: Env steps past the bound that an algorithm correcting for staleness learned from.
        self.kept_stale = 0
        self.rollbacks = 0
        self.train_time = 0.0
        #: Per training step: its seconds, and how many versions behind the policy its samples were.
        self.step_time, self.version_lag = Mean(), Mean()
        self.last_stats: dict[str, float] = {}
        self.last_checkpoint = time.monotonic()
        self.started = time.monotonic()

    def poll(self) -> None:
        self.waiting_on = "samples"  # until a batch is complete and trains (`busy` clears it)
        got = self.consumer.get(100)
        while got is not None:
            meta, batch = got
            if meta.get("replay"):  # a replay buffer's batch: learn from it as it is
                self._train(batch, int(meta["env_steps"]), meta)
                break
            steps = batch[keys.REWARD][:-1].size
            stale = self.policy.version - int(batch[keys.VERSION].min()) > self.max_staleness
            if stale and not self.algorithm.corrects_staleness:
                self.dropped_stale += steps
            else:
                if stale:
                    self.kept_stale += steps
                self.buffer.append(batch)
                self.buffered += steps
            if self.buffered >= self.batch_steps:
                batch, steps = concat(self.buffer, axis=1), self.buffered
                self.buffer, self.buffered = [], 0
                self._train(batch, steps)
                break
            got = self.consumer.get(0)
        if self.publisher is not None:
            self.publisher.tick()
            if time.monotonic() - self.last_checkpoint > self.checkpoint_every_s:
                self.save_checkpoint()

    def _train(self, batch: NamedArray, env_steps: int, replay: Meta | None = None) -> None:
        """One `algorithm.step`: on a batch of trajectories, or on a replay buffer's batch (`replay`:
        its meta), whose sender then gets the rows' new priorities if the algorithm has them."""
        version = batch[keys.VERSION] if replay else batch[keys.VERSION][:-1]
        self.version_lag.add(self.policy.version - float(version.mean()))
        start = time.monotonic()
        # Learn first, with the statistics the actors normalised this batch with (so log-prob
        # ratios compare like with like); then fold the batch into them for the next version.
        # Replayed rows repeat, so they are not folded into running statistics (no bundled
        # value policy keeps any).
        with self.busy():  # a CNN step on a CPU can outlast the heartbeat timeout
            self.last_stats = self.algorithm.step(batch)
        if replay is None:
            self.policy.update_statistics(batch[keys.OBS][:-1])
        else:
            priorities = self.algorithm.priorities()
            if priorities is not None:
                self.consumer.reply(replay, NamedArray({keys.REPLAY_INDEX: batch[keys.REPLAY_INDEX],
                                                        keys.PRIORITY: priorities}))
        if self.ddp is not None:
            self.ddp.sync_buffers(self.policy)
        took = time.monotonic() - start
        self.step_time.add(took)
        self.train_time += took
        self.trained_steps += env_steps
        if not self._weights_finite():
            self._diverged()
        if self.publisher is not None and self.policy.version != self.published_version:
            self.publisher.publish(self.policy.version, self.policy.get_params())
            self.published_version = self.policy.version

    def _weights_finite(self) -> bool:
        """Whether every weight is finite (one small reduction per tensor, once per training step)."""
        params = self.policy.parameters()
        if self.ddp is not None and self.ddp.shares_weights:
            # Other trainers write these weights as we read them, and `isfinite` reads each
            # element twice (x == x): two different values would pass for a NaN. A copy holds still.
            params = [p.detach().clone() for p in params]
        return all(bool(p.isfinite().all()) for p in params)

    def _diverged(self) -> None:
        """Non-finite weights after a step: stop the run, or go back to the last checkpoint."""
        version = self.policy.version
        path = checkpoint.latest(self.checkpoint_dir)
        if path is None:
            raise FatalError(f"the policy's weights became non-finite (NaN or infinity) at version {version}, "
                             "and there is no checkpoint to roll back to")
        if self.spec.settings["trainers"].get("on_diverge", "stop") == "stop":
            raise FatalError(f"the policy's weights became non-finite (NaN or infinity) at version {version}; "
                             f"stopping (trainers.on_diverge=stop); {path.name} holds the last finite weights")
        state = checkpoint.load(path)
        self.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        # Readers take only newer versions: the rolled-back weights go out under a new one.
        self.policy.version = version + 1
        self.rollbacks += 1
        log.warning("weights non-finite at version %d: rolled back to %s, published as version %d",
                    version, path.name, self.policy.version)

    def save_checkpoint(self) -> None:
        if not self._weights_finite():  # never rotate a good checkpoint away for a diverged one
            log.warning("weights are non-finite: checkpoint skipped")
            return
        env_steps = self.controller_info.get("env_steps", self.env_steps_at_start)
        state = {"policy": self.policy.state_dict(), "algorithm": self.algorithm.state_dict(),
                 **({"hyperparameters": dict(self.hyperparameters)} if self.hyperparameters else {})}
        try:
            checkpoint.save(self.checkpoint_dir, self.policy.version, state,
                            {"env_steps": env_steps, "trained_steps": self.trained_steps}, self.keep)
        except OSError as exc:  # a full disk or a read-only run directory: a restart cannot mend it
            raise FatalError(f"cannot write a checkpoint: {exc}") from exc
        self.last_checkpoint = time.monotonic()

    def command(self, command: dict[str, Any]) -> None:
        """A population manager's command, any of: `save_checkpoint` (now, so another member
        can copy it), `load_checkpoint` (the newest checkpoint in that directory: another
        member's weights, optimiser state and changed settings), `hyperparameters` (set these
        `algorithm.args` fields). The result goes out at once as a new version."""
        if command.get("save_checkpoint") and self.publisher is not None:
            self.save_checkpoint()
        if directory := command.get("load_checkpoint"):
            path = checkpoint.latest(directory)
            if path is None:
                raise FileNotFoundError(f"no checkpoint to load in {directory}")
            state, version = checkpoint.load(path), self.policy.version
            self.policy.load_state_dict(state["policy"])
            self.algorithm.load_state_dict(state["algorithm"])
            self.hyperparameters = {}
            self._set_hyperparameters(state.get("hyperparameters") or {})
            # Readers take only newer versions; the samples waiting were acted by the old weights.
            self.policy.version = version + 1
            self.buffer, self.buffered = [], 0
            self.loaded = path.name
            log.info("loaded %s (version %d) as version %d", path, int(state["policy"]["version"]),
                     self.policy.version)
        self._set_hyperparameters(command.get("hyperparameters") or {})
        if self.publisher is not None and self.policy.version != self.published_version:
            self.publisher.publish(self.policy.version, self.policy.get_params())
            self.published_version = self.policy.version

    def _set_hyperparameters(self, values: dict[str, float]) -> None:
        if values:
            self.algorithm.set_hyperparameters(values)
            self.hyperparameters.update(values)
            log.info("hyper-parameters now %s", values)

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "consumer"):
            return {}
        return {"policy_version": self.policy.version, "trained_steps": self.trained_steps,
                "fps": self.trained_steps / max(time.monotonic() - self.started, 1e-9),
                "dropped_stale": self.dropped_stale, "kept_stale": self.kept_stale, "rollbacks": self.rollbacks,
                "dropped": self.consumer.dropped,
                "dropped_oldest": getattr(self.consumer, "dropped_oldest", 0),
                "train_fps": self.trained_steps / max(self.train_time, 1e-9), "train": self.last_stats,
                "step_ms": self.step_time.take(1000), "version_lag": self.version_lag.take(),
                "sample_queue": len(self.buffer) + self.consumer.queued,
                # The algorithm's numeric settings as they are now (a population changes some).
                "hyperparameters": {k: v for k, v in self.algorithm.config.model_dump().items()
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)},
                **({"loaded": self.loaded} if self.loaded else {}),
                **({"param_digest": self._digest()} if self.ddp is not None else {}),
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
