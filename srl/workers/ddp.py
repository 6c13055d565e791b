"""Data-parallel trainers: several trainers, one model, kept identical with torch.distributed.

Each trainer consumes its own share of the sample stream. They start from rank 0's
parameters and buffers, average gradients after every backward pass (gloo on CPU, NCCL on
GPU), and average the buffers (running statistics) after each update, so every step leaves
all copies identical. The policy is reached only through `Policy.parameters()` and
`Policy.buffers()`. Only rank 0 publishes parameters and writes checkpoints. Rendezvous
goes through the run's name service: rank 0 registers where it listens.
"""

from __future__ import annotations

import datetime
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist

from srl.api.policy import Policy
from srl.streams.names import NameService
from srl.streams.shm import Segment

KEY = "ddp/rendezvous"


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
                 timeout_s: float) -> None:
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
        deadline = None
        while (self.rounds < self.round).any():
            os.sched_yield()
            deadline = deadline or time.monotonic() + self.timeout_s
            if time.monotonic() > deadline:
                raise TimeoutError(f"data-parallel peers silent for {self.timeout_s:.0f} s")
        return torch.from_numpy(half.mean(axis=0))

    def close(self) -> None:
        del self.rounds, self.rows
        self.segment.close()


class DataParallel:
    def __init__(self, names: NameService, host: str, rank: int, world_size: int, device: str = "cpu",
                 timeout_s: float = 120.0, generation: int = 0, shm_prefix: str | None = None) -> None:
        self.rank, self.world_size = rank, world_size
        key = f"{KEY}/{generation}"  # a restarted group never finds its predecessor's address
        self.names, self.key, self.timeout_s = names, key, timeout_s
        if rank == 0:
            names.register(key, f"{host}:{_free_port(host)}")
        address = names.lookup(key, timeout_s)
        # Gradients go through shared memory when every rank is on this host (and on the CPU):
        # gloo's all-reduce over loopback costs a small network's update several times over.
        names.register(f"{key}/host/{rank}", host)
        hosts = {names.lookup(f"{key}/host/{r}", timeout_s) for r in range(world_size)}
        self.shm_name = (f"{shm_prefix}ddp-g{generation}" if shm_prefix and hosts == {host}
                         and not device.startswith("cuda") else None)
        self._mean: ShmMean | None = None
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))

    def attach(self, policy: Policy) -> None:
        """Start from rank 0's parameters and buffers; average the gradients at the end of every backward pass."""
        self._params = [p for p in policy.parameters() if p.requires_grad]
        with torch.no_grad():
            for tensor in (*policy.parameters(), *policy.buffers()):
                dist.broadcast(tensor, 0)
        self._queued = False
        if self.shm_name is not None:
            numel = sum(p.numel() for p in self._params)
            self._mean = ShmMean(self.names, f"{self.key}/shm", self.shm_name, self.rank, self.world_size, numel,
                                 self.timeout_s)
        for parameter in self._params:
            parameter.register_post_accumulate_grad_hook(self._on_grad)

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
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()

    @torch.no_grad()
    def sync_buffers(self, policy: Policy) -> None:
        """Average the policy's floating-point buffers (e.g. observation statistics) across trainers."""
        for buffer in policy.buffers():
            if buffer.is_floating_point():
                dist.all_reduce(buffer)
                buffer /= self.world_size

    def close(self) -> None:
        if self._mean is not None:
            self._mean.close()
            self._mean = None
        if dist.is_initialized():
            dist.destroy_process_group()
