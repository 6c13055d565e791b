"""PPO: clipped surrogate objective, GAE, optional value clipping, entropy bonus.

Schulman et al. 2017, with the implementation details of "The 37 Implementation Details
of PPO" (advantage normalisation per minibatch, gradient clipping, Adam eps 1e-5).

The batch is time-major, [T + 1, B, ...]: rows 0..T-1 are trained on; row T only
supplies the bootstrap value. Truncated episodes bootstrap from the value of their last
state (the observation after truncation is not sent back through the policy; V(s_t) is
a close stand-in for V(s_t+1)), terminated episodes from zero.
"""

from __future__ import annotations

import numpy as np
import pydantic
import torch

from srl.api.algorithm import Algorithm, AlgorithmConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray


class PPOConfig(AlgorithmConfig):
    lr: float = pydantic.Field(3e-4, gt=0)
    gamma: float = pydantic.Field(0.99, ge=0, le=1)
    gae_lambda: float = pydantic.Field(0.95, ge=0, le=1)
    clip: float = pydantic.Field(0.2, gt=0)
    #: Clip the value update to +/- this around the old value (None: plain MSE).
    value_clip: float | None = None
    epochs: pydantic.PositiveInt = 4
    minibatches: pydantic.PositiveInt = 4
    entropy_coef: float = 0.0
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    #: Divide rewards by the running standard deviation of discounted returns.
    normalize_rewards: bool = False
    #: Anneal the learning rate linearly to zero over this many trained env steps (None: constant).
    anneal_lr_steps: pydantic.PositiveInt | None = None


def gae(reward: np.ndarray, value: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns for [T] steps given values of [T + 1] observations."""
    T = reward.shape[0]
    advantages = np.zeros_like(reward)
    last = np.zeros_like(reward[0])
    for t in reversed(range(T)):
        done = np.logical_or(terminated[t], truncated[t])
        # After a truncation the next row is a new episode: bootstrap from V(s_t) instead.
        next_value = np.where(done, np.where(terminated[t], 0.0, value[t]), value[t + 1])
        delta = reward[t] + gamma * next_value - value[t]
        last = delta + gamma * lam * (1.0 - done) * last
        advantages[t] = last
    return advantages, advantages + value[:T]


class RunningVariance:
    """Running mean/variance of scalars (parallel update), for reward scaling."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def update(self, x: np.ndarray) -> None:
        n = x.size
        if n == 0:
            return
        delta, total = float(x.mean()) - self.mean, self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + float(x.var()) * n + delta**2 * self.count * n / total) / total
        self.count = total


def discounted_returns(reward: np.ndarray, done: np.ndarray, gamma: float) -> np.ndarray:
    """Returns-to-go within the batch (no bootstrap): only their spread matters for scaling."""
    out = np.zeros_like(reward)
    running = np.zeros_like(reward[0])
    for t in reversed(range(reward.shape[0])):
        running = reward[t] + gamma * running * (1.0 - done[t])
        out[t] = running
    return out


class PPO(Algorithm):
    Config = PPOConfig

    def __init__(self, policy: Policy, config: PPOConfig) -> None:
        super().__init__(policy, config)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr, eps=1e-5, foreach=True)
        self.return_scale = RunningVariance()
        self.trained_steps = 0

    def step(self, batch: NamedArray) -> dict[str, float]:
        c: PPOConfig = self.config
        value = batch[keys.VALUE].astype(np.float32)
        reward = batch[keys.REWARD][:-1].astype(np.float32)
        terminated, truncated = batch[keys.TERMINATED][:-1], batch[keys.TRUNCATED][:-1]
        if c.normalize_rewards:
            self.return_scale.update(discounted_returns(reward, terminated | truncated, c.gamma))
            reward = reward / np.float32(np.sqrt(self.return_scale.var) + 1e-8)
        advantages, returns = gae(reward, value, terminated, truncated, c.gamma, c.gae_lambda)
        if c.anneal_lr_steps is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = c.lr * max(0.0, 1.0 - self.trained_steps / c.anneal_lr_steps)
        self.trained_steps += reward.size
        rows = batch[:-1]
        # Rows of agents that finished before their env did are placeholders: leave them out.
        keep = rows[keys.ALIVE].reshape(-1) if keys.ALIVE in rows else np.ones(rows[keys.REWARD].size, bool)
        flat = lambda x: torch.as_tensor(np.ascontiguousarray(x).reshape(-1, *x.shape[2:])[keep])  # noqa: E731
        obs = {k: flat(v) for k, v in rows[keys.OBS].items_flat()}
        action, old_logprob = flat(rows[keys.ACTION]), flat(rows[keys.LOGPROB])
        old_value, adv, ret = flat(value[:-1]), flat(advantages), flat(returns)

        n = adv.shape[0]
        size = max(1, n // c.minibatches)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clip_fraction": []}
        for _ in range(c.epochs):
            order = torch.randperm(n)
            for start in range(0, n - size + 1, size):
                idx = order[start:start + size]
                out = self.policy.analyze({keys.OBS: {k: v[idx] for k, v in obs.items()}, keys.ACTION: action[idx]})
                log_ratio = out.logprob - old_logprob[idx]
                ratio = log_ratio.exp()
                a = adv[idx]
                if c.normalize_advantages:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                policy_loss = torch.max(-a * ratio, -a * ratio.clamp(1 - c.clip, 1 + c.clip)).mean()
                if c.value_clip is None:
                    value_loss = 0.5 * (out.value - ret[idx]).pow(2).mean()
                else:
                    clipped = old_value[idx] + (out.value - old_value[idx]).clamp(-c.value_clip, c.value_clip)
                    value_loss = 0.5 * torch.max((out.value - ret[idx]).pow(2), (clipped - ret[idx]).pow(2)).mean()
                entropy = out.entropy.mean()
                loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm, foreach=True)
                self.optimizer.step()

                with torch.no_grad():
                    stats["policy_loss"].append(policy_loss.item())
                    stats["value_loss"].append(value_loss.item())
                    stats["entropy"].append(entropy.item())
                    stats["approx_kl"].append(((ratio - 1) - log_ratio).mean().item())
                    stats["clip_fraction"].append(((ratio - 1).abs() > c.clip).float().mean().item())
        self.policy.version += 1
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "return_scale": vars(self.return_scale),
                "trained_steps": self.trained_steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        vars(self.return_scale).update(state.get("return_scale", {}))
        self.trained_steps = state.get("trained_steps", 0)
