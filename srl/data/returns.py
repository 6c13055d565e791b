"""Returns computed from stored rewards, shared by the replay buffer and the algorithms."""

from __future__ import annotations

import numpy as np


def nstep_targets(reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, n: int,
                  gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """N-step returns of segments: inputs [S, T, ...] (rows 0..T-1), outputs [S, T, ...] each.

    Returns (return, discount, bootstrap row). Row t sums the rewards of rows t..t+m-1,
    m = min(n, T - t, steps to the episode's end); it bootstraps from the observation in
    row t + m with discount gamma ** m, or 0 when the episode terminated. After a truncation
    the next row holds a new episode's first observation, so the value of the last row
    before it stands in (bootstrap row t + m - 1, as PPO's GAE does with V(s_t)).
    """
    T = reward.shape[1]
    rows = np.arange(T).reshape(1, T, *([1] * (reward.ndim - 2)))
    ret = np.zeros(reward.shape, np.float32)
    scale = np.ones(reward.shape, np.float32)
    ended = np.zeros(reward.shape, bool)
    terminal = np.zeros(reward.shape, bool)
    boot = np.broadcast_to(rows, reward.shape).copy()
    # Step k of rows t < T - k is row t + k's: slices of the segment, no gathers (this runs
    # for every trajectory a buffer stores).
    for k in range(min(n, T)):
        m = T - k
        live = ~ended[:, :m]
        term = terminated[:, k:] & live
        trunc = truncated[:, k:] & live
        ret[:, :m] += np.where(live, scale[:, :m] * reward[:, k:], 0.0)
        np.multiply(scale[:, :m], np.float32(gamma), out=scale[:, :m], where=live)
        # Bootstrap from the row after this step; after a truncation, from this step's own row.
        np.copyto(boot[:, :m], rows[:, :m] + k + 1 - trunc, where=live)
        terminal[:, :m] |= term
        ended[:, :m] |= term | trunc
    discount = np.where(terminal, 0.0, scale).astype(np.float32)
    return ret, discount, boot.astype(np.int16 if T < 32_000 else np.int32)
