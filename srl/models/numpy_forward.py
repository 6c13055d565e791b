"""Forward passes in NumPy for acting on small CPU batches.

An actor's forward pass runs on a few to a few hundred rows between env steps. There a torch
call costs more than its arithmetic, and the env's Python code in between evicts torch's
dispatch code from the caches, so each call costs about twice its tight-loop time
(docs/benchmarks.md). A NumPy matmul on the same rows costs a fraction of that. A feed-forward
network on the CPU therefore acts through NumPy copies of its layers: one matmul, one add and
one activation per layer.

The copies follow the module: they are rebuilt whenever one of its parameters changes in
place (an optimizer step, loaded parameters: torch counts every in-place write in a tensor's
`_version`) or moves to new memory (shared memory). Training keeps torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import nn

#: An activation applied in place to a float32 array.
Activation = Callable[[np.ndarray], None]
#: One layer as NumPy computes it: x @ weight + bias, then the activation (None: linear).
Layer = tuple[np.ndarray, np.ndarray, Activation | None]


def compute_threads(threads: int) -> None:
    """Run this process's torch and NumPy (BLAS) arithmetic on `threads` threads. Left alone,
    NumPy's BLAS runs a matmul of a few hundred rows on every core, and its threads spin
    between calls."""
    torch.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")


def relu_(x: np.ndarray) -> None:
    np.maximum(x, 0, out=x)


def tanh_(x: np.ndarray) -> None:
    np.tanh(x, out=x)


def linear_layer(weight, bias, activation: Activation | None = None) -> Layer:
    """A layer from a torch linear layer's weight [out, in] and bias [out] (tensors or arrays)."""
    weight = np.asarray(weight.detach().numpy() if hasattr(weight, "detach") else weight, np.float32)
    bias = np.asarray(bias.detach().numpy() if hasattr(bias, "detach") else bias, np.float32)
    # Transposed once here, so each call multiplies row-major arrays.
    return np.ascontiguousarray(weight.T), bias.copy(), activation


def run_layers(layers: Sequence[Layer], x: np.ndarray) -> np.ndarray:
    """x [N, in] float32 through `layers`; returns a new array [N, out]."""
    for weight, bias, activation in layers:
        x = x @ weight
        x += bias
        if activation is not None:
            activation(x)
    return x


def flatten_fields(obs: Mapping[str, np.ndarray], fields: Sequence[str]) -> np.ndarray:
    """The flatten encoder in NumPy: every field [N, ...] flattened and concatenated, as float32."""
    parts = [np.asarray(obs[k]).reshape(len(obs[k]), -1).astype(np.float32, copy=False) for k in fields]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, -1)


class NumpyCopy:
    """NumPy layers built by `build` from `module`'s parameters, rebuilt when any of them changes."""

    def __init__(self, module: nn.Module, build: Callable[[], list[Layer]]) -> None:
        self.params = list(module.parameters())
        self.build = build
        self._key: tuple | None = None
        self._layers: list[Layer] = []

    def layers(self) -> list[Layer]:
        key = tuple((p.data_ptr(), p._version) for p in self.params)
        if key != self._key:
            self._layers, self._key = self.build(), key
        return self._layers
