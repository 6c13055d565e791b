"""Seeds: one run seed, a stream per worker, and a layout whose runs repeat exactly."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.api.config import ConfigError, validate
from srl.prepare import resolve_graph as resolve
from srl.api.worker import Supervision
from srl.data.named_array import NamedArray
from srl.launch.graph import wire
from srl.launch.metrics import RunMetrics
from srl.launch.supervision import WorkerState
from srl.models.random import RandomPolicy
from srl.streams.inference import InlineInference
from srl.streams.parameters import ParameterSubscriber
from srl.api.worker import StreamEnd
from srl.workers.seeding import seed_process, worker_seed


# ---------------------------------------------------------------------------- derivation
def test_every_worker_and_generation_gets_its_own_seed():
    seeds = {worker_seed(run, group, index, generation)
             for run in (0, 1, -1) for group in ("actor", "trainer", "policy")
             for index in range(4) for generation in range(3)}
    assert len(seeds) == 3 * 3 * 4 * 3
    assert all(0 <= s < 1 << 63 for s in seeds)  # torch, numpy and `random` all take it


def test_a_worker_seed_is_the_same_in_every_process():
    # Python's hash() of a string changes with PYTHONHASHSEED; the derivation must not.
    code = "from srl.workers.seeding import worker_seed; print(worker_seed(1, 'actor', 3, 2))"
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": salt}).stdout.strip() for salt in ("1", "2")}
    assert outputs == {str(worker_seed(1, "actor", 3, 2))}
    assert worker_seed(1, "actor", 0) == 405958684247853004  # pinned: a change breaks old runs' reruns


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_seeding_a_process_repeats_every_generator():
    seed_process(worker_seed(1, "actor", 0))
    first = _draws()
    seed_process(worker_seed(1, "actor", 0))
    assert _draws() == first
    seed_process(worker_seed(1, "actor", 1))
    assert all(a != b for a, b in zip(_draws(), first))


def test_random_policy_without_a_seed_follows_the_worker_seed():
    obs = NamedArray({"obs": np.zeros((32, 4), np.float32)})

    def actions(seed: int) -> list[int]:
        seed_process(seed)
        policy = RandomPolicy(gym.spaces.Dict(), gym.spaces.Discrete(6))
        return policy.rollout(obs, NamedArray())["action"].tolist()

    assert actions(worker_seed(1, "actor", 0)) == actions(worker_seed(1, "actor", 0))
    assert actions(worker_seed(1, "actor", 0)) != actions(worker_seed(1, "actor", 1))


# ---------------------------------------------------------------------------- synchronous acting
def _config(**sections):
    data = {"name": "t", "env": {"type": "gym", "id": "CartPole-v1"}, "stop": {"env_steps": 1000}}
    data.update(sections)
    return validate(data)


def test_synchronous_acting_needs_one_inline_actor():
    _config(actors={"count": 1, "inference": "inline", "synchronous": True})
    for actors, streams in (({"count": 2, "inference": "inline"}, {}), ({"count": 1, "inference": "remote"}, {}),
                            ({"count": 1, "inference": "inline"}, {"when_full": "drop_oldest"})):
        with pytest.raises(ConfigError, match="actors.synchronous"):
            _config(actors={**actors, "synchronous": True}, streams=streams)


class _Subscriber(ParameterSubscriber):
    """Publishes version `after` on the `after`-th look."""

    def __init__(self, after: int) -> None:
        self.after, self.looks = after, 0

    def poll(self):
        self.looks += 1
        return (7, NamedArray(), {}) if self.looks == self.after else None

    def close(self) -> None: ...


def test_a_synchronous_actor_takes_the_next_version_once_it_is_out():
    """It looks without waiting (the actor's poll returns between looks, and heartbeats go on)."""
    policy = RandomPolicy(gym.spaces.Dict(), gym.spaces.Discrete(2), seed=0)
    inline = InlineInference(policy, _Subscriber(after=3))
    assert not inline.take_new_parameters() and not inline.take_new_parameters()
    assert policy.version != 7
    assert inline.take_new_parameters() and policy.version == 7


# ---------------------------------------------------------------------------- metrics
def test_each_metrics_line_carries_the_returns_finished_since_the_last():
    resolved = resolve(_config(actors={"count": 2}))
    specs = {s.name: s for s in wire(resolved, "auto", lambda name: "h", seed=1, run_dir="/tmp/x",
                                     control=StreamEnd("control", "shm"))}
    actors = [WorkerState(specs[f"actor.{i}"], Supervision(), ("env_steps", "episode_returns")) for i in range(2)]
    metrics = RunMetrics()
    metrics.take(actors[0], {"episode_returns": [1.0, 3.0]})
    metrics.take(actors[1], {"episode_returns": [2.0]})
    assert metrics.record(actors, elapsed=1.0, fps=1.0)["episode_returns"] == [1.0, 3.0, 2.0]
    assert metrics.record(actors, elapsed=2.0, fps=1.0)["episode_returns"] == []
    metrics.take(actors[0], {"episode_returns": [4.0]})
    assert metrics.record(actors, elapsed=3.0, fps=1.0)["episode_returns"] == [4.0]


# ---------------------------------------------------------------------------- whole runs
#: One inline actor acting synchronously with a small batch: ~60 updates in 15k env steps.
DETERMINISTIC = ["actors.count=1", "actors.inference=inline", "actors.synchronous=true", "actors.envs_per_slot=8",
                 "trainers.batch_steps=256"]


def _returns(run_srl, run_dir: Path, *overrides: str) -> list[float]:
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "log.tensorboard=false",
                     "log.progress=false", "stop.episode_return=null", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for line in lines for r in json.loads(line)["episode_returns"]]


def _prefixes(a: list[float], b: list[float], at_least: int) -> tuple[list[float], list[float]]:
    """The runs stop on a timer's reading of env steps: compare the episodes both finished."""
    n = min(len(a), len(b))
    assert n >= at_least, (len(a), len(b))
    return a[:n], b[:n]


@pytest.mark.integration
def test_deterministic_layout_repeats_a_run_exactly(run_srl, tmp_path):
    first = _returns(run_srl, tmp_path / "a", "seed=5", "stop.env_steps=15000", *DETERMINISTIC)
    again = _returns(run_srl, tmp_path / "b", "seed=5", "stop.env_steps=15000", *DETERMINISTIC)
    a, b = _prefixes(first, again, at_least=50)
    assert a == b
    assert max(a) > 3 * min(a)  # it learned along the way: the updates are part of what repeated
    other = _returns(run_srl, tmp_path / "c", "seed=6", "stop.env_steps=3000", *DETERMINISTIC)
    a, c = _prefixes(first, other, at_least=20)
    assert a != c


@pytest.mark.integration
def test_default_layout_runs_with_different_seeds_differ(run_srl, tmp_path):
    a, b = _prefixes(_returns(run_srl, tmp_path / "a", "seed=5", "stop.env_steps=3000"),
                     _returns(run_srl, tmp_path / "b", "seed=6", "stop.env_steps=3000"), at_least=20)
    assert a != b
