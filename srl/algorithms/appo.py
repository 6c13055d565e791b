"""APPO: PPO's update on V-trace targets, so that stale samples are corrected, not dropped.

V-trace is from Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures": the target of section 4.1 (with the lambda of its
remarks) and the policy gradient of 4.2. The actors act with older policy versions mu than
the learner's pi; with rho_t = min(rho_bar, pi/mu) of the taken action and
c_t = lambda * min(c_bar, pi/mu):

    delta_t = rho_t (r_t + gamma V(x_t+1) - V(x_t))
    v_t     = V(x_t) + delta_t + gamma c_t (v_t+1 - V(x_t+1))      (v_T = V(x_T))
    A_t     = rho_t (r_t + gamma v_t+1 - V(x_t))                    (policy-gradient advantage)

Choices:
- Only the targets differ from PPO: `APPO.targets` replaces GAE, and the update stays PPO's
  clipped surrogate with the actors' log-prob as the old one, as Sample Factory's APPO does.
  The ratio's clip bounds each step; V-trace makes the targets those of the current policy.
- V is the current network's value of every row (recomputed without gradients), not the one
  the actors recorded: the targets are the current policy's, and so are the baselines.
- Episode boundaries as in PPO's `gae`: after a termination the next value is 0, after a
  truncation V(x_t) stands in for the unseen next state, and no correction crosses either.
- With pi = mu and lambda = 1, v_t is the discounted return bootstrapped from V(x_T) and
  A_t the advantage of GAE with lambda 1 (the tests check both).
- Rows of agents that finished early (`keys.ALIVE` false) count as taken on-policy: they are
  terminated placeholders that no live row reads, and PPO's minibatches leave them out.
"""

from __future__ import annotations

import numpy as np
import pydantic
import torch

from srl.algorithms.common import episode_starts, training_device
from srl.algorithms.ppo import PPO, PPOConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray


class APPOConfig(PPOConfig):
    #: Clip of the importance weights in the targets' TD errors and in the advantages.
    rho_bar: float = pydantic.Field(1.0, gt=0)
    #: Clip of the trace weights, which carry corrections back through time.
    c_bar: float = pydantic.Field(1.0, gt=0)
    #: V-trace's lambda (trace weights lambda * min(c_bar, pi/mu)); 1 is the paper's V-trace.
    gae_lambda: float = pydantic.Field(1.0, ge=0, le=1)
    #: One pass over each batch: samples arrive a few versions old already, and V-trace
    #: corrects for that; a second epoch would reuse them staler still.
    epochs: pydantic.PositiveInt = 1


def vtrace(reward: np.ndarray, value: np.ndarray, log_rho: np.ndarray, terminated: np.ndarray,
           truncated: np.ndarray, gamma: float, lam: float, rho_bar: float,
           c_bar: float) -> tuple[np.ndarray, np.ndarray]:
    """Policy-gradient advantages and value targets v_t for [T] steps, given the values of
    [T + 1] observations and log(pi/mu) of the [T] actions."""
    T = reward.shape[0]
    # min(bar, exp(x)) as exp(min(log bar, x)): no overflow for actions pi now favours hugely.
    rho = np.exp(np.minimum(log_rho, np.log(rho_bar)))
    c = lam * np.exp(np.minimum(log_rho, np.log(c_bar)))
    vs = value.copy()  # row T keeps V(x_T): the bootstrap
    advantages = np.zeros_like(reward)
    for t in reversed(range(T)):
        done = np.logical_or(terminated[t], truncated[t])
        next_value = np.where(done, np.where(terminated[t], 0.0, value[t]), value[t + 1])
        # Across a boundary the next state's target is its value: no correction carries over.
        next_vs = np.where(done, next_value, vs[t + 1])
        delta = rho[t] * (reward[t] + gamma * next_value - value[t])
        vs[t] = value[t] + delta + gamma * c[t] * (next_vs - next_value)
        advantages[t] = rho[t] * (reward[t] + gamma * next_vs - value[t])
    return advantages, vs[:T]


def current_estimates(policy: Policy, batch: NamedArray) -> tuple[np.ndarray, np.ndarray]:
    """Log-prob of each row's taken action and the value of each row, [T + 1, B], under the
    policy as it is now: whole columns, so a recurrent policy unrolls them as in training."""
    device = training_device(list(policy.parameters()))
    tensor = lambda x: torch.as_tensor(np.ascontiguousarray(x), device=device)  # noqa: E731
    inputs = {keys.OBS: {k: tensor(v) for k, v in batch[keys.OBS].items_flat()},
              keys.ACTION: tensor(batch[keys.ACTION])}
    if keys.RNN_STATE in batch:
        inputs[keys.RNN_STATE] = {k: tensor(v[0]) for k, v in batch[keys.RNN_STATE].items_flat()}
        inputs[keys.EPISODE_START] = tensor(episode_starts(batch[keys.TERMINATED], batch[keys.TRUNCATED]))
    with torch.no_grad():
        out = policy.analyze(inputs, entropy=False)
    return out.logprob.cpu().numpy(), out.value.cpu().numpy()


class APPO(PPO):
    Config = APPOConfig
    corrects_staleness = True

    def __init__(self, policy: Policy, config: APPOConfig) -> None:
        super().__init__(policy, config)
        self.staleness: dict[str, float] = {}

    def step(self, batch: NamedArray) -> dict[str, float]:
        stats = super().step(batch)
        return {**stats, **self.staleness}

    def targets(self, batch: NamedArray, reward: np.ndarray, value: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """V-trace under the current policy; the actors' values (`value`) are not used."""
        c: APPOConfig = self.config
        now_logprob, now_value = current_estimates(self.policy, batch)
        log_rho = now_logprob[:-1] - batch[keys.LOGPROB][:-1]
        alive = batch[keys.ALIVE][:-1].astype(bool) if keys.ALIVE in batch else np.ones(reward.shape, bool)
        log_rho = np.where(alive, log_rho, 0.0)
        # Reported, to show how far behind the samples are and how much V-trace corrects.
        lag = self.policy.version - batch[keys.VERSION][:-1]
        self.staleness = {"version_lag": float(lag[alive].mean()),
                          "rho_mean": float(np.exp(np.minimum(log_rho[alive], np.log(c.rho_bar))).mean())}
        return vtrace(reward, now_value.astype(np.float32), log_rho.astype(np.float32), terminated, truncated,
                      c.gamma, c.gae_lambda, c.rho_bar, c.c_bar)
