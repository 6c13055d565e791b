"""Forward passes in NumPy for acting on small CPU batches.

An actor's forward pass runs on a few to a few hundred rows between env steps. There a torch
call costs more than its arithmetic, and the env's Python code in between evicts torch's
dispatch code from the caches, so each call costs well over its tight-loop time
(docs/benchmarks.md, "Measurements behind the code"). A NumPy matmul on the same rows costs a fraction of
that. A feed-forward network on the CPU therefore acts through NumPy copies of its layers: one
matmul, one add and one activation per layer.

The copies follow the module: they are rebuilt after any optimizer step in the process, and
whenever one of the module's tensors changes in place otherwise (loaded parameters, updated
statistics: torch counts such writes in a tensor's `_version`) or moves to new memory (shared
memory). Optimizer steps are counted apart because a fused optimizer writes the parameters
without counting. Training keeps torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

import numpy as np
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

T = TypeVar("T")
#: An activation applied in place to a float32 array.
Activation = Callable[[np.ndarray], None]
#: One layer as NumPy computes it: x @ weight + bias, then the activation (None: linear).
Layer = tuple[np.ndarray, np.ndarray, Activation | None]


def relu_(x: np.ndarray) -> None:
    np.maximum(x, 0, out=x)


def tanh_(x: np.ndarray) -> None:
    np.tanh(x, out=x)


#: The MLP torsos' activations by their config names.
ACTIVATIONS: dict[str, Activation] = {"relu": relu_, "tanh": tanh_}


def linear_layer(weight: np.ndarray, bias: np.ndarray, activation: Activation | None = None) -> Layer:
    """A layer from a linear layer's weight [out, in] and bias [out] (copied)."""
    # Transposed once here, so each call multiplies row-major arrays.
    return np.ascontiguousarray(weight.T, np.float32), np.array(bias, np.float32), activation


def torch_layer(linear: nn.Linear, activation: Activation | None = None) -> Layer:
    """`linear_layer` of a torch linear layer's current weights."""
    return linear_layer(linear.weight.detach().numpy(), linear.bias.detach().numpy(), activation)


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
    parts = [np.asarray(x).reshape(len(x), -1).astype(np.float32, copy=False) for x in (obs[k] for k in fields)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, -1)


#: Optimizer steps taken in this process (any optimizer's).
_optimizer_steps = [0]


def _count_step(*_: object) -> None:
    _optimizer_steps[0] += 1


register_optimizer_step_post_hook(_count_step)


class NumpyCopy(Generic[T]):
    """What `build` makes from `module`'s parameters and buffers (NumPy layers), rebuilt when
    any of them changes."""

    def __init__(self, module: nn.Module, build: Callable[[], T]) -> None:
        self.module = module
        self.tensors = [*module.parameters(), *module.buffers()]
        self.build = build
        self._key: tuple | None = None
        self._built: T | None = None

    def follows(self, module: nn.Module) -> bool:
        """Whether this copies `module` (a policy whose net was replaced acts through torch)."""
        return module is self.module

    def get(self) -> T:
        key = (_optimizer_steps[0], *((t.data_ptr(), t._version) for t in self.tensors))
        if key != self._key:
            self._built, self._key = self.build(), key
        return self._built
