"""MuZero's learner (Schrittwieser et al. 2020): the model unrolled K steps along replayed play.

The policy is a `srl.api.policy.ModelPolicy` (`srl.models.muzero.MuZeroPolicy`): actors act
by tree search and record, per row, the root's visit distribution (`keys.SEARCH_POLICY`) and
searched value (`keys.VALUE`). MuZero trains in the replay graph: buffers keep whole
segments of play with those two fields (`replay_graph(config, "sequence", also_store=...)`)
and send batches of them by priority.

From every live row t of a segment [T + 1] with K rows after it, the learner encodes o_t and
unrolls the dynamics along the actions taken, a_t .. a_{t+K-1}; at step k it predicts

    policy  p_k  -> the search's policy at row t + k (visit counts, or Gumbel's improved policy)
    value   v_k  -> z_{t+k} = r_{t+k} + ... + gamma^(n-1) r_{t+k+n-1} + gamma^n v(t+k+n)
    reward  u_k  -> r_{t+k-1}                                   (k >= 1)

where v is the value the model being trained predicts at that row (`bootstrap_from: model`)
or the one the search found there when the row was played or last reanalysed (`search`). An
episode that ends first ends the sum (no bootstrap after a terminal step; after a truncation
the last row's value stands in), and so does the segment (its row T's value is the
bootstrap). Steps past a terminal step are absorbing: value and reward targets 0, no policy
target; past a truncation, no target at all. Values and rewards are categorical
(cross-entropy against two-hot targets on the transformed scale). As in the paper, each
unrolled step's loss is scaled by 1 / K and the gradient entering each next hidden state by
1/2, so the unroll's total gradient does not grow with K. The consistency loss (EfficientZero)
draws the state the dynamics reach at step k towards the representation of row t + k's
observation. A segment's new priority is the mean |v_0 - z| of its rows; importance weights
scale each segment's losses.

Two players (a turn-based game, `ModelPolicy.two_player`): a segment holds both players' rows
at every step; the learner keeps the mover's (`movers`), and gamma above becomes -gamma, as
each value is its mover's.

    muzero = MuZero(policy, MuZero.Config(unroll_steps=5, td_steps=10))
    stats = muzero.step(batch)              # replayed segments [updates, T + 1, batch, agents]
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pydantic
import torch
from torch.nn import functional as F

from srl.algorithms.common import clip_grad_norm, nstep_targets, training_device
from srl.api.algorithm import Algorithm, AlgorithmConfig
from srl.api.config import ExperimentConfig
from srl.api.graph import Graph
from srl.api.policy import ModelPolicy, Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.graphs.replay import replay_graph


class MuZeroConfig(AlgorithmConfig):
    lr: float = pydantic.Field(1e-3, gt=0)
    weight_decay: float = pydantic.Field(1e-4, ge=0)
    #: K: dynamics steps unrolled from each start row.
    unroll_steps: pydantic.PositiveInt = 5
    #: n: rewards summed before the value target bootstraps from a searched value.
    td_steps: pydantic.PositiveInt = 10
    value_loss_weight: float = pydantic.Field(0.25, gt=0)
    #: EfficientZero's temporal consistency (Ye et al. 2021): the state the dynamics reach after
    #: k steps is drawn towards the representation of the observation actually seen there
    #: (negative cosine similarity, no gradient into the target). The observation depends on
    #: the action taken far more than a value does, so the dynamics learn what actions do
    #: sooner. 0 turns it off.
    consistency_weight: float = pydantic.Field(1.0, ge=0)
    max_grad_norm: float | None = pydantic.Field(5.0, gt=0)
    #: What the value targets bootstrap from after their n rewards: the value the actors' (or
    #: reanalyse's) search found there (`search`), or the value the model being trained now
    #: predicts there (`model`, as MuZero's own target network does: never staler than one update).
    bootstrap_from: Literal["search", "model"] = "model"
    #: Reanalyse (Schrittwieser et al. 2021): stored sequences searched again with the newest
    #: parameters, per sequence trained on; their fresh searched values and policies replace
    #: the stored targets. A reanalyse worker per buffer does it; 0: none.
    reanalyse_fraction: float = pydantic.Field(0.0, ge=0)


def movers(rows: NamedArray) -> NamedArray:
    """A turn-based game's play [T + 1, B, G, ...], where every agent has a row at every step
    and one waiting for its turn has one legal action (`srl.envs.turn_based`), as the mover's
    rows alone, [T + 1, B, 1, ...]: the game as its players' alternating moves. A row whose
    agents each have one legal action (a mover with one move left) goes to the agent after the
    previous row's mover, or before the next row's, within the episode."""
    mask = np.asarray(rows[keys.OBS][keys.ACTION_MASK])  # [T + 1, B, G, A]
    T1, B, G = mask.shape[:3]
    choosing = mask.sum(-1) > 1  # [T + 1, B, G]: surely the mover
    mover = np.where(choosing.any(-1), choosing.argmax(-1), -1)  # [T + 1, B]
    ended = (np.asarray(rows[keys.TERMINATED]) | np.asarray(rows[keys.TRUNCATED])).any(-1)  # [T + 1, B]
    for t in range(1, T1):  # forwards: the next player after a known mover
        after = (mover[t] < 0) & (mover[t - 1] >= 0) & ~ended[t - 1]
        mover[t] = np.where(after, (mover[t - 1] + 1) % G, mover[t])
    for t in range(T1 - 2, -1, -1):  # backwards, for a segment's first rows
        before = (mover[t] < 0) & (mover[t + 1] >= 0) & ~ended[t]
        mover[t] = np.where(before, (mover[t + 1] - 1) % G, mover[t])
    mover = np.maximum(mover, 0)
    t, b = np.meshgrid(np.arange(T1), np.arange(B), indexing="ij")
    return rows.map(lambda x: x[t, b, mover][:, :, None])


def _scale_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + x.detach() * (1 - scale)


class MuZero(Algorithm):
    Config = MuZeroConfig
    #: The targets come from stored searches, not from the acting policy's probabilities:
    #: replayed play teaches whatever version acted it.
    corrects_staleness = True
    #: What the buffers keep besides the play itself: the search's outputs, the targets.
    searched: ClassVar[tuple[str, ...]] = (keys.VALUE, keys.SEARCH_POLICY)

    @classmethod
    def graph(cls, config: ExperimentConfig) -> Graph:
        fraction = cls.Config(**config.algorithm.args).reanalyse_fraction
        # `joint`: a segment holds all of an env's agents, so a turn-based game's movers line up.
        return replay_graph(config, "sequence", joint=True, also_store=cls.searched, reanalyse_fraction=fraction)

    def __init__(self, policy: Policy, config: MuZeroConfig) -> None:
        if not isinstance(policy, ModelPolicy):
            raise ValueError(f"algorithm muzero learns a model policy that it searches (policy.type: muzero), "
                             f"not {type(policy).__name__}")
        super().__init__(policy, config)
        self.model: ModelPolicy = policy
        self.params = list(policy.parameters())
        self.device = training_device(self.params)
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr, weight_decay=config.weight_decay)
        self.updates = 0
        self._priorities: np.ndarray | None = None

    def targets(self, batch: NamedArray) -> dict[str, np.ndarray]:
        """Of segments [T + 1, B]: per start row t in 0..T-K-1 and unroll step k in 0..K,
        [starts, B, K + 1], the value, reward and policy targets, where the policy target counts
        and where the value and reward targets do (see the module docstring)."""
        c: MuZeroConfig = self.config
        K = c.unroll_steps
        # Two players: each row's value is its mover's, and the next row's mover is the other player.
        gamma = -self.model.discount if self.model.two_player else self.model.discount
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
        # Past a truncation nothing is known (the episode went on unseen): no value or reward target.
        cut_before = np.concatenate([np.zeros((B, 1), np.int64), np.cumsum(truncated, 1)], 1)
        known = (cut_before[:, t] - cut_before[:, t[:, :1]]) == 0
        value_target = np.where(past_end, 0.0, value[:, t])  # t + K < T: every step's row is in the segment
        # Step k >= 1's reward is row t + k - 1's: it counts unless the episode ended before that row.
        reward_target = np.zeros_like(value_target)
        reward_target[..., 1:] = np.where(past_end[..., :-1], 0.0, reward[:, t[:, 1:] - 1])
        search_policy = np.asarray(batch[keys.SEARCH_POLICY], np.float32).transpose(1, 0, 2)  # [B, T + 1, A]
        return {"value": value_target.transpose(1, 0, 2), "reward": reward_target.transpose(1, 0, 2),
                "policy": search_policy[:, t].transpose(1, 0, 2, 3), "policy_mask": (~past_end).transpose(1, 0, 2),
                "known": known.transpose(1, 0, 2)}

    def step(self, batch: NamedArray) -> dict[str, float]:
        """One gradient step per leading index of a replay batch [updates, T + 1, batch, agents, ...]."""
        stats: dict[str, list[float]] = {}
        priorities = []
        for update in range(batch[keys.REPLAY_WEIGHT].shape[0]):
            losses, priority = self.update(batch[update])
            priorities.append(priority)
            for name, value in losses.items():
                stats.setdefault(name, []).append(value)
        self._priorities = np.stack(priorities)
        self.policy.version += 1
        return {**{k: float(np.mean(v)) for k, v in stats.items()}, "updates": float(self.updates)}

    def update(self, rows: NamedArray) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step on segments [T + 1, batch, agents, ...]: an unroll from every live
        row with K rows after it. Returns the losses and each segment's new priority."""
        c: MuZeroConfig = self.config
        K, model = c.unroll_steps, self.model
        played = NamedArray({k: rows[k] for k in (keys.OBS, keys.ACTION, keys.REWARD, keys.TERMINATED,
                                                  keys.TRUNCATED, keys.ALIVE, *self.searched)})
        if model.two_player:
            played = movers(played)
        T1, B, G = played[keys.REWARD].shape[:3]
        N = B * G
        # An env's agents are more columns: [T + 1, B, G, ...] -> [T + 1, B * G, ...].
        columns = played.map(lambda x: x.reshape(T1, N, *x.shape[3:]))
        # Every row's representation without gradient, computed once: the consistency loss draws
        # unrolled states towards it, and the model's bootstrap values are predicted from it.
        seen = None
        if c.bootstrap_from == "model" or c.consistency_weight:
            with torch.no_grad():
                seen = model.represent(columns[keys.OBS].map(lambda x: x.reshape(T1 * N, *x.shape[2:])))
                if c.bootstrap_from == "model":
                    columns[keys.VALUE] = model.from_support(model.predict(seen)[1]).cpu().numpy().reshape(T1, N)
                seen = seen.reshape(T1, N, -1)
        targets = self.targets(columns)
        starts = targets["value"].shape[0]
        s_idx, n_idx = np.nonzero(np.asarray(columns[keys.ALIVE][:starts]))
        tensor = lambda x: torch.as_tensor(np.ascontiguousarray(x), device=self.device)  # noqa: E731
        weight = tensor(np.repeat(np.asarray(rows[keys.REPLAY_WEIGHT], np.float32), G)[n_idx])
        actions = tensor(np.asarray(columns[keys.ACTION]).reshape(T1, N))
        state = model.represent(columns[keys.OBS].map(lambda x: x[s_idx, n_idx]))
        policy_logits, value_logits = model.predict(state)
        first_value = model.from_support(value_logits.detach()).cpu().numpy()
        value_loss = reward_loss = policy_loss = consistency_loss = 0.0
        for k in range(K + 1):
            scale = 1.0 if k == 0 else 1.0 / K
            known = tensor(targets["known"][s_idx, n_idx, k]).float()
            mask = tensor(targets["policy_mask"][s_idx, n_idx, k]).float()
            if k > 0:
                action = actions[tensor(s_idx + k - 1), tensor(n_idx)]
                state, reward_logits = model.transition(_scale_gradient(state, 0.5), action)
                policy_logits, value_logits = model.predict(state)
                reward_target = model.to_support(tensor(targets["reward"][s_idx, n_idx, k]).float())
                step_reward = -(reward_target * F.log_softmax(reward_logits, -1)).sum(-1) * known
                reward_loss = reward_loss + scale * (weight * step_reward).mean()
                if c.consistency_weight:
                    similarity = F.cosine_similarity(state, seen[tensor(s_idx + k), tensor(n_idx)], dim=-1) * mask
                    consistency_loss = consistency_loss - scale * (weight * similarity).mean()
            value_target = model.to_support(tensor(targets["value"][s_idx, n_idx, k]).float())
            step_value = -(value_target * F.log_softmax(value_logits, -1)).sum(-1) * known
            policy_target = tensor(targets["policy"][s_idx, n_idx, k])
            step_policy = -(policy_target * F.log_softmax(policy_logits, -1)).sum(-1) * mask
            value_loss = value_loss + scale * (weight * step_value).mean()
            policy_loss = policy_loss + scale * (weight * step_policy).mean()
        loss = c.value_loss_weight * value_loss + reward_loss + policy_loss + c.consistency_weight * consistency_loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm is not None:
            clip_grad_norm(self.params, c.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        # A segment's priority: the mean |v_0 - z| of its unrolls' first steps.
        error = np.abs(first_value - targets["value"][s_idx, n_idx, 0])
        segment = n_idx // G
        count = np.bincount(segment, minlength=B)
        priority = np.bincount(segment, error, minlength=B) / np.maximum(count, 1)
        losses = {"loss": loss, "value_loss": value_loss, "reward_loss": reward_loss, "policy_loss": policy_loss,
                  "consistency_loss": consistency_loss}
        return {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in losses.items()}, priority

    def priorities(self) -> np.ndarray | None:
        return self._priorities

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
