"""The Nature DQN convolutional encoder (Mnih et al. 2015), the usual torso for Atari.

Input: one uint8 image field [N, C, H, W] (84x84 stacked frames). Scaling to [0, 1] happens
inside the network, so observations stay uint8 (4x smaller) all the way from the env to
the trainer. Orthogonal initialisation with gain sqrt(2), as for the MLPs.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def _orthogonal(layer: nn.Module) -> nn.Module:
    nn.init.orthogonal_(layer.weight, np.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    out_dim = 512

    def __init__(self, spaces: Mapping[str, gym.Space]) -> None:
        super().__init__()
        if len(spaces) != 1:
            raise ValueError(f"nature_cnn reads one image field, got {list(spaces)}; choose one with actor_inputs")
        (self.field, space), = spaces.items()
        if len(space.shape) != 3:
            raise ValueError(f"nature_cnn needs a [C, H, W] image, field {self.field!r} has shape {space.shape}")
        #: uint8 images are scaled from [0, 255]; float images are taken as they are.
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        self.convs = nn.Sequential(
            _orthogonal(nn.Conv2d(space.shape[0], 32, 8, stride=4)), nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *space.shape)).shape[1]
        self.linear = nn.Sequential(_orthogonal(nn.Linear(flat, self.out_dim)), nn.ReLU())
        # Channels-last weights: oneDNN's convolutions, the backward pass above all, run faster in
        # NHWC than in NCHW on CPU. A conv given NCHW input follows its weights' layout; the wire
        # and the policy's checkpoint state get contiguous copies (`module_params`).
        self.convs.to(memory_format=torch.channels_last)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        x = obs[self.field].float()
        return self.linear(self.convs(x * self.scale if self.scale != 1.0 else x))


class BoardCNN(nn.Module):
    """Small game boards: one [H, W, C] field of piece planes (channels last, as PettingZoo's
    classic games give them: connect four's 6x7x2) through 3x3 convolutions that keep the board's
    size, so a pattern (three in a row) is recognised wherever it stands; every other field (a
    legal-move mask) is flattened beside the board's features."""

    #: Small on purpose: on a CPU learner each channel costs (32: twice the time of 16).
    CHANNELS = 16
    #: Each layer sees one cell further: two see a cell's 5x5 neighbourhood.
    LAYERS = 2

    def __init__(self, spaces: Mapping[str, gym.Space], channels: int = CHANNELS, layers: int = LAYERS) -> None:
        super().__init__()
        boards = [k for k, s in spaces.items() if len(s.shape) == 3]
        if len(boards) != 1:
            raise ValueError(f"board_cnn reads one [H, W, C] board field, got {len(boards)} among {list(spaces)}")
        self.field = boards[0]
        height, width, planes = spaces[self.field].shape
        self.rest = [k for k in spaces if k != self.field]
        convs: list[nn.Module] = []
        for i in range(layers):
            convs += [_orthogonal(nn.Conv2d(planes if i == 0 else channels, channels, 3, padding=1)), nn.ReLU()]
        self.convs = nn.Sequential(*convs, nn.Flatten())
        self.out_dim = channels * height * width + sum(int(np.prod(spaces[k].shape)) for k in self.rest)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        board = obs[self.field]
        features = self.convs(board.float().permute(0, 3, 1, 2))
        if not self.rest:
            return features
        return torch.cat([features, *(obs[k].reshape(len(board), -1).float() for k in self.rest)], -1)
