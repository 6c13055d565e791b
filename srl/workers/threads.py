"""How many threads a process computes on."""

from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits


def compute_threads(threads: int) -> None:
    """Run this process's torch and NumPy (BLAS) arithmetic on `threads` threads. Left alone,
    NumPy's BLAS runs a matmul of a few hundred rows on every core (policies act through NumPy:
    srl/models/numpy_forward.py), beside the run's other processes."""
    torch.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")
