"""DQN from replay: double Q-learning, n-step returns, prioritized replay, a target network.

Mnih et al. 2015, with van Hasselt et al.'s double estimator, Hessel et al.'s n-step
returns and Schaul et al.'s prioritized replay; the dueling heads are the policy's
(`q_network`, `dueling: true`). The replay buffer computes each transition's n-step
return and discount when it stores it, so one update reads, per row:

    y = R_t^(n) + discount * Q_target(s_{t+n}, argmax_a Q(s_{t+n}, a))       (double)
    loss = mean_i w_i * huber(Q(s_t, a_t) - y_i)                               (w: importance weights)

and the new priority of each row is |Q(s_t, a_t) - y|. A message from the buffer holds
`replay.updates_per_batch` updates; the policy's version counts messages, so actors get
new weights once per message. Rows are [batch, agents] (agents: 1 unless the buffer keeps
an env's agents together, as VDN and QMIX, subclasses of this, need).
"""

from __future__ import annotations

import copy
from typing import ClassVar, Literal

import numpy as np
import pydantic
import torch
from torch.nn import functional as F

from srl.algorithms.common import clip_grad_norm, training_device
from srl.api.algorithm import Algorithm, AlgorithmConfig
from srl.api.config import ExperimentConfig
from srl.api.graph import Graph
from srl.api.policy import Policy, ValuePolicy
from srl.data import keys
from srl.data.named_array import NamedArray, stack
from srl.graphs.replay import replay_graph


class DQNConfig(AlgorithmConfig):
    lr: float = pydantic.Field(1e-3, gt=0)
    gamma: float = pydantic.Field(0.99, ge=0, le=1)
    #: Rewards summed before bootstrapping (the buffer computes the returns).
    n_step: pydantic.PositiveInt = 3
    #: Pick the next action with the online network, value it with the target network.
    double: bool = True
    #: Updates between target-network refreshes.
    target_update_interval: pydantic.PositiveInt = 500
    #: Each refresh moves the target this far to the online weights (1: a copy).
    tau: float = pydantic.Field(1.0, gt=0, le=1)
    loss: Literal["huber", "mse"] = "huber"
    max_grad_norm: float | None = pydantic.Field(10.0, gt=0)
    adam_eps: float = pydantic.Field(1.5e-4, gt=0)


class DQN(Algorithm):
    Config = DQNConfig
    #: Replay is off-policy by design: the staleness of what it learns from is not a reason to drop it.
    corrects_staleness = True

    @classmethod
    def graph(cls, config: ExperimentConfig) -> Graph:
        args = cls.Config(**config.algorithm.args)
        return replay_graph(config, cls.unit, n_step=args.n_step, gamma=args.gamma, joint=cls.joint)

    #: What the buffers store and sample: transitions (R2D2: whole sequences).
    unit: ClassVar[Literal["transition", "sequence"]] = "transition"
    #: Whether the buffer keeps an env's agents together (VDN, QMIX).
    joint = False

    def __init__(self, policy: Policy, config: DQNConfig) -> None:
        if not isinstance(policy, ValuePolicy):
            raise TypeError(f"{type(self).__name__} learns action values: policy.type must be a ValuePolicy "
                            f"(q_network), not {type(policy).__name__}")
        super().__init__(policy, config)
        self.q: ValuePolicy = policy
        self.target = copy.deepcopy(policy)
        self.online_params = list(policy.parameters())
        self.target_params = list(self.target.parameters())
        for p in self.target_params:
            p.requires_grad_(False)
        self.device = training_device(self.online_params)
        # Fused: one kernel for the whole update instead of several per parameter tensor.
        self.optimizer = torch.optim.Adam(self.learned_parameters(), lr=config.lr, eps=config.adam_eps, fused=True)
        self.updates = 0
        self._priorities: np.ndarray | None = None

    def learned_parameters(self) -> list[torch.Tensor]:
        """What the optimiser updates (a mixer adds its own)."""
        return self.online_params

    def step(self, batch: NamedArray) -> dict[str, float]:
        losses, priorities, q_means = [], [], []
        for update in range(batch[keys.REPLAY_WEIGHT].shape[0]):
            loss, td, q_mean = self.update(batch[update])
            losses.append(loss)
            priorities.append(td)
            q_means.append(q_mean)
        self._priorities = np.stack(priorities)
        self.policy.version += 1
        return {"loss": float(np.mean(losses)), "q": float(np.mean(q_means)),
                "td_abs": float(self._priorities.mean()), "updates": float(self.updates)}

    def update(self, rows: NamedArray) -> tuple[float, np.ndarray, float]:
        """One gradient step on rows [batch, agents]; returns (loss, |TD error| per unit, mean Q)."""
        c: DQNConfig = self.config
        tensor = lambda x: torch.as_tensor(x, device=self.device)  # noqa: E731
        action = tensor(rows[keys.ACTION]).long()
        alive = tensor(rows[keys.ALIVE]).float()
        next_obs = {keys.OBS: rows[keys.NEXT_OBS]}
        if c.double:
            # One forward pass of the online net over both observations: at these batch sizes
            # each pass costs mostly per-call overhead, and the next rows' share is detached.
            both = self.q.q_values({keys.OBS: stack([rows[keys.OBS], rows[keys.NEXT_OBS]])})
            q_all, online_next = both[0], both[1].detach()
        else:
            q_all = self.q.q_values({keys.OBS: rows[keys.OBS]})
        q = q_all.gather(-1, action[..., None]).squeeze(-1)
        with torch.no_grad():
            next_q = self.target.q_values(next_obs)
            chosen = (online_next if c.double else next_q).argmax(-1, keepdim=True)
            next_value = next_q.gather(-1, chosen).squeeze(-1)
        prediction, target = self.values(q, rows, next_value)
        td = prediction - target
        per_unit = self.elementwise_loss(prediction, target)
        weight = tensor(rows[keys.REPLAY_WEIGHT])
        if per_unit.dim() > 1:  # independent agents: mean over the live ones of each unit
            live = alive.sum(-1).clamp(min=1)
            per_unit = (per_unit * alive).sum(-1) / live
            td = (td.abs() * alive).sum(-1) / live
        loss = (weight * per_unit).mean()
        self.optimize(loss)
        return float(loss.detach()), td.detach().abs().cpu().numpy(), float(q.detach().mean())

    def elementwise_loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The configured loss per element (shared with the recurrent subclass)."""
        if self.config.loss == "huber":
            return F.huber_loss(prediction, target, reduction="none")
        return (prediction - target).pow(2)

    def optimize(self, loss: torch.Tensor) -> None:
        """One optimiser step on `loss`, counting updates and refreshing the target on schedule."""
        c: DQNConfig = self.config
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm is not None:
            clip_grad_norm(self.learned_parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % c.target_update_interval == 0:
            self.refresh_target()

    def values(self, q: torch.Tensor, rows: NamedArray, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(prediction, target) per agent row [batch, agents]: Q(s, a) and its n-step target."""
        ret = torch.as_tensor(rows[keys.NSTEP_RETURN], device=self.device)
        discount = torch.as_tensor(rows[keys.DISCOUNT], device=self.device)
        return q, ret + discount * next_value

    @torch.no_grad()
    def refresh_target(self) -> None:
        tau = self.config.tau
        if tau >= 1.0:
            torch._foreach_copy_(self.target_params, self.online_params)
        else:
            torch._foreach_lerp_(self.target_params, self.online_params, tau)

    def priorities(self) -> np.ndarray | None:
        return self._priorities

    def set_hyperparameters(self, values: dict[str, float]) -> None:
        super().set_hyperparameters(values)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates,
                "target": [p.detach().cpu().numpy() for p in self.target_params]}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        with torch.no_grad():
            for p, saved in zip(self.target_params, state["target"]):
                p.copy_(torch.as_tensor(np.asarray(saved), device=p.device))
