"""MuZero's learner (Schrittwieser et al. 2020): the model unrolled K steps along stored play.

The policy is `srl.models.muzero.MuZeroPolicy`: actors act by tree search and record, per row,
the root's visit distribution (`SEARCH_POLICY`) and searched value (`keys.VALUE`). From every
row t of a trajectory [T + 1, B] with at least K rows after it, the learner encodes o_t and
unrolls the dynamics along the actions taken, a_t .. a_{t+K-1}; at step k it predicts

    policy  p_k  -> the search's visit distribution at row t + k
    value   v_k  -> z_{t+k} = r_{t+k} + ... + gamma^(n-1) r_{t+k+n-1} + gamma^n v_search(t+k+n)
    reward  u_k  -> r_{t+k-1}                                   (k >= 1)

where an episode that ends first ends the sum (no bootstrap after a terminal step; after a
truncation the last row's searched value stands in). Steps past an episode's end are
absorbing: value and reward targets 0, no policy target. Values and rewards are categorical
(cross-entropy against two-hot targets on the transformed scale). As in the paper, each
unrolled step's loss is scaled by 1 / K and the gradient entering each next hidden state by
1/2, so the unroll's total gradient does not grow with K.

    muzero = MuZero(policy, MuZero.Config(unroll_steps=5, td_steps=10))
    stats = muzero.step(trajectory)         # loss, value, reward and policy losses
"""

from __future__ import annotations

import numpy as np
import pydantic
import torch
from torch.nn import functional as F

from srl.algorithms.common import clip_grad_norm, nstep_targets, training_device
from srl.api.algorithm import Algorithm, AlgorithmConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.actor_critic import obs_tensors
from srl.models.muzero import SEARCH_POLICY, MuZeroPolicy, scalar_to_support


class MuZeroConfig(AlgorithmConfig):
    lr: float = pydantic.Field(1e-3, gt=0)
    weight_decay: float = pydantic.Field(1e-4, ge=0)
    #: K: dynamics steps unrolled from each start row.
    unroll_steps: pydantic.PositiveInt = 5
    #: n: rewards summed before the value target bootstraps from a searched value.
    td_steps: pydantic.PositiveInt = 10
    value_loss_weight: float = pydantic.Field(0.25, gt=0)
    max_grad_norm: float | None = pydantic.Field(5.0, gt=0)
    #: Gradient steps per batch of trajectories, each on `unrolls` start rows drawn from it
    #: (more steps per batch: each env step teaches more, as a replay ratio does).
    updates_per_batch: pydantic.PositiveInt = 8
    unrolls: pydantic.PositiveInt = 256


def _scale_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + x.detach() * (1 - scale)


class MuZero(Algorithm):
    Config = MuZeroConfig
    #: The targets come from stored searches, not from the acting policy's probabilities: a
    #: trajectory a version or two old teaches as well as a fresh one.
    corrects_staleness = True

    def __init__(self, policy: Policy, config: MuZeroConfig) -> None:
        if not isinstance(policy, MuZeroPolicy):
            raise ValueError(f"algorithm muzero learns a muzero policy (policy.type: muzero), not {type(policy).__name__}")
        super().__init__(policy, config)
        self.net = policy.net
        self.device = training_device(list(self.net.parameters()))
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.rng = np.random.default_rng(int(torch.randint(1 << 62, ())))

    def targets(self, batch: NamedArray) -> dict[str, np.ndarray]:
        """Per start row t in 0..T-K and unroll step k in 0..K, [starts, B, K + 1]: the value,
        reward and policy targets and where the policy target counts (see the module docstring)."""
        c: MuZeroConfig = self.config
        policy: MuZeroPolicy = self.policy
        gamma, K = policy.config.discount, c.unroll_steps
        rows = batch[:-1]
        reward, terminated, truncated = (np.asarray(rows[k]).T for k in (keys.REWARD, keys.TERMINATED, keys.TRUNCATED))
        searched = np.asarray(batch[keys.VALUE], np.float64).T  # [B, T + 1]
        ret, discount, boot = nstep_targets(reward, terminated, truncated, c.td_steps, gamma)  # each [B, T]
        B, T = reward.shape
        value = ret + discount * np.take_along_axis(searched, boot.astype(np.int64), 1)
        starts = T - K
        if starts < 1:
            raise ValueError(f"algorithm.args.unroll_steps ({K}) must be below actors.trajectory_length ({T})")
        t = np.arange(starts)[:, None] + np.arange(K + 1)[None]  # [starts, K + 1]: row of step k
        done = (terminated | truncated).astype(np.int64)  # [B, T]
        # Steps past the end: an episode ended at a row in t .. t + k - 1.
        ended_before = np.concatenate([np.zeros((B, 1), np.int64), np.cumsum(done, 1)], 1)  # [B, T + 1]
        past_end = (ended_before[:, t] - ended_before[:, t[:, :1]]) > 0  # [B, starts, K + 1]
        in_rows = t < T
        value_target = np.where(past_end | ~in_rows[None], 0.0, value[:, np.minimum(t, T - 1)])
        # Step k >= 1's reward is row t + k - 1's: it counts unless the episode ended before that row.
        reward_target = np.zeros_like(value_target)
        reward_target[..., 1:] = np.where(past_end[..., :-1], 0.0, reward[:, t[:, 1:] - 1])
        search_policy = np.asarray(batch[SEARCH_POLICY], np.float32).transpose(1, 0, 2)  # [B, T + 1, A]
        return {"value": value_target.transpose(1, 0, 2), "reward": reward_target.transpose(1, 0, 2),
                "policy": search_policy[:, t].transpose(1, 0, 2, 3), "policy_mask": (~past_end).transpose(1, 0, 2)}

    def step(self, batch: NamedArray) -> dict[str, float]:
        c: MuZeroConfig = self.config
        K, support = c.unroll_steps, self.net.support
        targets = self.targets(batch)
        starts, B = targets["value"].shape[:2]
        T = batch[keys.REWARD].shape[0] - 1
        alive = np.asarray(batch[keys.ALIVE][:starts]) if keys.ALIVE in batch else np.ones((starts, B), bool)
        # Every (start row, column) pair is an unroll; rows of agents that finished early are not.
        pairs = np.argwhere(alive)
        tensor = lambda x: torch.as_tensor(np.ascontiguousarray(x), device=self.device)  # noqa: E731
        obs, _ = obs_tensors(batch[keys.OBS][:T], 2, self.device)  # [T * B, ...]
        actions = tensor(np.asarray(batch[keys.ACTION][:T]).reshape(T, B))
        stats: dict[str, list[float]] = {"loss": [], "value_loss": [], "reward_loss": [], "policy_loss": []}
        for _ in range(c.updates_per_batch):
            chosen = pairs[self.rng.choice(len(pairs), min(c.unrolls, len(pairs)), replace=False)]
            s_idx, b_idx = chosen[:, 0], chosen[:, 1]
            first = {k: v[tensor(s_idx * B + b_idx)] for k, v in obs.items()}
            state, policy_logits, value_logits = self.net.initial(first)
            value_loss = reward_loss = policy_loss = 0.0
            for k in range(K + 1):
                if k > 0:
                    action = actions[tensor(s_idx + k - 1), tensor(b_idx)]
                    state, reward_logits = self.net.step(_scale_gradient(state, 0.5), action)
                    policy_logits, value_logits = self.net.prediction(state)
                    reward_target = scalar_to_support(tensor(targets["reward"][s_idx, b_idx, k]).float(), support)
                    step_reward = -(reward_target * F.log_softmax(reward_logits, -1)).sum(-1)
                scale = 1.0 if k == 0 else 1.0 / K
                value_target = scalar_to_support(tensor(targets["value"][s_idx, b_idx, k]).float(), support)
                step_value = -(value_target * F.log_softmax(value_logits, -1)).sum(-1)
                mask = tensor(targets["policy_mask"][s_idx, b_idx, k]).float()
                policy_target = tensor(targets["policy"][s_idx, b_idx, k])
                step_policy = -(policy_target * F.log_softmax(policy_logits, -1)).sum(-1) * mask
                value_loss = value_loss + scale * step_value.mean()
                policy_loss = policy_loss + scale * step_policy.mean()
                if k > 0:
                    reward_loss = reward_loss + scale * step_reward.mean()
            loss = c.value_loss_weight * value_loss + reward_loss + policy_loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if c.max_grad_norm is not None:
                clip_grad_norm(list(self.net.parameters()), c.max_grad_norm)
            self.optimizer.step()
            for name, x in (("loss", loss), ("value_loss", value_loss), ("reward_loss", reward_loss),
                            ("policy_loss", policy_loss)):
                stats[name].append(float(x.detach()) if torch.is_tensor(x) else float(x))
        self.policy.version += 1
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
