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
import socket

import torch
import torch.distributed as dist

from srl.api.policy import Policy
from srl.streams.names import NameService

KEY = "ddp/rendezvous"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class DataParallel:
    def __init__(self, names: NameService, host: str, rank: int, world_size: int, device: str = "cpu",
                 timeout_s: float = 120.0, generation: int = 0) -> None:
        self.rank, self.world_size = rank, world_size
        key = f"{KEY}/{generation}"  # a restarted group never finds its predecessor's address
        if rank == 0:
            names.register(key, f"{host}:{_free_port(host)}")
        address = names.lookup(key, timeout_s)
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
        if dist.is_initialized():
            dist.destroy_process_group()
