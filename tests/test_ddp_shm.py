"""Data-parallel trainers on one host: averaged gradients through shared memory (exact means,
round after round; a peer that stops answering is an error, not a hang), and hogwild
trainers updating one copy of the weights."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time

import numpy as np
import pytest
import torch

from srl.streams.names import DirectoryNameService
from srl.workers.ddp import SharedWeights, ShmMean

NUMEL = 1000


def _rank(root: str, prefix: str, rank: int, world: int, rounds: int, queue) -> None:
    mean = ShmMean(DirectoryNameService(root), "ddp/0/shm", f"{prefix}ddp-g0", rank, world, NUMEL, timeout_s=30)
    out = []
    for r in range(rounds):
        vector = torch.full((NUMEL,), float(10 * rank + r))
        got = mean(vector)
        if rank == 0 and r % 3 == 0:  # lag behind: the others must not overwrite what it still reads
            time.sleep(0.002)
        out.append(got.clone())
    queue.put((rank, torch.stack(out).numpy()))
    mean.close()


def test_every_rank_gets_the_exact_mean_each_round() -> None:
    world, rounds = 3, 200
    prefix = f"srl_test{os.getpid()}_"
    with tempfile.TemporaryDirectory() as root:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_rank, args=(root, prefix, r, world, rounds, queue)) for r in range(world)]
        for p in procs:
            p.start()
        results = dict(queue.get(timeout=60) for _ in range(world))
        for p in procs:
            p.join(timeout=30)
    expected = np.array([np.mean([10 * k + r for k in range(world)]) for r in range(rounds)], np.float32)
    for rank, values in results.items():
        np.testing.assert_allclose(values, np.repeat(expected[:, None], NUMEL, 1), rtol=1e-6, err_msg=str(rank))
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def test_a_silent_peer_is_an_error_after_the_timeout() -> None:
    prefix = f"srl_test{os.getpid()}b_"
    with tempfile.TemporaryDirectory() as root:
        names = DirectoryNameService(root)
        alone = ShmMean(names, "ddp/0/shm", f"{prefix}ddp-g0", 0, 2, NUMEL, timeout_s=0.3)
        try:
            with pytest.raises(TimeoutError, match="silent"):
                alone(torch.ones(NUMEL))
        finally:
            alone.close()


def test_a_rank_waiting_on_peers_gives_up_once_the_run_stops() -> None:
    """A peer that stopped first never answers: the waiting rank abandons the step at once
    instead of waiting out the timeout (and its teardown still writes the checkpoint)."""
    prefix = f"srl_test{os.getpid()}e_"
    with tempfile.TemporaryDirectory() as root:
        names = DirectoryNameService(root)
        alone = ShmMean(names, "ddp/0/shm", f"{prefix}ddp-g0", 0, 2, NUMEL, timeout_s=60, stopping=lambda: True)
        try:
            started = time.monotonic()
            with pytest.raises(RuntimeError, match="stopping"):
                alone(torch.ones(NUMEL))
            assert time.monotonic() - started < 15  # the grace (5 s), not the timeout (60 s)
        finally:
            alone.close()


class _Net(torch.nn.Module):
    """What SharedWeights reaches of a policy: its parameters and buffers."""

    def __init__(self, fill: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 5)
        self.register_buffer("count", torch.zeros(2, dtype=torch.int64))
        with torch.no_grad():
            for p in self.parameters():
                p.fill_(fill)


def _hogwild_rank(root: str, name: str, rank: int, steps: int, barrier, queue) -> None:
    net = _Net(fill=float(rank + 1))  # rank 1 starts elsewhere: rank 0's weights must win
    shared = SharedWeights(DirectoryNameService(root), "ddp/0/weights", name, rank, net, timeout_s=30)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(steps):  # both ranks step at once, neither waits
        optimizer.zero_grad()
        net.linear(torch.ones(4, 3)).sum().backward()
        optimizer.step()
    net.count[rank] = steps
    barrier.wait(timeout=60)  # both done: each now sees the other's steps
    queue.put((rank, net.linear.bias.detach().clone().numpy(), net.count.clone().numpy()))
    shared.close()


def test_hogwild_trainers_update_one_copy_of_the_weights() -> None:
    steps, lr, grad = 300, 0.01, 4.0  # the bias's gradient: 4 per element at every step
    name = f"srl_test{os.getpid()}c_ddp-g0"
    with tempfile.TemporaryDirectory() as root:
        ctx = mp.get_context("spawn")
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_hogwild_rank, args=(root, name, r, steps, barrier, queue)) for r in range(2)]
        for p in procs:
            p.start()
        results = {rank: rest for rank, *rest in (queue.get(timeout=60) for _ in procs)}
        for p in procs:
            p.join(timeout=30)
    alone = 1.0 - steps * lr * grad  # rank 0's start, and its own steps only
    for rank, (bias, count) in results.items():
        # Both ranks' steps landed on one copy. Lock-free read-modify-writes may lose a few of them
        # (that is hogwild's bargain), so the bound is loose: well past one rank's steps.
        assert (bias < alone - 0.5 * steps * lr * grad).all() and (bias >= 1.0 - 2 * steps * lr * grad - 1e-3).all(), \
            (rank, bias)
        assert count.tolist() == [steps, steps]  # buffers are shared too
    assert not os.path.exists(f"/dev/shm/{name}")


def test_hogwild_refuses_a_segment_smaller_than_the_policy() -> None:
    name = f"srl_test{os.getpid()}d_ddp-g0"
    with tempfile.TemporaryDirectory() as root:
        names = DirectoryNameService(root)
        small = SharedWeights(names, "ddp/0/weights", name, 0, torch.nn.Linear(2, 2), timeout_s=1)
        try:
            with pytest.raises(RuntimeError, match="different policies"):
                SharedWeights(names, "ddp/0/weights", name, 1, _Net(0.0), timeout_s=1)
        finally:
            small.close()
