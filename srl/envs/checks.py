"""Checks at the env boundary: bad env output or a bad action becomes one clear error.

They are vectorised over a slot (one numpy call per field per step), so they cost little
even for fast envs. Shape mismatches surface when an observation is written into the
trajectory buffer; dtypes are checked at reset; NaN and infinities after every step.
"""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
import numpy as np

OnBadOutput = Literal["raise", "skip_episode"]


class BadEnvOutput(RuntimeError):
    """An env returned an observation or reward of the wrong shape or dtype, or NaN."""


class BadAction(ValueError):
    """The policy produced an action outside the env's action space."""


def where(env_name: str, env_index: int, agent: str, field: str) -> str:
    return f"env {env_name!r} (env {env_index} of its slot), agent {agent!r}, field {field!r}"


def check_dtype(env_name: str, env_index: int, agent: str, field: str, value: object, dtype: np.dtype) -> None:
    got = np.asarray(value).dtype
    if not np.can_cast(got, dtype, casting="same_kind"):
        raise BadEnvOutput(f"{where(env_name, env_index, agent, field)}: dtype {got} does not fit the declared {dtype}")


def shape_error(env_name: str, env_index: int, agent: str, field: str, value: object,
                shape: tuple[int, ...]) -> BadEnvOutput:
    got = np.shape(value)
    return BadEnvOutput(f"{where(env_name, env_index, agent, field)}: shape {got}, declared {shape}")


def non_finite_rows(arrays: dict[str, np.ndarray], reward: np.ndarray) -> dict[int, str]:
    """{row: field} for rows holding NaN or infinity in a float observation field or the reward."""
    bad: dict[int, str] = {}
    for field, values in arrays.items():
        # One reduction per field on the common path; rows are located only when one is bad.
        # dtype.kind, not np.issubdtype: this runs every env step, where issubdtype's cost per
        # field shows on a fast env.
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            flat = values.reshape(len(values), -1)
            for row in np.flatnonzero(~np.isfinite(flat).all(axis=1)):
                bad.setdefault(int(row), field)
    if not np.isfinite(reward).all():
        for row in np.flatnonzero(~np.isfinite(reward)):
            bad.setdefault(int(row), "reward")
    return bad


def check_actions(env_name: str, space: gym.Space, actions: np.ndarray) -> None:
    """Discrete and MultiDiscrete actions must be in range (Box actions are clipped instead)."""
    if isinstance(space, gym.spaces.Discrete):
        low, high = int(space.start), int(space.start + space.n - 1)
        # Two reductions on the common path (comparing with Python ints costs more than this).
        if actions.size == 0 or (low <= actions.min() and actions.max() <= high):
            return
    elif isinstance(space, gym.spaces.MultiDiscrete):
        low, high = 0, np.asarray(space.nvec) - 1
    else:
        return
    bad = np.flatnonzero(((actions < low) | (actions > high)).reshape(len(actions), -1).any(axis=1))
    if bad.size:
        raise BadAction(f"env {env_name!r}: action {actions[bad[0]].tolist()} of row {int(bad[0])} is outside the "
                        f"action space {space}")
