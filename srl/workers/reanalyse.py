"""The reanalyse worker (MuZero Reanalyse, Schrittwieser et al. 2021): stored play searched again
with the newest parameters.

A buffer sends it sequences it holds (observations and replay indices, drawn by priority as the
trainers' batches are); it searches from every row with the newest version on `parameters` and
answers each batch with fresh `keys.VALUE` and `keys.SEARCH_POLICY`, which the buffer writes over
the stored ones (`ReplayBuffer.refresh`). The learner's value targets bootstrap from those values
and its policy learns those visit distributions, so old play teaches what the newer model finds
in it. The buffer paces it (`BufferSettings.reanalyse_fraction`); a buffer's reanalyse worker is
the one of the same index.

    policy.set_params(newest weights)
    fresh = reanalyse(policy, batch)        # {VALUE, SEARCH_POLICY, REPLAY_INDEX}, as the batch is laid out
    answer the buffer with `fresh`
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from srl.api.components import make_env, make_policy, spaces_of
from srl.api.policy import ModelPolicy
from srl.api.settings import ReanalyseSettings
from srl.api.worker import Port
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.streams.meter import Mean
from srl.streams.samples import SampleConsumer
from srl.workers.base import FatalError, Worker

#: Longest idle wait (ms) for a buffer's sequences: heartbeats and new parameters stay on time.
IDLE_WAIT_MS = 50


def reanalyse(policy: ModelPolicy, batch: NamedArray) -> NamedArray:
    """Fresh search targets for sequences [T + 1, n, G, ...] (`keys.OBS`, `keys.ALIVE`,
    `keys.REPLAY_INDEX` [n]): a search from every row, laid out as the batch is."""
    lead = np.shape(batch[keys.ALIVE])
    rows = batch[keys.OBS].map(lambda x: x.reshape(-1, *x.shape[len(lead):]))
    fresh = policy.search_targets(rows).map(lambda x: x.reshape(*lead, *x.shape[1:]))
    fresh[keys.REPLAY_INDEX] = batch[keys.REPLAY_INDEX]
    return fresh


class ReanalyseWorker(Worker):
    ports = {"segments": Port("samples", "consume"), "parameters": Port("parameters", "consume")}
    counters = ("reanalysed",)
    progress = "reanalysed"
    Config = ReanalyseSettings
    settings: ReanalyseSettings

    def setup(self) -> None:
        s = self.settings
        env = make_env(s.env)
        policy = make_policy(s.policy, *spaces_of(env))
        env.close()
        if not isinstance(policy, ModelPolicy):
            raise FatalError(f"a reanalyse worker searches with a model policy (policy.type: muzero), "
                             f"not {type(policy).__name__}")
        self.parameters = self.subscribe()
        version, weights, _ = self.parameters.wait()
        policy.set_params(weights, version)
        self.policy = policy
        segments = self.spec.streams["segments"]
        self.consumer = SampleConsumer(self.ctx, segments.key, segments.transport)
        #: Sequences searched again; per batch, the search's seconds and how many versions
        #: older than the searching one the play was.
        self.reanalysed = 0
        self.search_s, self.play_age = Mean(), Mean()
        self.started = time.monotonic()

    def poll(self) -> None:
        got = self.consumer.get(self.wait_ms(IDLE_WAIT_MS))
        if got is None:
            self.waiting_on = "segments"
            return
        self.waiting_on = ""
        meta, batch = got
        if (newest := self.parameters.poll()) is not None:
            self.policy.set_params(newest[1], newest[0])
        began = time.monotonic()
        with self.busy():
            fresh = reanalyse(self.policy, batch)
        self.search_s.add(time.monotonic() - began)
        self.play_age.add(float(self.policy.version - np.mean(batch[keys.VERSION])))
        self.consumer.reply(meta, fresh)
        self.reanalysed += len(batch[keys.REPLAY_INDEX])

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "started"):
            return {}
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {"reanalysed": self.reanalysed, "reanalysed_per_s": self.reanalysed / elapsed,
                "version": self.policy.version, "search_ms": self.search_s.take(1000),
                "play_age_versions": self.play_age.take()}

    def endpoints(self) -> list[str]:
        return [self.consumer.link.address] if hasattr(self, "consumer") else []

    def teardown(self) -> None:
        for closable in ("consumer", "parameters"):
            if hasattr(self, closable):
                getattr(self, closable).close()
