"""Data-parallel trainers: several trainers, one model.

Each trainer consumes its own share of the sample stream. Two ways to keep one model
(`trainers.data_parallel`):

* ``allreduce``: every trainer holds a copy. They start from rank 0's parameters and
  buffers, average gradients after every backward pass (through shared memory on one
  host, gloo between hosts, NCCL on GPU), and average the buffers (running statistics)
  after each update, so every step leaves all copies identical. Each step waits for the
  slowest trainer.
* ``hogwild``: one copy of the parameters and buffers lives in shared memory, and every
  trainer applies its own optimiser steps to it without locks (Recht et al. 2011, "Hogwild!";
  A3C trains this way). Nobody waits; a step may read weights another trainer is halfway
  through writing, which sparse-in-time updates of small steps tolerate. One host, CPU only.
  Each trainer keeps its own optimiser state and counters (a target network refreshed every
  K of its own updates is refreshed every K x trainers updates of the shared weights, as
  under allreduce, where one step consumes a batch per trainer).

The policy is reached only through `Policy.parameters()` and `Policy.buffers()`. Only
rank 0 publishes parameters and writes checkpoints. Rendezvous goes through the run's
name service: rank 0 registers where it listens (or which segment holds the weights).
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from srl.api.policy import Policy
from srl.streams.names import NameService
from srl.streams.shm import Segment

KEY = "ddp/rendezvous"
#: Once the run stops, seconds a rank still waits for its peers' part of a round (the controller
#: ends stragglers 10 s after the stop: this leaves time for the last checkpoint).
PEER_STOP_GRACE_S = 5.0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ShmMean:
    """The mean of one float32 vector per rank, for ranks on one host, through shared memory.

    Each round a rank writes its vector into its row of the round's half of the segment (the
    rounds alternate between two halves), raises its round counter, and waits until every
    rank's counter has reached the round. A rank is never more than one round ahead of the
    slowest, so the half it writes is never one another rank is still reading. Waiting
    yields the core (trainers may share it with actors); a peer silent for `timeout_s` is an
    error, as a gloo timeout would be, and the group is restarted.
    """

    def __init__(self, names: NameService, key: str, name: str, rank: int, world_size: int, numel: int,
                 timeout_s: float, stopping: Callable[[], bool] | None = None) -> None:
        #: True once this rank's run is stopping: a peer that already stopped will not answer.
        self.stopping = stopping or (lambda: False)
        header = 8 * world_size
        size = header + 2 * world_size * numel * 4
        if rank == 0:
            self.segment = Segment.create(name, size)
            names.register(key, name)
        else:
            self.segment = Segment.attach(names.lookup(key, timeout_s))
        self.rounds = np.ndarray((world_size,), np.int64, self.segment.buf, 0)
        self.rows = np.ndarray((2, world_size, numel), np.float32, self.segment.buf, header)
        self.rank, self.timeout_s, self.round = rank, timeout_s, 0

    def __call__(self, vector: torch.Tensor) -> torch.Tensor:
        self.round += 1
        half = self.rows[self.round % 2]
        half[self.rank] = vector.numpy()
        self.rounds[self.rank] = self.round  # after the data: x86 keeps stores in order
        deadline = stopping_since = None
        while (self.rounds < self.round).any():
            os.sched_yield()
            deadline = deadline or time.monotonic() + self.timeout_s
            if time.monotonic() > deadline:
                raise TimeoutError(f"data-parallel peers silent for {self.timeout_s:.0f} s")
            if not self.stopping():
                continue
            # A peer still running answers within a moment and the round completes on every
            # rank alike; one that stopped first never will.
            stopping_since = stopping_since or time.monotonic()
            if time.monotonic() - stopping_since > PEER_STOP_GRACE_S:
                raise RuntimeError("the run is stopping and data-parallel peers have stopped: step abandoned")
        return torch.from_numpy(half.mean(axis=0))

    def close(self) -> None:
        del self.rounds, self.rows
        self.segment.close()


class SharedWeights:
    """A policy's parameters and buffers moved into one shared-memory segment that every rank maps.

    Rank 0 creates the segment from its own tensors (after any checkpoint was loaded) and
    registers its name; the others attach. Each tensor then keeps its identity (optimisers
    and hooks still hold it) but its storage is a view into the segment.
    """

    def __init__(self, names: NameService, key: str, name: str, rank: int, policy: Policy, timeout_s: float) -> None:
        tensors = [*policy.parameters(), *policy.buffers()]
        offsets, size = [], 0
        for tensor in tensors:
            offsets.append(size)
            size += -(-tensor.numel() * tensor.element_size() // 64) * 64  # each tensor on its own cache lines
        if rank == 0:
            self.segment = Segment.create(name, max(size, 1))
        else:
            self.segment = Segment.attach(names.lookup(key, timeout_s))
            if self.segment.size < size:
                raise RuntimeError(f"shared weights segment {self.segment.name} holds {self.segment.size} bytes, "
                                   f"the policy needs {size}: the trainers built different policies")
        with torch.no_grad():
            for tensor, offset in zip(tensors, offsets):
                local = tensor.detach().cpu().numpy()
                view = np.ndarray(local.shape, local.dtype, self.segment.buf, offset)
                if rank == 0:
                    view[...] = local
                tensor.data = torch.from_numpy(view)
        if rank == 0:
            names.register(key, name)  # only once the weights are in place

    def close(self) -> None:
        self.segment.close()


class DataParallel:
    def __init__(self, names: NameService, host: str, rank: int, world_size: int, device: str = "cpu",
                 timeout_s: float = 120.0, generation: int = 0, shm_prefix: str | None = None,
                 mode: str = "allreduce", group: str = "trainer", stopping: Callable[[], bool] | None = None) -> None:
        self.rank, self.world_size, self.mode = rank, world_size, mode
        # Per group (several policies, or a population's members, train side by side, each its own
        # group) and generation (a restarted group never finds its predecessor's address).
        key = f"{KEY}/{group}/{generation}"
        self.names, self.key, self.timeout_s, self.stopping = names, key, timeout_s, stopping
        self._mean: ShmMean | None = None
        self._shared: SharedWeights | None = None
        # Gradients go through shared memory when every rank is on this host (and on the CPU):
        # gloo's all-reduce over loopback costs a small network's update several times over.
        names.register(f"{key}/host/{rank}", host)
        hosts = {names.lookup(f"{key}/host/{r}", timeout_s) for r in range(world_size)}
        one_host_cpu = bool(shm_prefix) and hosts == {host} and not device.startswith("cuda")
        self.shm_name = f"{shm_prefix}ddp-{group}-g{generation}" if one_host_cpu else None
        if mode == "hogwild":
            if not one_host_cpu:
                raise ValueError("trainers.data_parallel=hogwild shares weights through shared memory: every trainer "
                                 f"must run on one host, on the CPU (hosts {sorted(hosts)}, device {device})")
            return
        if rank == 0:
            names.register(key, f"{host}:{_free_port(host)}")
        address = names.lookup(key, timeout_s)
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))

    def attach(self, policy: Policy) -> None:
        """Start from rank 0's parameters and buffers; then share them (hogwild), or average the gradients at
        the end of every backward pass (allreduce)."""
        if self.mode == "hogwild":
            assert self.shm_name is not None
            self._shared = SharedWeights(self.names, f"{self.key}/weights", self.shm_name, self.rank, policy,
                                         self.timeout_s)
            return
        self._params = [p for p in policy.parameters() if p.requires_grad]
        with torch.no_grad():
            for tensor in (*policy.parameters(), *policy.buffers()):
                dist.broadcast(tensor, 0)
        self._queued = False
        if self.shm_name is not None:
            numel = sum(p.numel() for p in self._params)
            self._mean = ShmMean(self.names, f"{self.key}/shm", self.shm_name, self.rank, self.world_size, numel,
                                 self.timeout_s, self.stopping)
        for parameter in self._params:
            parameter.register_post_accumulate_grad_hook(self._on_grad)

    @property
    def shares_weights(self) -> bool:
        """Whether the trainers update one copy of the weights (hogwild) that others may be writing now."""
        return self._shared is not None

    def _on_grad(self, _parameter: torch.Tensor) -> None:
        # The first gradient of a backward pass queues one averaging for its end: one
        # all-reduce of all gradients together, not one per tensor (each a round trip that,
        # on shared cores, can wait a scheduler time slice for the peer).
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._average_all)

    @torch.no_grad()
    def _average_all(self) -> None:
        self._queued = False
        # A parameter the loss did not reach contributes zeros, so every rank sends the same shape.
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self._params])
        if self._mean is not None:
            flat = self._mean(flat)
        else:
            dist.all_reduce(flat)
            flat /= self.world_size
        offset = 0
        for p in self._params:
            grad = flat[offset:offset + p.numel()].view_as(p)
            # A channels-last weight (`NatureCNN`) gets its gradient in its own layout, as its optimiser's.
            p.grad = grad if grad.stride() == p.stride() else torch.empty_like(p).copy_(grad)
            offset += p.numel()

    @torch.no_grad()
    def sync_buffers(self, policy: Policy) -> None:
        """Average the policy's floating-point buffers (e.g. observation statistics) across trainers."""
        if self._shared is not None:  # one copy already
            return
        for buffer in policy.buffers():
            if buffer.is_floating_point():
                dist.all_reduce(buffer)
                buffer /= self.world_size

    def close(self) -> None:
        for closable in (self._mean, self._shared):
            if closable is not None:
                closable.close()
        self._mean = self._shared = None
        if dist.is_initialized():
            dist.destroy_process_group()
