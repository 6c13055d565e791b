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

from srl.algorithms.common import clip_grad_norm, episode_starts, training_device
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
    #: Clip each update around the policy as it was when the update began (one more forward pass
    #: over the batch), not around the actors' older one, and weight each row by how much likelier
    #: that policy made its action than the actors' did (decoupled PPO: Hilton et al. 2021, "Batch
    #: size-invariance for policy optimization"). Asynchronous actors sample with a version or two
    #: behind: clipped around it, many rows start out clipped and teach nothing.
    decoupled: bool = False


#: The largest weight decoupled PPO gives a row (the learner's probability of its action over the
#: actors'): a rare action of the actors cannot take over a minibatch.
DECOUPLED_WEIGHT_MAX = 2.0


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
        self.params = list(policy.parameters())
        self.device = training_device(self.params)
        # Fused: one kernel for the whole update instead of several per parameter tensor.
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr, eps=1e-5, fused=True)
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
        advantages, returns = self.targets(batch, reward, value, terminated, truncated)
        if c.anneal_lr_steps is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = c.lr * max(0.0, 1.0 - self.trained_steps / c.anneal_lr_steps)
        self.trained_steps += reward.size
        # Kept as tensors, read once at the end: per-minibatch reads (and the ratio statistics,
        # computed here over all minibatches at once) each wait for the step's kernels.
        losses: dict[str, list[torch.Tensor]] = {"policy_loss": [], "value_loss": [], "entropy": []}
        log_ratios: list[torch.Tensor] = []
        minibatches = Minibatches(batch, advantages, returns, c.minibatches, self.device)
        if c.decoupled:  # the proximal policy: this update's starting point, for every row at once
            with torch.no_grad():
                inputs, _ = minibatches.whole()
                minibatches.columns["prox_logprob"] = self.policy.analyze(inputs, entropy=False).logprob
        # Without an entropy bonus the entropy is only reported: computing it (and its autograd
        # graph) on every minibatch would cost the learner for nothing, so it then comes from
        # the step's last minibatch alone.
        updates = c.epochs * len(minibatches)
        for epoch in range(c.epochs):
            for i, (inputs, rows_of) in enumerate(minibatches):
                last = epoch * len(minibatches) + i == updates - 1
                out = self.policy.analyze(inputs, entropy=bool(c.entropy_coef) or last)
                logprob, new_value = rows_of(out.logprob), rows_of(out.value)
                entropy = rows_of(out.entropy).mean() if out.entropy is not None else None
                old_logprob, old_value = rows_of(inputs["old_logprob"]), rows_of(inputs["old_value"])
                a, ret = rows_of(inputs["advantages"]), rows_of(inputs["returns"])
                if c.normalize_advantages:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                if c.decoupled:
                    proximal = rows_of(inputs["prox_logprob"])
                    log_ratio = logprob - proximal
                    weight = (proximal - old_logprob).exp().clamp(max=DECOUPLED_WEIGHT_MAX)
                else:
                    log_ratio, weight = logprob - old_logprob, 1.0
                ratio = log_ratio.exp()
                policy_loss = (weight * torch.max(-a * ratio, -a * ratio.clamp(1 - c.clip, 1 + c.clip))).mean()
                if c.value_clip is None:
                    value_loss = 0.5 * (new_value - ret).pow(2).mean()
                else:
                    clipped = old_value + (new_value - old_value).clamp(-c.value_clip, c.value_clip)
                    value_loss = 0.5 * torch.max((new_value - ret).pow(2), (clipped - ret).pow(2)).mean()
                loss = policy_loss + c.value_coef * value_loss
                if c.entropy_coef:
                    loss = loss - c.entropy_coef * entropy

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                clip_grad_norm(self.params, c.max_grad_norm)
                self.optimizer.step()

                for name, value in (("policy_loss", policy_loss), ("value_loss", value_loss)):
                    losses[name].append(value.detach())
                if entropy is not None:
                    losses["entropy"].append(entropy.detach())
                log_ratios.append(log_ratio.detach())
        self.policy.version += 1
        stats = {name: torch.stack(values).mean() for name, values in losses.items()}
        with torch.no_grad():
            # The mean over every trained row (feed-forward minibatches are equal in size, so
            # that is also the mean of the minibatches' means).
            log_ratio = torch.cat(log_ratios)
            stats["approx_kl"] = (log_ratio.exp() - 1 - log_ratio).mean()
            stats["clip_fraction"] = ((log_ratio.exp() - 1).abs() > c.clip).float().mean()
        means = torch.stack(list(stats.values())).tolist()
        return dict(zip(stats, means))

    def targets(self, batch: NamedArray, reward: np.ndarray, value: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advantages and value targets of rows 0..T-1: GAE over the values the actors recorded.

        The one place an off-policy variant changes (APPO: V-trace under the current policy).
        """
        c: PPOConfig = self.config
        return gae(reward, value, terminated, truncated, c.gamma, c.gae_lambda)

    def set_hyperparameters(self, values: dict[str, float]) -> None:
        super().set_hyperparameters(values)
        if self.config.anneal_lr_steps is None:  # else the next step sets it from `lr`
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.lr

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "return_scale": vars(self.return_scale),
                "trained_steps": self.trained_steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        vars(self.return_scale).update(state.get("return_scale", {}))
        self.trained_steps = state.get("trained_steps", 0)


class Minibatches:
    """A batch cut into minibatches, in a fresh random order each time it is iterated (an epoch).

    Each item is (analyze inputs, rows_of): `rows_of(x)` picks a per-row tensor's trained
    rows, in the order `analyze` returns them. Feed-forward: minibatches of single rows,
    alive rows only. Recurrent (the batch carries `keys.RNN_STATE`): minibatches of whole
    columns [T, b], so the policy unrolls each through time from the state its first row
    started from; rows of agents that finished early are masked out afterwards.
    """

    def __init__(self, batch: NamedArray, advantages: np.ndarray, returns: np.ndarray, count: int,
                 device: torch.device | str = "cpu") -> None:
        rows = batch[:-1]
        self.device = device
        tensor = lambda x: torch.as_tensor(np.ascontiguousarray(x), device=device)  # noqa: E731
        T, B = advantages.shape
        alive = rows[keys.ALIVE] if keys.ALIVE in rows else np.ones((T, B), bool)
        per_row = {keys.ACTION: rows[keys.ACTION], "old_logprob": rows[keys.LOGPROB],
                   "old_value": batch[keys.VALUE][:-1].astype(np.float32), "advantages": advantages,
                   "returns": returns}
        self.recurrent = keys.RNN_STATE in batch
        if not self.recurrent:
            keep = alive.reshape(-1)
            flat = lambda x: tensor(np.ascontiguousarray(x).reshape(-1, *x.shape[2:])[keep])  # noqa: E731
            self.obs = {k: flat(v) for k, v in rows[keys.OBS].items_flat()}
            self.columns = {k: flat(v) for k, v in per_row.items()}
            self.units = int(keep.sum())
        else:
            starts = episode_starts(rows[keys.TERMINATED], rows[keys.TRUNCATED])
            self.obs = {k: tensor(v) for k, v in rows[keys.OBS].items_flat()}
            self.columns = {k: tensor(v) for k, v in per_row.items()}
            self.first_state = {k: tensor(v[0]) for k, v in batch[keys.RNN_STATE].items_flat()}
            self.starts, self.alive = tensor(starts), tensor(alive)
            self.units = B
        self.size = max(1, self.units // count)

    def __len__(self) -> int:
        return self.units // self.size

    def whole(self):
        """Every trained row as one minibatch (in order), and its `rows_of`."""
        if not self.recurrent:
            return {keys.OBS: self.obs, **self.columns}, _rows
        return ({keys.OBS: self.obs, **self.columns, keys.RNN_STATE: self.first_state,
                 keys.EPISODE_START: self.starts}, lambda x: x[self.alive])

    def __iter__(self):
        order = torch.randperm(self.units, device=self.device)
        if not self.recurrent:
            # Shuffle every column once per epoch; each minibatch is then a slice (a view), not
            # a gather of its own per column (32 minibatches an epoch for HalfCheetah's config).
            obs = {k: v[order] for k, v in self.obs.items()}
            columns = {k: v[order] for k, v in self.columns.items()}
            for start in range(0, self.units - self.size + 1, self.size):
                rows = slice(start, start + self.size)
                yield {keys.OBS: {k: v[rows] for k, v in obs.items()}, **{k: v[rows] for k, v in columns.items()}}, _rows
            return
        for start in range(0, self.units - self.size + 1, self.size):
            idx = order[start:start + self.size]
            mask = self.alive[:, idx]
            yield ({keys.OBS: {k: v[:, idx] for k, v in self.obs.items()},
                    **{k: v[:, idx] for k, v in self.columns.items()},
                    keys.RNN_STATE: {k: v[idx] for k, v in self.first_state.items()},
                    keys.EPISODE_START: self.starts[:, idx]}, lambda x, mask=mask: x[mask])


def _rows(x: torch.Tensor) -> torch.Tensor:
    """Feed-forward minibatches hold trained rows only: every row `analyze` returns is one."""
    return x
