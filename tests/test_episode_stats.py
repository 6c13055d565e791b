"""An env's own per-episode statistics (`info["episode_stats"]`): from the env through its slot and
the env ring into the run's metrics, where each is averaged over the window of recent episodes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import start_one, step_one

from srl.api.env import EPISODE_STATS, AgentStep
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.fake import FakeEnv
from srl.envs.slots import EnvSlot
from srl.launch.metrics import RETURN_WINDOW, RunMetrics
from srl.launch.supervision import WorkerState
from srl.workers.env_ring import EnvRing


class CountingEnv(FakeEnv):
    """Reports, on each episode's last step, which episode of this env it was and the env's tag,
    in its last agent's info (the first agent finished earlier: its row is dead by then)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(n_agents=2, agent_lengths=[3, 5], **kwargs)
        self.episodes = 0

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        steps = super().step(actions)
        if self.t == max(self.agent_lengths):
            self.episodes += 1
            steps[self.agent_ids[-1]].info = {EPISODE_STATS: {"episode": self.episodes, "tag": self.tag}}
        return steps


def test_stats_of_finished_episodes_come_out_of_the_ring_once():
    slots = [EnvSlot([CountingEnv(), CountingEnv()], seeds=[10 * k + 1, 10 * k + 2]) for k in range(2)]
    ring = EnvRing(slots, trajectory_length=4)
    requests = {s: start_one(ring, s) for s in range(ring.size)}
    for _ in range(12):  # 12 steps per slot: two whole episodes of every env, and two steps of a third
        for s in range(ring.size):
            rows = requests[s][keys.OBS][keys.OBS].shape[0]
            requests[s], _ = step_one(ring, s, NamedArray({keys.ACTION: np.zeros(rows, np.int64)}))
    returns, _ = ring.pop_episodes()
    stats = ring.pop_episode_stats()
    assert set(stats) == {"episode", "tag"} and len(stats["episode"]) == len(returns) == 8
    assert sorted(stats["episode"]) == [1.0] * 4 + [2.0] * 4
    assert sorted(stats["tag"]) == sorted([1.0, 2.0, 11.0, 12.0] * 2)  # every env's episodes, each once
    assert all(isinstance(v, float) for v in stats["tag"])
    assert ring.pop_episode_stats() == {}


def _workers() -> dict[str, WorkerState]:
    """Two actors and a trainer, as the run's metrics see them: what each kind counts, and its stats."""
    return {"actor.0": WorkerState(None, None, ("env_steps", "episode_returns")),
            "actor.1": WorkerState(None, None, ("env_steps", "episode_returns")),
            "trainer.0": WorkerState(None, None, ("trained_steps",))}


def test_run_metrics_average_each_statistic_over_the_window():
    workers = _workers()
    metrics = RunMetrics()
    metrics.take(workers["actor.0"], {"env_steps": 10, "episode_returns": [1.0]})
    assert "env" not in metrics.record(list(workers.values()), elapsed=1.0, fps=1.0)  # no env reports any
    metrics.take(workers["actor.0"], {"episode_returns": [1.0, 2.0], "episode_stats": {"moved_m": [1.0, 3.0]}})
    metrics.take(workers["actor.1"], {"episode_returns": [1.0], "episode_stats": {"moved_m": [5.0], "locked": [2.0]}})
    metrics.take(workers["trainer.0"], {"episode_stats": {"moved_m": [1000.0]}})  # not a kind that counts episodes
    line = metrics.record(list(workers.values()), elapsed=2.0, fps=1.0)
    assert line["env"] == {"locked": 2.0, "moved_m": 3.0}
    json.dumps(line)
    metrics.take(workers["actor.1"], {"episode_stats": {"moved_m": [7.0] * RETURN_WINDOW}})
    assert metrics.env_stats()["moved_m"] == 7.0  # the window holds the newest RETURN_WINDOW episodes
    metrics.freeze()
    metrics.take(workers["actor.0"], {"episode_stats": {"moved_m": [0.0]}})
    assert metrics.env_stats() == {"locked": 2.0, "moved_m": 7.0}  # the window that met the stop condition


@pytest.mark.parametrize("stats", [None, {}])
def test_actors_without_env_statistics_report_none(stats):
    workers = _workers()
    metrics = RunMetrics()
    metrics.take(workers["actor.0"], {"episode_returns": [1.0], "episode_stats": stats})
    assert "env" not in metrics.record(list(workers.values()), elapsed=1.0, fps=1.0)
    assert "episode_stats" not in workers["actor.0"].stats
