"""The buffer worker: a thin shell around a `ReplayBuffer`, between actors and trainers.

Trajectories come in on `samples` (each buffer serves its share of the actors); batches go
out on `replay` to a trainer, which answers each with its rows' new priorities. The buffer
holds the configured replay ratio (updates per env step) both ways: it sends no more
updates than the env steps it took allow, and takes no more trajectories than the updates
sent allow (a short lead aside), so actors wait for a slow trainer through the stream's
credits and a fast trainer waits for samples. Without a ratio (Ape-X) neither waits.

Each batch's meta tells the trainer how many env steps it stands for: updates / ratio, or,
without a ratio, the env steps that arrived since the previous batch.

With its `reanalyse` port connected (MuZero), it also sends sequences it holds, drawn as the
trainers' are, to a reanalyse worker (`srl.workers.reanalyse`), `reanalyse_fraction` of them per
sequence sent to the trainers, and writes the fresh search targets that come back over the
stored ones. The trainers never wait for it: a reanalyse worker that falls behind is sent less.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from srl.api.components import make_env
from srl.api.run_paths import RunPaths
from srl.api.settings import BufferSettings
from srl.api.worker import Port, Supervision
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.learn import checkpoint
from srl.replay.buffer import ReplayBuffer
from srl.streams.link import LinkWaiter
from srl.streams.samples import SampleConsumer, SampleProducer
from srl.workers.base import FatalError, Worker

log = logging.getLogger(__name__)

#: Trajectories taken, and batches sent, per poll at most (so heartbeats and replies keep flowing).
MAX_PER_POLL = 8
#: Batches of sequences sent to the reanalyse worker and not yet taken by it, at most.
REANALYSE_IN_FLIGHT = 2
#: Longest idle wait (ms): short enough for heartbeats and commands to stay on time.
IDLE_WAIT_MS = 50


def make_buffer(settings: BufferSettings, seed: int = 0) -> ReplayBuffer:
    """The `ReplayBuffer` a buffer group's settings describe (what `srl bench` measures, too)."""
    r = settings.replay
    agents = 1
    if settings.joint:  # one unit holds every agent of an env: how many the env has
        env = make_env(settings.env)
        agents = len(env.agent_ids)
        env.close()
    return ReplayBuffer(r.capacity, settings.trajectory_length, agents, unit=settings.unit,
                        n_step=settings.n_step, gamma=settings.gamma, alpha=r.alpha, beta=r.beta, seed=seed,
                        also_store=settings.also_store)


class BufferWorker(Worker):
    ports = {"samples": Port("samples", "consume"), "replay": Port("samples", "produce"),
             "reanalyse": Port("samples", "produce", optional=True)}
    # A replaced buffer reloads what it last saved when `replay.save_contents` is on (a
    # restart, like a resumed run, starts "from the checkpoint"); otherwise it starts empty.
    supervision = Supervision(scope="worker", from_checkpoint=True)
    counters = ()
    Config = BufferSettings
    settings: BufferSettings

    def setup(self) -> None:
        s = self.settings
        self.replay = r = s.replay
        self.buffer = make_buffer(s, self.spec.seed)
        self.contents = RunPaths(self.spec.run_dir).replay_contents(self.spec.index)
        self.save_every_s = s.checkpoint.every_s
        if self.spec.resume and r.save_contents and self.contents.exists():
            with np.load(self.contents, allow_pickle=False) as saved:
                self.buffer.load_state_dict(dict(saved))
            log.info("replay contents reloaded: %d env steps", self.buffer.env_steps)
        samples, replay = self.spec.streams["samples"], self.spec.streams["replay"]
        self.consumer = SampleConsumer(self.ctx, samples.key, samples.transport)
        self.out = SampleProducer(self.ctx, replay.key, replay.transport, self.name, r.batches_in_flight)
        #: Reanalyse: where sequences go to be searched again, and how many went and came back.
        self.to_reanalyse = None
        if "reanalyse" in self.spec.streams:
            end = self.spec.streams["reanalyse"]
            self.to_reanalyse = SampleProducer(self.ctx, end.key, end.transport, self.name, REANALYSE_IN_FLIGHT)
        self.reanalyse_sent = self.refreshed = 0
        answers = [self.to_reanalyse.link] if self.to_reanalyse is not None else []
        self.either_side = LinkWaiter([self.out.link, self.consumer.link, *answers])
        self.trainer_side = LinkWaiter([self.out.link, *answers])
        self.ratio: float | None = r.replay_ratio
        self.updates_per_batch = r.updates_per_batch
        #: Env steps per batch at the ratio; a trajectory may overshoot the lead by its own size.
        self.steps_per_batch = self.updates_per_batch / self.ratio if self.ratio else 0.0
        self.lead = 2 * self.steps_per_batch
        #: Env steps taken from actors by this worker, and how many of them are warm-up (a
        #: reloaded buffer's contents count towards `learning_starts`, not towards the ratio).
        self.taken_steps = 0
        self.warmup = max(0, r.learning_starts - self.buffer.env_steps)
        self.updates_sent = 0
        self.unsent_steps = 0.0  # env steps not yet attributed to a batch (fractions carried)
        self.pending = None  # a sampled batch the trainer had no credit for yet
        self.priority_updates = 0
        self.started = self.last_save = time.monotonic()

    # ------------------------------------------------------------------ the ratio
    def _may_take(self) -> bool:
        if self.ratio is None:
            return True
        learned = self.updates_sent / self.ratio
        return self.taken_steps - self.warmup - learned < self.lead

    def _may_send(self) -> bool:
        if self.taken_steps < self.warmup or self.buffer.tree.total <= 0:
            return False
        if self.ratio is None:
            return True
        allowed = (self.taken_steps - self.warmup) * self.ratio
        return self.updates_sent + self.updates_per_batch <= allowed

    # ------------------------------------------------------------------ the loop
    def poll(self) -> None:
        for reply in self.out.take_replies():
            self.priority_updates += self.buffer.update_priorities(reply[keys.REPLAY_INDEX], reply[keys.PRIORITY])
        reanalysed = self._reanalyse()
        took = sent = 0
        while took < MAX_PER_POLL and self._may_take() and (got := self.consumer.get(0)) is not None:
            self._insert(got[1])
            took += 1
        while sent < MAX_PER_POLL and (self.pending is not None or self._may_send()):
            if not self._send():
                break
            sent += 1
        if not took and not sent and not reanalysed:
            # Idle: sleep until either side can move us on (a trajectory we may take, a
            # trainer's credit or priorities). Taking turns at short timeouts instead woke
            # this worker hundreds of times a second, CPU the trainers on the same cores lost.
            (self.either_side if self._may_take() else self.trainer_side).wait(IDLE_WAIT_MS)
        if self.replay.save_contents and time.monotonic() - self.last_save > self.save_every_s:
            self.save_contents()

    def _insert(self, trajectory: Any) -> None:
        steps = self.buffer.insert(trajectory)
        self.taken_steps += steps
        if self.ratio is None:
            self.unsent_steps += steps

    def _send(self) -> bool:
        """Send the pending batch or a fresh one; False when the trainer has no credit free."""
        if self.pending is None:
            self.pending = self.buffer.sample(self.replay.batch_size, self.updates_per_batch)
            self.unsent_steps += self.steps_per_batch
        steps = int(self.unsent_steps)
        if not self.out.try_put(self.pending, {"replay": 1, "env_steps": steps}):
            return False
        self.pending = None
        self.unsent_steps -= steps
        self.updates_sent += self.updates_per_batch
        return True

    def _reanalyse(self) -> bool:
        """Take fresh targets in; send sequences out while the fraction is behind and a slot is
        free. True: either happened."""
        out = self.to_reanalyse
        if out is None:
            return False
        answers = out.take_replies()
        for fresh in answers:
            self.refreshed += self.buffer.refresh(fresh.pop(keys.REPLAY_INDEX), fresh)
        n = self.replay.batch_size
        due = self.settings.reanalyse_fraction * self.updates_sent * n - self.reanalyse_sent
        if due < n or out.in_flight >= out.slots or self.buffer.tree.total <= 0:
            return bool(answers)
        drawn = self.buffer.sample(n)
        batch = NamedArray({k: drawn[k][0] for k in (keys.OBS, keys.ALIVE, keys.VERSION, keys.REPLAY_INDEX)})
        if out.try_put(batch):
            self.reanalyse_sent += n
        return True

    def save_contents(self) -> None:
        """Write the contents next to the checkpoints, atomically (plain arrays, no pickle)."""
        try:
            self.contents.parent.mkdir(parents=True, exist_ok=True)
            checkpoint.atomic_write(self.contents, lambda f: np.savez(f, **self.buffer.state_dict()))
        except OSError as exc:  # a full disk or a read-only run directory: a restart cannot mend it
            raise FatalError(f"cannot save the replay contents: {exc}") from exc
        self.last_save = time.monotonic()

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "started"):
            return {}
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {"held_steps": self.buffer.env_steps, "capacity": self.replay.capacity,
                "memory_mb": round(self.buffer.nbytes / 2**20, 1), "taken_steps": self.taken_steps,
                "updates_sent": self.updates_sent, "samples_in_per_s": self.taken_steps / elapsed,
                "fps": self.taken_steps / elapsed,  # env steps stored per second
                "batches_out_per_s": self.updates_sent / self.updates_per_batch / elapsed,
                "priority_updates": self.priority_updates, "dropped": self.consumer.dropped,
                **({"reanalyse_sent": self.reanalyse_sent, "refreshed": self.refreshed}
                   if self.to_reanalyse is not None else {})}

    def endpoints(self) -> list[str]:
        return [self.consumer.link.address] if hasattr(self, "consumer") else []

    def teardown(self) -> None:
        if hasattr(self, "out") and self.replay.save_contents:
            self.save_contents()
        for closable in ("consumer", "out", "to_reanalyse"):
            if getattr(self, closable, None) is not None:
                getattr(self, closable).close()
