"""tanh for the MLP torsos, fast on a CPU.

PyTorch's CPU `tanh` is about nine times slower an element than its `sigmoid`, enough that a
small tanh MLP's learner spent a large share of its time in it. Large inputs on a CPU
therefore go through tanh(x) = 2 sigmoid(2x) - 1 (within 2e-7 of `torch.tanh`), whose three
extra kernels cost more than they save on small inputs: acting batches keep `torch.tanh`.
The measurements are in docs/benchmarks.md ("Measurements behind the code").
"""

from __future__ import annotations

import torch

#: Elements from which the sigmoid form is faster (measured with and without gradients).
SIGMOID_FORM_FROM = 8192


class _SigmoidTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = _sigmoid_form(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # grad * (1 - y^2), as torch.tanh's own


def _sigmoid_form(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


def tanh(x: torch.Tensor) -> torch.Tensor:
    if x.numel() < SIGMOID_FORM_FROM or not x.is_cpu:
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SigmoidTanh.apply(x)
    return _sigmoid_form(x)
