"""Helpers the bundled algorithms share: gradient clipping, episode boundaries, the training
device, n-step returns. Each algorithm file imports what it needs from here, not from another
algorithm (the replay buffer, below the algorithms, takes `nstep_targets` from `srl.data.returns`)."""

from __future__ import annotations

import numpy as np
import torch

from srl.data.returns import nstep_targets

__all__ = ["clip_grad_norm", "episode_starts", "nstep_targets", "training_device"]


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> None:
    """Scale the gradients so that their joint L2 norm is at most `max_norm`.

    What `torch.nn.utils.clip_grad_norm_` does, in three foreach kernels without its
    per-call grouping by device and dtype, which costs a small network a noticeable share of
    each minibatch (docs/benchmarks.md, "Measurements behind the code").
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))


def episode_starts(terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    """True where a row begins a new episode: the row after one whose episode ended."""
    starts = np.zeros(terminated.shape, bool)
    starts[1:] = terminated[:-1] | truncated[:-1]
    return starts


def training_device(params: list[torch.Tensor]) -> torch.device:
    """Where the policy trains: its parameters' device (the trainer's `device`)."""
    return params[0].device if params else torch.device("cpu")
