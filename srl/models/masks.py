"""Legal-action masks: an observation's `action_mask` field (`keys.ACTION_MASK`, 0/1 per
discrete action) keeps a policy from choosing an illegal action.

Every policy that scores discrete actions (logits, Q-values) passes its scores through
`mask_scores` (torch) or `mask_scores_numpy` (acting in NumPy) before it samples, takes an
argmax or a max. An illegal action's score becomes `ILLEGAL`: finite, so softmax gives it
probability 0 exactly and gradients stay finite (an -inf logit turns an entropy's gradient
into NaN), and far below any score a network produces.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from srl.data import keys

ILLEGAL = -1e9


def check_mask_space(observation_space: gym.spaces.Dict, actions: int | None) -> None:
    """Raise ValueError unless an `action_mask` field, if any, has one entry per discrete action
    (`actions`: their count, None for a continuous action space)."""
    space = observation_space.spaces.get(keys.ACTION_MASK)
    if space is None:
        return
    if actions is None:
        raise ValueError(f"observation field {keys.ACTION_MASK!r}: legal-action masks need discrete actions")
    if tuple(space.shape) != (actions,):
        raise ValueError(f"observation field {keys.ACTION_MASK!r}: shape {tuple(space.shape)}, expected ({actions},): "
                         "one entry per action")


def mask_scores(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`scores` [N, actions] with the entries `mask` [N, actions] marks 0 set to `ILLEGAL`."""
    if mask is None:
        return scores
    return scores.masked_fill(mask.reshape(scores.shape) == 0, ILLEGAL)


def mask_scores_numpy(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """`mask_scores` in NumPy, in place; returns `scores`."""
    if mask is not None:
        scores[np.asarray(mask).reshape(scores.shape) == 0] = ILLEGAL
    return scores
