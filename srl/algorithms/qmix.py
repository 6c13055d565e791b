"""VDN and QMIX: one team value from the agents' own action values, learned from joint steps.

Both are DQN (its update, double n-step targets, target network, prioritized replay) with
the buffer keeping each env's G agents together (`joint = True`), so a sampled row is one
joint step [batch, G]. The per-agent values of the taken actions Q_i [B, G] and of the
double-Q next actions (argmax by the online net, value by the target net, per agent)
are mixed into one team value per row, and the TD error is taken on that:

    Q_tot = mix(Q_1..Q_G, s)        y = mean_i R_i^(n) + discount_0 * mix_target(Q'_1..Q'_G, s')

VDN (Sunehag et al. 2018) mixes by summing. QMIX (Rashid et al. 2018) mixes monotonically
(dQ_tot/dQ_i >= 0, so each agent's greedy action is the team's): a two-layer network whose
weights are |hypernetwork(state)| and whose biases (and a final V(state)) are free functions
of the global state, which only the learner sees. The team reward is the mean of the agents'
n-step returns (the scale envs report as the episode return); all agents of an env end
together, so agent 0's discount stands for the team's.

The mixer is the algorithm's, not the policy's: actors act per agent and never need it. It
is optimised with the policy's parameters, has a target copy refreshed with the target
network, and both are saved in the algorithm's state_dict. (Data-parallel trainers average
only the policy's gradients: train these with one trainer.)
"""

from __future__ import annotations

import copy

import numpy as np
import pydantic
import torch
from torch import nn
from torch.nn import functional as F

from srl.algorithms.dqn import DQN, DQNConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray


class VDN(DQN):
    """Q_tot = sum_i Q_i."""

    joint = True

    def values(self, q: torch.Tensor, rows: NamedArray, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q_tot [B], its n-step target [B]) from per-agent values [B, G]."""
        alive = torch.as_tensor(rows[keys.ALIVE], device=self.device).float()
        ret = torch.as_tensor(rows[keys.NSTEP_RETURN], device=self.device).float().mean(-1)
        discount = torch.as_tensor(rows[keys.DISCOUNT], device=self.device)[:, 0]
        # An agent not acting in this step adds nothing to the team's value.
        q, next_value = q * alive, next_value * alive
        return self.mix(q, rows[keys.OBS]), ret + discount * self.mix_target(next_value, rows[keys.NEXT_OBS])

    def mix(self, q: torch.Tensor, obs: NamedArray) -> torch.Tensor:
        """The team value [B] of per-agent values [B, G] in the joint observation `obs`."""
        return q.sum(-1)

    def mix_target(self, q: torch.Tensor, obs: NamedArray) -> torch.Tensor:
        """As `mix`, with the target mixer (bootstrap values)."""
        return q.sum(-1)


class QMIXConfig(DQNConfig):
    #: The observation field holding the global state (the same for every agent of an env).
    state_field: str = "state"
    #: Width of the mixing network's hidden layer.
    embed_dim: pydantic.PositiveInt = 32
    #: Width of the hypernetworks' hidden layer that produce the mixing weights (0: one linear layer).
    hypernet_hidden: pydantic.NonNegativeInt = 64


class Mixer(nn.Module):
    """QMIX's monotonic mixing network: Q_tot = elu(Q W1 + b1) w2 + V(s), W1, w2 = |hyper(s)|."""

    def __init__(self, agents: int, state_dim: int, embed: int, hyper_hidden: int) -> None:
        super().__init__()
        self.agents, self.state_dim, self.embed = agents, state_dim, embed

        def hyper(out: int) -> nn.Module:
            if not hyper_hidden:
                return nn.Linear(state_dim, out)
            return nn.Sequential(nn.Linear(state_dim, hyper_hidden), nn.ReLU(), nn.Linear(hyper_hidden, out))

        self.hyper_w1, self.hyper_w2 = hyper(agents * embed), hyper(embed)
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.value = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """q [B, G], state [B, state_dim] -> Q_tot [B]."""
        w1 = self.hyper_w1(state).abs().view(-1, self.agents, self.embed)
        hidden = F.elu(torch.bmm(q.unsqueeze(1), w1).squeeze(1) + self.hyper_b1(state))
        w2 = self.hyper_w2(state).abs()
        return (hidden * w2).sum(-1) + self.value(state).squeeze(-1)


class QMIX(VDN):
    """Q_tot = Mixer(Q_1..Q_G, state), monotonic in every Q_i."""

    Config = QMIXConfig

    def __init__(self, policy: Policy, config: QMIXConfig) -> None:
        space = getattr(policy, "observation_space", None)
        if space is not None and config.state_field not in space.spaces:
            raise ValueError(f"QMIX mixes on the global state: algorithm.args.state_field {config.state_field!r} "
                             f"is not an observation field (fields: {list(space.spaces)})")
        #: Built at the first batch (or a checkpoint's load): G and the state's size are the env's,
        #: which the algorithm learns from its data, not from the policy.
        self.mixer: Mixer | None = None
        self.target_mixer: Mixer | None = None
        super().__init__(policy, config)

    def build_mixer(self, agents: int, state_dim: int) -> None:
        """Make the mixer and its target copy, and give the mixer to the optimiser."""
        c: QMIXConfig = self.config
        self.mixer = Mixer(agents, state_dim, c.embed_dim, c.hypernet_hidden).to(self.device)
        self.target_mixer = copy.deepcopy(self.mixer).requires_grad_(False)
        self.optimizer.add_param_group({"params": list(self.mixer.parameters())})

    def state(self, obs: NamedArray) -> torch.Tensor:
        """The global state [B, state_dim]: agent 0's copy (every agent of an env holds the same)."""
        state = torch.as_tensor(obs[self.config.state_field][:, 0], device=self.device).float()
        return state.reshape(len(state), -1)

    def mix(self, q: torch.Tensor, obs: NamedArray) -> torch.Tensor:
        state = self.state(obs)
        if self.mixer is None:
            self.build_mixer(q.shape[-1], state.shape[-1])
        return self.mixer(q, state)

    def mix_target(self, q: torch.Tensor, obs: NamedArray) -> torch.Tensor:
        return self.target_mixer(q, self.state(obs))

    def learned_parameters(self) -> list[torch.Tensor]:
        mixer = list(self.mixer.parameters()) if self.mixer is not None else []
        return super().learned_parameters() + mixer

    @torch.no_grad()
    def refresh_target(self) -> None:
        super().refresh_target()
        if self.mixer is None:
            return
        online, target = list(self.mixer.parameters()), list(self.target_mixer.parameters())
        if self.config.tau >= 1.0:
            torch._foreach_copy_(target, online)
        else:
            torch._foreach_lerp_(target, online, self.config.tau)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.mixer is not None:
            numpy = lambda m: {k: v.detach().cpu().numpy() for k, v in m.state_dict().items()}
            state.update(agents=self.mixer.agents, state_dim=self.mixer.state_dim,
                         mixer=numpy(self.mixer), target_mixer=numpy(self.target_mixer))
        return state

    def load_state_dict(self, state: dict) -> None:
        if "mixer" in state:
            if self.mixer is None:  # before the first batch: build it so the optimiser's groups match
                self.build_mixer(int(state["agents"]), int(state["state_dim"]))
            tensors = lambda saved: {k: torch.as_tensor(np.asarray(v)) for k, v in saved.items()}
            self.mixer.load_state_dict(tensors(state["mixer"]))
            self.target_mixer.load_state_dict(tensors(state["target_mixer"]))
        super().load_state_dict(state)
