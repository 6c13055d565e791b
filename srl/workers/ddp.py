"""Data-parallel trainers: several trainers, one model, kept identical with torch.distributed.

Each trainer consumes its own share of the sample stream. They start from rank 0's
weights, average gradients during every backward pass (gloo on CPU, NCCL on GPU), and
average the policy's running statistics after each update, so every step leaves all
copies identical. Only rank 0 publishes parameters and writes checkpoints. Rendezvous
goes through the run's name service: rank 0 registers where it listens.
"""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist
from torch import nn

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

    def attach(self, module: nn.Module) -> None:
        """Start from rank 0's weights; average every gradient as backward computes it."""
        with torch.no_grad():
            for tensor in module.state_dict().values():
                dist.broadcast(tensor, 0)
        for parameter in module.parameters():
            if parameter.requires_grad:
                parameter.register_hook(self._average)

    def _average(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / self.world_size

    @torch.no_grad()
    def sync_buffers(self, module: nn.Module) -> None:
        """Average running statistics (e.g. observation normalisation) across trainers."""
        for buffer in module.buffers():
            if buffer.is_floating_point():
                dist.all_reduce(buffer)
                buffer /= self.world_size

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
