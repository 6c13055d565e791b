"""The actor worker: a thin shell around an `EnvRing`, an inference client and a sample producer."""

from __future__ import annotations

import logging
import time
from typing import Any

from srl.api.agents import DEFAULT_POLICY, port
from srl.api.components import make_env, make_policy
from srl.api.policy import Policy
from srl.api.settings import ActorSettings
from srl.api.worker import Port
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slot_builder import make_slots
from srl.streams.inference import InferenceClient, InlineInference, RemoteInference
from srl.streams.parameters import open_subscriber
from srl.streams.samples import SampleProducer
from srl.workers.base import Worker
from srl.workers.env_ring import EnvRing
from srl.workers.opponents import SelfPlay
from srl.workers.routing import RoutedInference, RoutedSamples

log = logging.getLogger(__name__)

#: A synchronous actor waits this long for the version trained on its samples, then stops
#: waiting for good (longer than any training step of a batch).
SYNC_PATIENCE_S = 60.0


class ActorWorker(Worker):
    """Runs an env ring; asks a policy worker to act (`inference` connected) or acts itself
    with the newest parameters (`parameters` connected); pushes trajectories to `samples`.

    With several policies (`policies` and `agents` in its settings) each policy acts for its
    agents' rows through its own ports (`samples/<policy>`, `inference/<policy>` or
    `parameters/<policy>`), and each policy's trajectories hold only its agents.

    `actors.synchronous`: once it has sent the trainer a batch, it waits for the version
    trained on that batch before acting on (reproducible runs; see docs/design.md, "Seeds")."""

    # With several policies each port is joined once per policy: `samples/<policy>`, ... (keyed).
    ports = {"samples": Port("samples", "produce", keyed=True),
             "inference": Port("inference", "produce", optional=True, keyed=True),
             "parameters": Port("parameters", "consume", optional=True, keyed=True)}
    counters = ("env_steps", "episode_returns")
    progress = "env_steps"
    Config = ActorSettings
    settings: ActorSettings

    def setup(self) -> None:
        s = self.settings
        actors = s.actors
        # One policy is the case of one key (DEFAULT_POLICY, ports without a suffix) of several.
        sections = s.policies or {DEFAULT_POLICY: s.policy}
        policy_of = {a: p for p, agents in s.agents.items() for a in agents} if s.policies else None
        slots = make_slots(lambda: make_env(s.env), actors.ring_size, actors.envs_per_slot,
                           seed=self.spec.seed + 100_000 * self.spec.index, env_config=s.env, policy_of=policy_of)
        #: Self-play (one policy): the pool's frozen versions play the other team.
        self.self_play: SelfPlay | None = None
        clients: dict[str, InferenceClient] = {}
        states, producers = {}, {}
        for name, section in sections.items():
            spaces = slots[0].groups[name].spaces
            policy = make_policy(section, *spaces)
            clients[name], states[name] = self._client(policy, name), policy.initial_state
            if s.self_play is not None:
                # Frozen opponents from the pool act for the other team; only the learner's rows are sent.
                self.self_play = SelfPlay.open(s.self_play, slots, self.spec.run_dir,
                                               lambda section=section, spaces=spaces: make_policy(section, *spaces))
                clients[name] = self.self_play.wrap(clients[name])
            end = self.spec.streams[port("samples", name)]
            producers[name] = SampleProducer(self.ctx, end.key, end.transport, self.name, s.sample_slots)
        self.inference = RoutedInference(clients)
        self.samples = RoutedSamples(producers)
        self.ring = EnvRing(slots, actors.trajectory_length, states)
        #: The one policy's client when it acts inline with the newest parameters.
        self.inline = next(iter(clients.values())) if len(clients) == 1 else None
        self.started = time.monotonic()
        self.trajectories = 0
        #: Env steps sent to the trainers, and in the last send (the size of a trajectory in flight).
        self.sent_steps = self.last_sent_steps = 0
        #: Synchronous acting: env steps sent since the trainer last trained, and its batch size.
        self.synchronous = actors.synchronous and isinstance(self.inline, InlineInference)
        self.unsynced_steps, self.batch_steps = 0, s.batch_steps
        #: Trajectories waiting for the trainer's credit (by policy) and their env steps; when the
        #: synchronous actor began to wait for the version trained on its last batch, and the
        #: request it holds back meanwhile.
        self.unsent: dict[str, NamedArray] | None = None
        self.unsent_steps = 0
        self.awaiting_since: float | None = None
        self.held_request: tuple[int, dict[str, NamedArray]] | None = None
        #: (when, samples.blocked_s) at the last stats(); set last, as stats() reads all the above.
        self._blocked_at = (self.started, 0.0)
        for slot in range(self.ring.size):
            self.inference.request(slot, self.ring.start(slot))

    def _client(self, policy: Policy, name: str) -> InferenceClient:
        """How policy `name` acts for this actor: inline with the newest parameters (its
        `parameters` port connected), or through a policy worker (`inference`)."""
        # Built for remote inference too: the ring asks it for the RNN state of fresh episodes.
        policy.acting_as(self.spec.index, self.spec.group_size)
        if port("inference", name) not in self.spec.streams:
            params = self.spec.streams[port("parameters", name)]
            subscriber = open_subscriber(self.ctx, params.key, params.transport)
            version, weights, _ = subscriber.wait()
            policy.set_params(weights, version)
            return InlineInference(policy, subscriber)
        inf = self.spec.streams[port("inference", name)]
        return RemoteInference(self.ctx, inf.key, inf.transport, self.name)

    def poll(self) -> None:
        # Nothing steps while a trajectory waits for the trainer's credit, or (synchronous) while
        # the version trained on the last batch is awaited: the actor waits on that peer.
        if self.unsent is not None and not self._send():
            return
        if self.awaiting_since is not None and not self._take_trained_version():
            return
        got = self.inference.reply(self.wait_ms(100))
        if got is None:
            self.waiting_on = "inference"
            return
        self.waiting_on = ""
        slot, reply = got
        requests, trajectories = self.ring.step(slot, reply)
        if trajectories is None or not self.synchronous:
            self.inference.request(slot, requests)  # inference runs while the trajectories go out
        else:
            self.held_request = (slot, requests)  # asked for once the trained version is in
        if trajectories is not None:
            if self.self_play is not None:
                trajectories = {p: self.self_play.samples_of(t) for p, t in trajectories.items()}
            self.unsent = trajectories
            self.unsent_steps = sum(t[keys.REWARD][:-1].size for t in trajectories.values())  # as the trainer counts
            self._send()

    def _send(self) -> bool:
        """Send the trajectories waiting to go out if the trainers give credit, within 100 ms (at once inline)."""
        meta = {"actor": self.name}
        if not self.samples.try_put(self.unsent, meta):
            self.samples.poll(100)
            if not self.samples.try_put(self.unsent, meta):
                self.waiting_on = "samples"
                return False
        self.waiting_on = ""
        self.trajectories += 1
        self.sent_steps += self.unsent_steps
        self.last_sent_steps = self.unsent_steps
        if self.synchronous:
            self.unsynced_steps += self.unsent_steps
            if self.unsynced_steps >= self.batch_steps:  # the trainer trains on what it now holds
                self.unsynced_steps = 0
                self.awaiting_since = time.monotonic()
        self.unsent = None
        if self.awaiting_since is not None:
            return self._take_trained_version()
        self._release_held_request()
        return True

    def _take_trained_version(self) -> bool:
        """Synchronous acting: take the version trained on the last batch if it is out. False: not yet."""
        assert isinstance(self.inline, InlineInference)
        if not self.inline.take_new_parameters():
            if time.monotonic() - self.awaiting_since <= SYNC_PATIENCE_S:
                self.waiting_on = "parameters"
                self.pause(0.001)
                return False
            # A trainer replaced mid-batch lost samples the count includes: it trains later
            # than the count says, so waiting again would wait forever at each batch.
            log.warning("no new parameters for %.0f s: acting asynchronously from now on", SYNC_PATIENCE_S)
            self.synchronous = False
        self.awaiting_since = None
        self.waiting_on = ""
        self._release_held_request()
        return True

    def _release_held_request(self) -> None:
        if self.held_request is not None:
            self.inference.request(*self.held_request)
            self.held_request = None

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "_blocked_at"):
            return {}
        returns, lengths = self.ring.pop_episodes()
        now = time.monotonic()
        elapsed = max(now - self.started, 1e-9)
        # Share of the time since the last report spent waiting for the trainer's credit.
        blocked = self.samples.blocked_s - self._blocked_at[1]
        blocked_frac = round(min(blocked / max(now - self._blocked_at[0], 1e-9), 1.0), 3)
        self._blocked_at = (now, self.samples.blocked_s)
        return {"env_steps": self.ring.env_steps, "fps": self.ring.env_steps / elapsed,
                "episode_returns": returns, "episode_lengths": lengths,
                "episode_stats": self.ring.pop_episode_stats(), "trajectories": self.trajectories,
                "inference_ms": self.inference.round_trip.take(1000), "samples_in_flight": self.samples.in_flight,
                # Stepped but not yet taken by a trainer: lost if this actor's node dies now.
                "undelivered_steps": (self.ring.env_steps - self.sent_steps
                                      + self.samples.in_flight * self.last_sent_steps),
                "sample_slots": self.samples.slots, "blocked_frac": blocked_frac,
                **(self.self_play.stats() if self.self_play is not None else {}),
                **({"policy_episode_returns": self.ring.pop_policy_episodes()} if self.ring.policy_returns else {})}

    def teardown(self) -> None:
        for closable in ("inference", "samples", "self_play"):
            if getattr(self, closable, None) is not None:
                getattr(self, closable).close()
        for slot in self.ring.slots if hasattr(self, "ring") else []:
            slot.close()
