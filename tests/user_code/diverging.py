"""An algorithm that breaks on purpose: PPO whose weights turn NaN after a given step."""

import torch

from srl.algorithms.ppo import PPO, PPOConfig


class DivergingConfig(PPOConfig):
    #: The step after which every weight is NaN (once: a rolled-back run goes on normally).
    diverge_at: int = 30


class DivergingPPO(PPO):
    Config = DivergingConfig

    def __init__(self, policy, config: DivergingConfig) -> None:
        super().__init__(policy, config)
        self.steps = 0

    def step(self, batch):
        stats = super().step(batch)
        self.steps += 1
        if self.steps == self.config.diverge_at:
            with torch.no_grad():
                for parameter in self.params:
                    parameter.fill_(float("nan"))
        return stats
