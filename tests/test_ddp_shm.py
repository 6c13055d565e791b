"""Data-parallel trainers on one host average gradients through shared memory: exact means,
round after round, and a peer that stops answering is an error, not a hang."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time

import numpy as np
import pytest
import torch

from srl.streams.names import DirectoryNameService
from srl.workers.ddp import ShmMean

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
