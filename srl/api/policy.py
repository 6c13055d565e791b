"""The policy interface: batched acting for workers, batched analysis for trainers.

The loop it lives in::

    # policy worker (or an actor with inline inference)
    out = policy.rollout(obs_batch, rnn_state, deterministic=False)   # action, logprob, value, rnn_state
    # trainer: an algorithm optimises policy.parameters(); data-parallel trainers also
    # keep policy.buffers() equal
    analysis = policy.analyze(sample_batch)                          # logprob, entropy, value per row
    policy.update_statistics(sample_batch[keys.OBS])
    # parameter stream
    params = policy.get_params(); other.set_params(params, version)
    # srl export (optional): a standalone module of deterministic acting, traced to a file
    module = policy.acting_module()

Batches are `NamedArray`s keyed by `srl.data.keys`. Weights travel as a flat NamedArray
of numpy arrays. Callers use nothing else (and `version`): `examples/user_policy/` is a
policy written from this file alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from srl.data import keys
from srl.data.named_array import NamedArray

if TYPE_CHECKING:
    import torch


@dataclass
class Analysis:
    """What `Policy.analyze` returns per row: log-prob of the taken action, entropy (None when
    not asked for), value."""

    logprob: Any
    entropy: Any
    value: Any


class Policy(ABC):
    """A (usually torch) model with a version that counts trainer updates: the algorithm bumps
    it, `set_params` sets it, and every action is stamped with it (for staleness checks)."""

    version: int = 0

    @abstractmethod
    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, **args: Any) -> None:
        """`args`: the config's `policy.args`, and `device` if the signature names it."""

    @abstractmethod
    def initial_state(self, batch: int) -> NamedArray:
        """RNN state for `batch` fresh rows (an empty NamedArray for feed-forward policies)."""

    @abstractmethod
    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        """Act on B rows (no gradients): `obs` has a numpy leaf [B, ...] per observation field,
        `state` is the RNN state (empty for feed-forward policies). Returns numpy leaves:

        - `keys.ACTION` [B, *action shape]: integers for discrete spaces, float32 for Box;
        - `keys.LOGPROB` [B] float32: that action's log-prob (the algorithm's "old" one);
        - `keys.VALUE` [B] float32: the value estimate (advantages bootstrap from it);
        - `keys.RNN_STATE` (RNN policies only): the state after this step, leaves [B, ...].

        The caller adds `keys.VERSION`; every field but the RNN state is recorded per row in
        the sample batch (so the same fields and dtypes each call; an algorithm may read more).
        """

    @abstractmethod
    def analyze(self, batch: Mapping[str, Any], entropy: bool = True) -> Analysis:
        """Re-evaluate rows of a sample batch for training (differentiable tensors).

        `batch` maps `keys.OBS` (a dict of tensors by field path), `keys.ACTION` and, for RNN
        policies, `keys.RNN_STATE` (the state each column's first row started from) and
        `keys.EPISODE_START` (rows [T, B], time-major), to tensors of any common leading
        shape (other keys are the algorithm's own); logprob, entropy and value have that
        shape. With `entropy=False` the caller does not use the entropy: it may be None.
        """

    def parameters(self) -> Iterable[torch.Tensor]:
        """Trainable tensors (what `analyze` differentiates through): algorithms optimise them,
        data-parallel trainers average their gradients. Default: none (a policy that does not learn)."""
        return ()

    def buffers(self) -> Iterable[torch.Tensor]:
        """Untrained state tensors, changed in place (e.g. running observation statistics).
        Data-parallel trainers start from rank 0's and average the floating-point ones after
        each `update_statistics`, so all copies stay equal. Default: none."""
        return ()

    def update_statistics(self, obs: NamedArray) -> None:
        """Fold a training batch's observations into running statistics (e.g. normalisation),
        after each learning step. They belong in `buffers()` and ship with the params."""

    @abstractmethod
    def get_params(self) -> NamedArray:
        """Weights (and any running statistics acting needs) as numpy arrays."""

    @abstractmethod
    def set_params(self, params: NamedArray, version: int) -> None:
        """Load what `get_params` returned (from another copy) and take its version."""

    def acting_module(self) -> torch.nn.Module:
        """Deterministic acting as a standalone torch module, for `srl export` (optional).

        Its `forward` takes one tensor [B, ...] per observation field, in the observation
        space's order (float fields as float32, others in their own dtype), then, for an RNN
        policy, one per leaf of `initial_state`, in its order; it returns the action
        `rollout(..., deterministic=True)` takes ([B, *action shape]: the argmax of a discrete
        head, the mean of a Gaussian), then the next state's leaves. Everything acting needs
        (observation normalisation included) is inside; the export traces it, so its forward
        must not branch on tensor values. It may share the policy's weights.
        Default: not implemented (such a policy cannot be exported).
        """
        raise NotImplementedError(f"{type(self).__name__} has no acting_module(), so it cannot be exported")

    def acting_as(self, actor: int, actors: int) -> None:
        """Called once by actor `actor` of `actors` on the copy it acts with (inline inference,
        or the copy whose `initial_state` it uses), and by policy worker `actor` of `actors` on
        its copy: a policy may explore differently per actor (Ape-X gives each actor its own
        epsilon) or only in copies that act for training. Default: every copy acts alike."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint needs; defaults to the parameters."""
        return {"params": dict(self.get_params().items_flat()), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_params(NamedArray.from_flat({k: np.asarray(v) for k, v in state["params"].items()}), state["version"])


class ValuePolicy(Policy):
    """A policy that acts from action values (the DQN family): `q_values` is what value-based
    algorithms learn through; `rollout` acts on them (greedy, or exploring, e.g. epsilon-greedy).
    """

    @abstractmethod
    def q_values(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Action values [..., actions] (differentiable) for rows of any leading shape.

        `batch` maps `keys.OBS` (a dict of tensors or arrays by field path) and, for RNN policies,
        `keys.RNN_STATE` (the state each column's first row started from) and
        `keys.EPISODE_START`, with rows [T, B] time-major, as `analyze` takes them.
        """


class ModelPolicy(Policy):
    """A policy that acts by searching a model it learns (MuZero): what model-based algorithms
    learn through. The model's three functions, batched over rows [N] and differentiable, with
    values and rewards as logits over a categorical support (`to_support` / `from_support`).
    `rollout` searches with them and returns `keys.VALUE` and `keys.SEARCH_POLICY` besides the
    action.
    """

    #: The discount the search and the value targets use.
    discount: float
    #: Players alternate (a turn-based game's agents, one moving at each step): the model
    #: unrolls the movers' moves, and each value is the mover's, of sign flipping every ply.
    two_player: bool = False

    @abstractmethod
    def represent(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """Hidden states [N, ...] of observations [N, ...] (`keys.OBS`' fields, arrays or tensors)."""

    @abstractmethod
    def predict(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy logits [N, actions], value logits [N, bins]) of hidden states."""

    @abstractmethod
    def transition(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(next hidden states, reward logits [N, bins]) after `action` [N]."""

    @abstractmethod
    def to_support(self, x: torch.Tensor) -> torch.Tensor:
        """Targets [..., bins] for scalars `x` [...] (the distribution whose `from_support` is x)."""

    @abstractmethod
    def from_support(self, logits: torch.Tensor) -> torch.Tensor:
        """The scalars [...] that logits [..., bins] stand for."""

    @abstractmethod
    def search_targets(self, obs: Any) -> NamedArray:
        """What a search from each row of observations [N, ...] finds with the parameters held now:
        `keys.VALUE` [N] and `keys.SEARCH_POLICY` [N, actions], the targets `rollout` records
        (reanalyse refreshes stored play with them)."""


def mask_of(obs: Mapping[str, Any]) -> Any:
    """The observation fields' legal-action mask (`keys.ACTION_MASK`; None when they have none)."""
    return obs[keys.ACTION_MASK] if keys.ACTION_MASK in obs else None


def random_legal(legal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of `legal` [N, A] (bool), drawn uniformly among the row's legal ones:
    the highest of random scores where legal (a row with none gets 0)."""
    return np.where(legal, rng.random(legal.shape), -1.0).argmax(-1)


def with_random_moves(actions: np.ndarray, mask: np.ndarray | None, actions_count: int, rate: float,
                      rng: np.random.Generator) -> np.ndarray:
    """`actions` [N], each replaced at the rate `rate` by one of its row's legal actions (`mask`
    [N, A]; every one of `actions_count` without a mask) drawn uniformly; the rest as they were
    (a row with no legal action keeps its own)."""
    if rate == 0:
        return actions
    picked = rng.random(len(actions)) < rate
    if not picked.any():
        return actions
    legal = (np.asarray(mask, bool)[picked] if mask is not None
             else np.ones((int(picked.sum()), actions_count), bool))
    actions = actions.copy()
    actions[picked] = np.where(legal.any(1), random_legal(legal, rng), actions[picked])
    return actions
