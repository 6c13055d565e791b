"""What each built-in worker kind is told: its settings, typed, made of the config's own sections.

A graph builder hands a worker one of these models (a kind names it as its `Config`); the
worker reads attributes, never string keys, and no default lives here that the config does
not already hold: each field is a config section (or a value taken from one) as the run's
config has it. A config's `workers.<group>.settings` changes them key by key, and the
result is validated against the model again before anything starts.

    class ActorWorker(Worker):
        Config = ActorSettings
        def setup(self):
            self.settings.actors.ring_size, self.settings.env, ...
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import PositiveInt

from srl.api.config import (ActorsConfig, CheckpointConfig, ComponentConfig, EnvConfig, EvaluationConfig,
                            PopulationConfig, ReplayConfig, Section, SelfPlayConfig, StreamsConfig, TrainersConfig)


class Acting(Section):
    """A worker that acts with the run's policy, or with several policies for their agents."""

    env: EnvConfig
    #: One policy (None with several).
    policy: ComponentConfig | None = None
    #: Several policies by name, and the agents each acts for (empty with one policy).
    policies: dict[str, ComponentConfig] = {}
    agents: dict[str, list[str]] = {}

    def for_policy(self, name: str, agents: list[str]) -> Self:
        """Told that its one policy is policy `name` of several, acting for `agents`."""
        return self.model_copy(update={"agents": {name: agents}})

    def joining(self, name: str, policy: ComponentConfig, agents: list[str]) -> Self:
        """With policy `name` served too (a group serving several policies through keyed ports)."""
        return self.model_copy(update={"policy": None, "policies": {**self.policies, name: policy},
                                       "agents": {**self.agents, name: agents}})

    def agent(self, name: str = "") -> str | None:
        """An agent the policy acts for (None: one policy for every agent): its spaces are the policy's."""
        agents = self.agents.get(name) if name else next(iter(self.agents.values()), None)
        return agents[0] if agents else None


class ActorSettings(Acting):
    actors: ActorsConfig
    #: Trajectories in flight to the trainer at most (`streams.sample_slots`).
    sample_slots: PositiveInt
    #: Env steps per training batch (`trainers.batch_steps`): a synchronous actor waits for a new
    #: version each time it has sent this many.
    batch_steps: PositiveInt
    #: Self-play: which agents learn; the others play frozen versions from the pool.
    self_play: SelfPlayConfig | None = None


class PolicyWorkerSettings(Acting):
    #: Wait up to this long for more requests before a forward pass (`policy_workers.max_wait_ms`).
    max_wait_ms: float
    device: str


class TrainerSettings(Section):
    env: EnvConfig
    policy: ComponentConfig
    algorithm: ComponentConfig
    trainers: TrainersConfig
    checkpoint: CheckpointConfig
    streams: StreamsConfig
    #: With several policies: the one this group trains, and its agents (their spaces are its own).
    policy_name: str | None = None
    agents: list[str] = []

    def for_policy(self, name: str, agents: list[str]) -> Self:
        return self.model_copy(update={"policy_name": name, "agents": agents})


class BufferSettings(Section):
    env: EnvConfig
    replay: ReplayConfig
    checkpoint: CheckpointConfig
    #: Env steps per trajectory the actors send (`actors.trajectory_length`).
    trajectory_length: PositiveInt
    #: What one stored unit is: a transition with `n_step` returns discounted by `gamma`, or a
    #: whole sequence (recurrent replay); `joint`: one unit holds every agent of an env (VDN, QMIX).
    unit: Literal["transition", "sequence"]
    n_step: PositiveInt
    gamma: float
    joint: bool
    #: Trajectory fields kept besides the buffer's own (`srl.replay.buffer.STORED`).
    also_store: tuple[str, ...] = ()
    #: Reanalyse: sequences sent to be searched again with newer parameters, per sequence sent
    #: to the trainers (its `reanalyse` port connected; MuZero's `reanalyse_fraction`).
    reanalyse_fraction: float = 0.0


class ReanalyseSettings(Section):
    env: EnvConfig
    policy: ComponentConfig


class EvalSettings(Section):
    env: EnvConfig
    policy: ComponentConfig
    evaluation: EvaluationConfig


class LeagueSettings(Section):
    env: EnvConfig
    policy: ComponentConfig
    self_play: SelfPlayConfig


class PopulationSettings(Section):
    population: PopulationConfig
    #: The members' names, in order (`m0`, `m1`, ...).
    members: list[str]
