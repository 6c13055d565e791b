"""A hand layout that no node of a Ray cluster can ever hold is refused before the run waits on it."""

import pytest

pytest.importorskip("ray", reason="the Ray launcher needs `pip install ray`")

from srl.launch.ray_launcher import unplaceable  # noqa: E402  (after the skip)


def _node(ip, cpus, gpus=0.0, *labels, alive=True):
    resources = {"CPU": cpus, "memory": 8e9, f"node:{ip}": 1.0, **{label: 1.0 for label in labels}}
    if gpus:
        resources["GPU"] = gpus
    return {"NodeManagerAddress": ip, "NodeID": f"id-{ip}", "Alive": alive, "Resources": resources}


NODES = [_node("10.0.0.1", 2.0, 0.0, "node1"), _node("10.0.0.2", 2.0, 0.0, "node2"),
         _node("10.0.0.3", 64.0, 8.0, "node2", alive=False)]


def test_workers_that_fit_are_accepted():
    asks = {"actor.0": {"CPU": 1.0, "node2": 0.01}, "actor.1": {"CPU": 1.0, "node2": 0.01},
            "trainer.0": {"CPU": 1.5, "node1": 0.01}, "policy.0": {"CPU": 0.5}}
    assert unplaceable(asks, NODES) is None
    # Unpinned workers may spread over both nodes: 4 CPUs' worth fit the two nodes' 4.
    assert unplaceable({f"actor.{i}": {"CPU": 1.0} for i in range(4)}, NODES) is None


def test_a_worker_no_alive_node_can_hold_is_named():
    why = unplaceable({"trainer.0": {"CPU": 1.0, "GPU": 1.0}}, NODES)  # only the dead node has a GPU
    assert why is not None and why.startswith("worker trainer.0 asks for CPU 1, GPU 1, which none of the cluster's "
                                              "2 alive nodes has (10.0.0.1: CPU 2, node1 1; 10.0.0.2: CPU 2, node2 1)")
    assert "worker actor.0 asks for CPU 1, gpu 0.01" in unplaceable({"actor.0": {"CPU": 1.0, "gpu": 0.01}}, NODES)


def test_a_group_pinned_to_a_node_too_small_for_all_of_it_is_named():
    asks = {f"actor.{i}": {"CPU": 1.0, "node2": 0.01} for i in range(3)}
    why = unplaceable({**asks, "trainer.0": {"CPU": 1.0, "node1": 0.01}}, NODES)
    assert why == ("the 3 workers that fit only on node(s) 10.0.0.2 (groups actor) ask for 3 CPU in all, and those "
                   "nodes have 2; lower the groups' placement.num_cpus (or num_gpus, resources) or add nodes")
    # All unpinned, more than the cluster holds in all.
    why = unplaceable({f"actor.{i}": {"CPU": 1.5} for i in range(3)}, NODES)
    assert why is not None and "ask for 4.5 CPU in all, and those nodes have 4" in why
    # A label's own amount counts too: 0.6 of node2's 1.0, twice.
    why = unplaceable({f"actor.{i}": {"node2": 0.6} for i in range(2)}, NODES)
    assert why is not None and "ask for 1.2 node2 in all" in why


def test_where_several_node_sets_are_short_the_narrowest_is_named():
    # Four actors pinned to one 2-CPU node and unpinned workers beside them: both the pinned node
    # (4 of 2 CPUs) and the whole cluster (4.5 of 4) are short; the reason names the pinned node,
    # whatever order the sets come in (they are hashed: it differed between processes).
    asks = {**{f"actor.{i}": {"CPU": 1.0, "node2": 0.01} for i in range(4)}, "trainer.0": {"CPU": 0.5}}
    for nodes in (NODES, NODES[::-1]):
        assert unplaceable(asks, nodes).startswith(
            "the 4 workers that fit only on node(s) 10.0.0.2 (groups actor) ask for 4 CPU in all, and those nodes have 2")
