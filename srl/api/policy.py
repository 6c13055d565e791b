"""The policy interface: batched acting for workers, batched analysis for trainers.

The loop it lives in::

    # policy worker (or an actor with inline inference)
    out = policy.rollout(obs_batch, rnn_state, deterministic=False)   # action, logprob, value, rnn_state
    # trainer (inside an algorithm's step)
    analysis = policy.analyze(sample_batch)                          # logprob, entropy, value per row
    # parameter stream
    params = policy.get_params(); other.set_params(params, version)

Batches are `NamedArray`s keyed by `srl.data.keys`. RNN policies receive and return
their hidden state as a NamedArray under `keys.RNN_STATE`; feed-forward policies
return an empty one. Weights travel as a flat NamedArray of numpy arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from srl.data.named_array import NamedArray


@dataclass
class Analysis:
    """What `Policy.analyze` returns per row: log-prob of the taken action, entropy (None when
    not asked for), value."""

    logprob: Any
    entropy: Any
    value: Any


class Policy(ABC):
    """A (usually torch) model with a version that counts trainer updates."""

    version: int = 0

    @abstractmethod
    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, **args: Any) -> None: ...

    @abstractmethod
    def initial_state(self, batch: int) -> NamedArray:
        """RNN state for `batch` fresh rows (an empty NamedArray for feed-forward policies)."""

    @abstractmethod
    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        """Act on a batch [B, ...]: returns action, logprob, value and the next rnn_state."""

    @abstractmethod
    def analyze(self, batch: Mapping[str, Any], entropy: bool = True) -> Analysis:
        """Re-evaluate rows of a sample batch for training (differentiable tensors).

        `batch` maps `keys.OBS` (a dict of tensors), `keys.ACTION` and, for RNN policies,
        `keys.RNN_STATE` and the done flags, to tensors of any common leading shape. With
        `entropy=False` the caller does not use the entropy, and it may be left out (None).
        """

    def update_statistics(self, obs: NamedArray) -> None:
        """Fold a training batch's observations into running statistics (e.g. normalisation).

        The trainer calls it before each learning step; the statistics ship with the params.
        """

    @abstractmethod
    def get_params(self) -> NamedArray:
        """Weights (and any running statistics acting needs) as numpy arrays."""

    @abstractmethod
    def set_params(self, params: NamedArray, version: int) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint needs; defaults to the parameters."""
        return {"params": dict(self.get_params().items_flat()), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_params(NamedArray.from_flat({k: np.asarray(v) for k, v in state["params"].items()}), state["version"])
