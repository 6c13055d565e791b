"""R2D2: DQN on replayed sequences with a recurrent Q-network (Kapturowski et al. 2019).

The buffer stores whole trajectory segments, rows 0..T of one env, with the recurrent state
the actor's policy had at row 0 (`replay_graph(config, "sequence")`). That stored state was
produced by older weights, so it is stale for the network being trained; R2D2's answer, and
this one's, is a burn-in: the first `burn_in` rows are unrolled without gradient by the
online and the target net only to warm their states, and the loss is taken on the rest.

    state_0 = stored;  (online and target) unroll rows 0..b-1 under no_grad -> state_b
    Q, Q'   = online / target unroll of rows b..T from state_b (Q with gradients)
    y_t     = R_t^(n) + discount_t * Q'(s_boot, argmax_a Q(s_boot, a))      t = b..T-1
    loss    = mean_seq w * (sum_t alive_t * huber(Q(s_t, a_t) - y_t) / sum_t alive_t)

n-step returns, discounts and bootstrap rows come from the buffer's own `nstep_targets`, so
truncations are handled as for transitions, and every bootstrap row (row T included, which
starts the next trajectory) lies inside the sequence. A sequence's new priority is
eta * max|td| + (1 - eta) * mean|td| over its live learned rows (the paper's eta 0.9): a mean
alone would dilute one surprising step among many ordinary ones.

Optimiser, target refreshes, the double estimator, the loss choice and the priority plumbing
are DQN's. No value rescaling h(x).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic
import torch

from srl.algorithms.common import episode_starts, nstep_targets
from srl.algorithms.dqn import DQN, DQNConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray


class R2D2Config(DQNConfig):
    #: Rows at the start of each sequence unrolled without gradient, only to warm the state.
    burn_in: pydantic.NonNegativeInt = 4
    #: Sequence priority: eta * max|td| + (1 - eta) * mean|td|.
    priority_eta: float = pydantic.Field(0.9, ge=0, le=1)


class R2D2(DQN):
    Config = R2D2Config
    unit = "sequence"

    def __init__(self, policy: Policy, config: R2D2Config) -> None:
        if not callable(getattr(policy, "unroll", None)):
            raise TypeError(f"R2D2 continues an unroll from the burn-in's state: policy.type must have "
                            f"`unroll` (q_network), not {type(policy).__name__}")
        super().__init__(policy, config)

    def update(self, rows: NamedArray) -> tuple[float, np.ndarray, float]:
        """One gradient step on sequences [T + 1, batch, G]; returns (loss, priority per sequence, mean Q)."""
        c: R2D2Config = self.config
        T1, B, G = rows[keys.REWARD].shape[:3]
        T, b = T1 - 1, c.burn_in
        if b >= T:
            raise ValueError(f"r2d2: burn_in {b} leaves no rows to learn from in sequences of {T} steps "
                             f"(raise actors.trajectory_length)")
        tensor = lambda x: torch.as_tensor(np.ascontiguousarray(x), device=self.device)
        # [T + 1, B, G, ...] -> [T + 1, N = B * G, ...]: an env's agents are just more columns.
        seq = NamedArray({k: rows[k] for k in (keys.OBS, keys.ACTION, keys.REWARD, keys.TERMINATED,
                                               keys.TRUNCATED, keys.ALIVE)}).map(
            lambda x: x.reshape(T1, B * G, *x.shape[3:]))
        done = seq[keys.TERMINATED], seq[keys.TRUNCATED]
        starts = episode_starts(*done)  # row 0: False, the stored state is already row 0's
        state = (rows[keys.RNN_STATE].map(lambda x: tensor(x.reshape(B * G, *x.shape[2:])))
                 if keys.RNN_STATE in rows else None)

        def unroll(net: Any, lo: int, hi: int, start: Any) -> tuple[torch.Tensor, Any]:
            return net.unroll({keys.OBS: seq[keys.OBS].map(lambda x: x[lo:hi]), keys.RNN_STATE: start,
                               keys.EPISODE_START: starts[lo:hi]})

        with torch.no_grad():
            online_state = target_state = state
            if b:  # burn-in: the states only, from the stored one
                online_state = unroll(self.q, 0, b, state)[1]
                target_state = unroll(self.target, 0, b, state)[1]
            target_q = unroll(self.target, b, T1, target_state)[0]  # [T + 1 - b, N, A]
        q = unroll(self.q, b, T1, online_state)[0]

        # n-step targets inside the sequence; the buffer's function takes [S, T] (sequence-major).
        ret, discount, boot = (np.ascontiguousarray(x.T[b:]) for x in nstep_targets(
            seq[keys.REWARD][:T].T, done[0][:T].T, done[1][:T].T, c.n_step, c.gamma))
        chosen = (q.detach() if c.double else target_q).argmax(-1, keepdim=True)
        next_value = target_q.gather(-1, chosen).squeeze(-1).gather(0, tensor(boot.astype(np.int64) - b))
        action = tensor(seq[keys.ACTION][b:T]).long()
        taken = q[:-1].gather(-1, action[..., None]).squeeze(-1)  # [T - b, N]; row T is only bootstrapped from
        prediction, target = self.values(taken, {keys.NSTEP_RETURN: ret, keys.DISCOUNT: discount}, next_value)

        alive = tensor(seq[keys.ALIVE][b:T]).float()
        per_seq = lambda x: x.reshape(T - b, B, G).sum((0, 2))
        live = per_seq(alive).clamp(min=1)
        loss = (tensor(rows[keys.REPLAY_WEIGHT]) * per_seq(self.elementwise_loss(prediction, target) * alive) / live)
        loss = loss.mean()
        self.optimize(loss)
        td = ((prediction - target).detach().abs() * alive).reshape(T - b, B, G)
        priority = c.priority_eta * td.amax((0, 2)) + (1 - c.priority_eta) * td.sum((0, 2)) / live
        return float(loss.detach()), priority.cpu().numpy(), float(taken.detach().mean())
