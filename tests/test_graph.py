"""The worker graph as data: resolving, checking and wiring it; supervision and metrics on their own."""

from __future__ import annotations

import signal

import pytest

from srl.api.config import ConfigError, SupervisionConfig, validate
from srl.prepare import resolve_graph as resolve
from srl.api.worker import Port, Supervision
from srl.launch.graph import wire
from srl.launch.launcher import Launcher
from srl.launch.metrics import RunMetrics, StopRules
from srl.launch.supervision import Supervisor, WorkerState
from srl.workers.base import Worker
from srl.api.worker import HUNG_SIGNAL, StreamEnd
from srl.streams.context import ContextSpec

WATCHER = "tests.test_graph:Watcher"


class Watcher(Worker):
    """A worker kind defined outside srl: reads parameters."""

    ports = {"parameters": Port("parameters", "consume")}

    def setup(self) -> None: ...

    def poll(self) -> None: ...


class NotAWorker:
    pass


def _config(**sections):
    data = {"name": "t", "env": {"type": "gym", "id": "CartPole-v1"}, "stop": {"env_steps": 1000}}
    data.update(sections)
    return validate(data)


def _specs(config, host_of=lambda name: "h", transport="auto", relays=True, resolved=None):
    resolved = resolved or resolve(config)
    return {s.name: s for s in wire(resolved, transport, host_of, seed=1, run_dir="/tmp/x",
                                     control=StreamEnd("control", "shm"), relays=relays)}


# ---------------------------------------------------------------------------- resolving
def test_inline_ppo_graph_joins_actors_and_trainers_by_samples_and_parameters():
    graph = resolve(_config(actors={"count": 2, "inference": "inline"}))
    assert list(graph.graph.groups) == ["trainer", "actor"]
    assert graph.describe()["streams"] == {
        "samples": {"kind": "samples", "producers": ["actor"], "consumers": ["trainer"]},
        "parameters": {"kind": "parameters", "producers": ["trainer"], "consumers": ["actor"]}}


def test_remote_ppo_graph_has_policy_workers_between_actors_and_parameters():
    graph = resolve(_config(actors={"count": 4, "inference": "remote"}, policy_workers={"count": 2}))
    streams = graph.describe()["streams"]
    assert streams["inference"] == {"kind": "inference", "producers": ["actor"], "consumers": ["policy"]}
    assert streams["parameters"]["consumers"] == ["policy"]


def test_config_overrides_a_groups_count_and_placement_and_adds_a_group_by_import_path():
    config = _config(actors={"inference": "inline", "placement": {"threads": 2}},
                     workers={"actor": {"count": 3, "placement": {"nice": 5}},
                              "watcher": {"kind": WATCHER, "streams": {"parameters": "parameters"}}})
    graph = resolve(config).graph
    assert graph.groups["actor"].count == 3
    assert graph.groups["actor"].placement.nice == 5
    assert graph.groups["actor"].placement.threads == 2  # fields the override did not name stay
    assert graph.groups["watcher"].kind == WATCHER
    assert resolve(config).describe()["streams"]["parameters"]["consumers"] == ["actor", "watcher"]


def test_a_groups_placement_can_ask_for_the_idle_cpu_policy():
    groups = resolve(_config(actors={"placement": {"idle": True}})).graph.groups
    assert groups["actor"].placement.idle and not groups["trainer"].placement.idle


def test_a_settings_override_merges_nested_sections_key_by_key():
    config = _config(workers={"trainer": {"settings": {"trainers": {"batch_steps": 512}}}})
    trainers = resolve(config).graph.groups["trainer"].settings.trainers
    assert trainers.batch_steps == 512 and trainers.max_staleness == config.trainers.max_staleness


@pytest.mark.parametrize("workers, message", [
    ({"watcher": {"streams": {"parameters": "parameters"}}}, "workers.watcher.kind: required"),
    ({"watcher": {"kind": "tests.test_graph:Nope"}}, "workers.watcher.kind:"),
    ({"watcher": {"kind": "tests.test_graph:NotAWorker"}}, "is not a worker kind"),
    ({"watcher": {"kind": WATCHER}}, "port 'parameters' (parameters) is not connected"),
    ({"watcher": {"kind": WATCHER, "streams": {"params": "parameters"}}}, "has no port 'params'"),
    ({"watcher": {"kind": WATCHER, "streams": {"parameters": "samples"}}}, "stream 'samples' is a samples stream"),
    ({"watcher": {"kind": WATCHER, "streams": {"parameters": "other"}}}, "stream 'other': no group produces it"),
    ({"trainer": {"count": 3}}, "3 consumers cannot share 2 producers"),
    ({"actor": {"bogus": 1}}, "workers.actor.bogus"),
])
def test_a_graph_that_cannot_be_wired_is_one_clear_config_error(workers, message):
    with pytest.raises(ConfigError) as error:
        resolve(_config(workers=workers))
    assert message in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_a_kinds_own_config_validates_its_groups_settings():
    class Strict(Watcher):
        import pydantic

        class Config(pydantic.BaseModel):
            model_config = {"extra": "forbid"}
            every: int = 1

    import tests.test_graph as me
    me.Strict = Strict
    try:
        ok = resolve(_config(workers={"w": {"kind": "tests.test_graph:Strict", "settings": {"every": 3},
                                            "streams": {"parameters": "parameters"}}}))
        assert ok.graph.groups["w"].settings == Strict.Config(every=3)
        with pytest.raises(ConfigError, match="workers.w.settings.every"):
            resolve(_config(workers={"w": {"kind": "tests.test_graph:Strict", "settings": {"every": "x"},
                                           "streams": {"parameters": "parameters"}}}))
    finally:
        del me.Strict


# ---------------------------------------------------------------------------- wiring
def test_sharded_streams_give_each_consumer_its_own_producers():
    specs = _specs(_config(actors={"count": 4, "inference": "remote"}, policy_workers={"count": 2},
                           trainers={"count": 2}))
    assert specs["trainer.0"].streams["samples"].key == "samples/0"
    assert [specs[f"actor.{i}"].streams["samples"].key for i in range(4)] == ["samples/0", "samples/1"] * 2
    assert [specs[f"actor.{i}"].streams["inference"].key for i in range(4)] == ["inference/0", "inference/1"] * 2
    assert specs["policy.1"].streams["inference"].key == "inference/1"
    assert (specs["trainer.1"].index, specs["trainer.1"].group_size, specs["trainer.1"].group) == (1, 2, "trainer")
    assert all(s.streams[p].transport == "shm" for s in specs.values() for p in s.streams)


def test_parameters_cross_to_another_host_once_into_a_relay_there():
    hosts = {"trainer.0": "a", "actor.0": "a", "actor.1": "b", "actor.2": "b", "actor.3": "c"}
    specs = _specs(_config(actors={"count": 4, "inference": "inline"}), host_of=hosts.get)
    published = specs["trainer.0"].streams["parameters"]
    assert (published.key, published.transport) == ("parameters", "shm")
    assert [c.key for c in published.copies] == ["parameters/net"]
    assert specs["actor.0"].streams["parameters"] is published
    assert specs["actor.1"].streams["parameters"].key == specs["actor.2"].streams["parameters"].key == "parameters/node0"
    assert specs["actor.3"].streams["parameters"].key == "parameters/node1"
    relays = {name: s for name, s in specs.items() if s.kind == "relay"}
    assert sorted(relays) == ["relay.0", "relay.1"]
    assert relays["relay.0"].placement["near"] == "actor.1"
    assert relays["relay.0"].streams["source"].key == "parameters/net"
    assert relays["relay.1"].streams["sink"].key == "parameters/node1"
    # samples from another host go over TCP
    assert specs["actor.3"].streams["samples"].transport == "zmq"


def test_workers_that_may_move_host_get_tcp_ends_and_subscribe_to_parameters_themselves():
    """An elastic run: every worker a host of its own, no relays."""
    specs = _specs(_config(actors={"count": 3, "inference": "inline"}), host_of=lambda name: name, relays=False)
    assert not [name for name in specs if name.startswith("relay")]
    assert [c.key for c in specs["trainer.0"].streams["parameters"].copies] == ["parameters/net"]
    assert {(specs[f"actor.{i}"].streams["parameters"].key, specs[f"actor.{i}"].streams["parameters"].transport)
            for i in range(3)} == {("parameters/net", "zmq")}
    assert {specs[f"actor.{i}"].streams["samples"].transport for i in range(3)} == {"zmq"}


def test_a_group_grown_mid_run_wires_its_new_workers_as_its_first_ones():
    resolved = resolve(_config(actors={"count": 2, "inference": "remote"}, policy_workers={"count": 2}))
    grown = resolved.with_count("actor", 3)
    assert (resolved.graph.groups["actor"].count, grown.graph.groups["actor"].count) == (2, 3)
    specs = _specs(None, resolved=grown)
    assert specs["actor.2"].streams["inference"].key == "inference/0"  # producer i joins consumer i mod n
    assert specs["actor.2"].group_size == 3 and specs["actor.2"].index == 2


def test_a_forced_transport_is_used_for_every_stream():
    specs = _specs(_config(actors={"count": 2, "inference": "remote"}), transport="zmq")
    assert {e.transport for s in specs.values() for e in s.streams.values()} == {"zmq"}


# ---------------------------------------------------------------------------- supervision
class FakeLauncher(Launcher):
    name, control_transport = "fake", "shm"

    def __init__(self) -> None:
        self.codes: dict[str, int | None] = {}
        self.starts: list[str] = []
        self.signals: list[tuple[str, int]] = []

    def place(self, specs): ...

    def host_of(self, worker):
        return "h"

    def start(self, spec, context):
        self.codes[spec.name] = None
        self.starts.append(spec.name)
        return 1000 + len(self.starts)

    def exitcode(self, worker):
        return self.codes[worker]

    def signal(self, worker, sig):
        self.signals.append((worker, sig))
        self.codes[worker] = -sig

    def join(self, worker, timeout): ...

    def started(self):
        return list(self.codes)

    def stop_all(self, grace_s): ...

    def close(self): ...


def _supervised(specs, max_restarts=3):
    launcher = FakeLauncher()
    replaced = []
    supervisor = Supervisor(launcher, ContextSpec("r", b"k", "/tmp/n", "/tmp"),
                            SupervisionConfig(max_restarts=max_restarts), lambda name: "last line",
                            on_replaced=replaced.append)
    from srl.api.registry import WORKERS
    for spec in specs.values():
        kind = WORKERS.resolve(spec.kind)
        supervisor.start(WorkerState(spec, kind.supervision, kind.counters))
        supervisor.workers[spec.name].state = "running"
    return supervisor, launcher, replaced


def test_a_dead_trainer_restarts_with_its_whole_group_from_the_checkpoint():
    specs = _specs(_config(actors={"count": 2}, trainers={"count": 2}))
    supervisor, launcher, replaced = _supervised(specs)
    launcher.codes["trainer.1"] = -9
    assert supervisor.check(now=1.0) is None
    assert launcher.starts[-2:] == ["trainer.0", "trainer.1"]
    assert ("trainer.0", signal.SIGKILL) in launcher.signals  # its peer was stopped first
    assert {w.spec.name for w in replaced} == {"trainer.0", "trainer.1"}
    for name in ("trainer.0", "trainer.1"):
        assert specs[name].resume and specs[name].generation == 1
        assert supervisor.workers[name].restarts == 1
    assert not specs["actor.0"].resume and supervisor.workers["actor.0"].restarts == 0


def test_a_dead_actor_restarts_alone_and_fresh():
    specs = _specs(_config(actors={"count": 2}))
    supervisor, launcher, replaced = _supervised(specs)
    launcher.codes["actor.1"] = 1
    assert supervisor.check(now=1.0) is None
    assert launcher.starts[-1] == "actor.1" and [w.spec.name for w in replaced] == ["actor.1"]
    assert not specs["actor.1"].resume and supervisor.workers["actor.0"].restarts == 0


def test_restarts_beyond_the_budget_stop_the_run_with_the_log_tail():
    specs = _specs(_config(actors={"count": 2}))
    supervisor, launcher, _ = _supervised(specs, max_restarts=1)
    launcher.codes["actor.0"] = 1
    assert supervisor.check(now=1.0) is None
    supervisor.workers["actor.0"].state = "running"
    launcher.codes["actor.0"] = 1
    reason, detail = supervisor.check(now=2.0)
    assert "actor.0 died with exit code 1" in reason and "restart budget" in reason
    assert "last line" in detail
    assert supervisor.workers["actor.0"].state == "failed"


def test_a_silent_worker_is_killed_as_hung():
    specs = _specs(_config(actors={"count": 2}))
    supervisor, launcher, _ = _supervised(specs)
    for w in supervisor.workers.values():
        w.last_heartbeat = 100.0
    supervisor.workers["actor.1"].last_heartbeat = 0.0
    assert supervisor.check(now=105.0) is None
    assert launcher.signals == [("actor.1", HUNG_SIGNAL)]  # its stacks into its log; killed at the next check
    assert supervisor.workers["actor.1"].state == "hung"


# ---------------------------------------------------------------------------- metrics
def test_totals_come_from_the_kinds_that_declare_them_and_survive_restarts():
    specs = _specs(_config(actors={"count": 2}, workers={"watcher": {"kind": WATCHER,
                                                                     "streams": {"parameters": "parameters"}}}))
    workers = {n: WorkerState(s, Supervision(), counters) for n, s, counters in (
        ("actor.0", specs["actor.0"], ("env_steps", "episode_returns")),
        ("actor.1", specs["actor.1"], ("env_steps", "episode_returns")),
        ("trainer.0", specs["trainer.0"], ("trained_steps",)),
        ("watcher.0", specs["watcher.0"], ()))}
    metrics = RunMetrics(env_steps_at_start=10)
    metrics.take(workers["actor.0"], {"env_steps": 100, "episode_returns": [1.0, 3.0]})
    metrics.take(workers["actor.1"], {"env_steps": 50, "episode_returns": []})
    metrics.take(workers["watcher.0"], {"env_steps": 999, "episode_returns": [500.0], "policy_version": 7})
    metrics.take(workers["trainer.0"], {"trained_steps": 64, "policy_version": 9, "dropped_stale": 2})
    assert metrics.total("env_steps", workers.values()) == 160  # the watcher's numbers count for nothing
    assert metrics.return_mean == 2.0
    metrics.retire(workers["actor.0"])
    metrics.take(workers["actor.0"], {"env_steps": 5})
    assert metrics.total("env_steps", workers.values()) == 165
    record = metrics.record(list(workers.values()), elapsed=1.0, fps=2.0)
    assert (record["policy_version"], record["trained_steps"], record["dropped_stale"]) == (9, 64, 2)
    metrics.freeze()
    metrics.take(workers["actor.1"], {"env_steps": 60, "episode_returns": [100.0]})
    assert metrics.return_mean == 2.0  # the window that met the stop condition is the one reported


def test_stop_rules():
    config = _config(stop={"env_steps": 100, "episode_return": 5.0})
    rules, metrics = StopRules(config.stop), RunMetrics()
    assert rules.reason(metrics, 99, 1.0) is None
    assert rules.reason(metrics, 100, 1.0) == "env_steps reached 100"
    metrics.returns.extend([6.0] * 9)
    assert rules.reason(metrics, 0, 1.0) is None  # fewer than 10 episodes
    metrics.returns.append(6.0)
    assert rules.reason(metrics, 0, 1.0).startswith("episode_return_mean 6.0")
