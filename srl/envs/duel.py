"""A two-player shoot-out on a grid: a cheap, symmetric competitive game with a winner.

Two players (`player_0`, `player_1`) start on random cells of a `size` x `size` arena. Each
step both choose at once: stay, move one cell (up, down, left, right), or shoot along one of
the four directions. Moves resolve first (two players moving onto one cell, or through each
other, both stay put), then shots: a shot hits when the other player now stands anywhere on
that ray. A player that shot cannot shoot again for `cooldown` steps (the shot is then a
no-op). A hit costs one of `hp` hit points. The game ends when a player is out of hit points
(both at once: a draw) or after `max_steps` steps, when the player with more hit points wins;
with equal hit points, the one nearer the arena's centre (Manhattan distance; equal: a draw).
The centre rule makes holding the middle worth a fight: without it, two careful players
dodge each other until time runs out, and most games are draws.

So aiming is not enough: a shot lands where the other player will be, and a player on a line
with the other can step off it. A random player rarely survives a trained one.

Rewards are zero-sum: a hit is worth +1/hp to the shooter and -1/hp to the target, and the
end +1 to the winner and -1 to the loser. Each player sees, from its own side (one network
plays either): its position, the other's offset, whether they share a row or a column, both
players' hit points and cooldowns, and the time left. The last step's info names the
`winner` (an agent id, or None for a draw) for self-play's league (`srl.league.match`), and
carries `episode_return`: the return of `player_0` (the env reports its episodes: a mean over
both players would always be 0).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from srl.api.env import WINNER, AgentStep, Env
from srl.data import keys

#: (dx, dy) of the moves and shots, by action: 0 stay, 1-4 move, 5-8 shoot.
_DIRECTIONS = ((0, 1), (0, -1), (-1, 0), (1, 0))
STAY, SHOOT = 0, 5
N_ACTIONS = 9


class DuelEnv(Env):
    agent_ids = ("player_0", "player_1")
    reports_episodes = True

    def __init__(self, size: int = 7, hp: int = 3, cooldown: int = 2, max_steps: int = 40) -> None:
        if size < 3:
            raise ValueError(f"env.args.size: at least 3, not {size}")
        if hp < 1 or cooldown < 0 or max_steps < 1:
            raise ValueError("env.args: hp and max_steps must be at least 1, cooldown at least 0")
        self.size, self.hp_max, self.cooldown, self.max_steps = size, hp, cooldown, max_steps
        self.rng = np.random.default_rng()
        self._obs_space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-1.0, 1.0, (11,), np.float32)})
        self._action_space = gym.spaces.Discrete(N_ACTIONS)
        self.pos = [[0, 0], [0, 0]]
        self.hp = [hp, hp]
        self.cool = [0, 0]
        self.t = 0
        self.returns = [0.0, 0.0]

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        cells = self.rng.choice(self.size * self.size, 2, replace=False)
        self.pos = [[int(c) % self.size, int(c) // self.size] for c in cells]
        self.hp = [self.hp_max, self.hp_max]
        self.cool = [0, 0]
        self.t = 0
        self.returns = [0.0, 0.0]
        return {agent: AgentStep(self._obs(i)) for i, agent in enumerate(self.agent_ids)}

    def _obs(self, i: int) -> dict[str, np.ndarray]:
        me, other = self.pos[i], self.pos[1 - i]
        scale = 1.0 / (self.size - 1)
        cd = 1.0 / max(self.cooldown, 1)
        return {keys.OBS: np.array([
            2.0 * me[0] * scale - 1.0, 2.0 * me[1] * scale - 1.0,
            (other[0] - me[0]) * scale, (other[1] - me[1]) * scale,
            float(other[0] == me[0]), float(other[1] == me[1]),
            self.hp[i] / self.hp_max, self.hp[1 - i] / self.hp_max,
            self.cool[i] * cd, self.cool[1 - i] * cd, 1.0 - self.t / self.max_steps], np.float32)}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        act = [int(actions["player_0"]), int(actions["player_1"])]
        # Moves, at once: onto one cell or through each other, both stay.
        target = [list(p) for p in self.pos]
        for i in (0, 1):
            if STAY < act[i] < SHOOT:
                dx, dy = _DIRECTIONS[act[i] - 1]
                x, y = self.pos[i][0] + dx, self.pos[i][1] + dy
                if 0 <= x < self.size and 0 <= y < self.size:
                    target[i] = [x, y]
        if target[0] != target[1] and not (target[0] == self.pos[1] and target[1] == self.pos[0]):
            self.pos = target
        # Shots, at once, at where the other player now stands.
        reward = [0.0, 0.0]
        for i in (0, 1):
            if self.cool[i]:
                self.cool[i] -= 1
            elif act[i] >= SHOOT:
                self.cool[i] = self.cooldown
                dx, dy = _DIRECTIONS[act[i] - SHOOT]
                ox, oy = self.pos[1 - i][0] - self.pos[i][0], self.pos[1 - i][1] - self.pos[i][1]
                if (dx == 0 and ox == 0 and oy * dy > 0) or (dy == 0 and oy == 0 and ox * dx > 0):
                    self.hp[1 - i] -= 1
                    reward[i] += 1.0 / self.hp_max
                    reward[1 - i] -= 1.0 / self.hp_max
        self.t += 1
        over = min(self.hp) <= 0 or self.t >= self.max_steps
        winner = None
        if over:
            c = (self.size - 1) / 2
            off = [abs(p[0] - c) + abs(p[1] - c) for p in self.pos]
            if self.hp[0] != self.hp[1]:
                winner = self.agent_ids[0 if self.hp[0] > self.hp[1] else 1]
            elif min(self.hp) > 0 and off[0] != off[1]:  # time is up, even: the one nearer the centre
                winner = self.agent_ids[0 if off[0] < off[1] else 1]
        if winner is not None:
            w = self.agent_ids.index(winner)
            reward[w] += 1.0
            reward[1 - w] -= 1.0
        self.returns[0] += reward[0]
        self.returns[1] += reward[1]
        info = {WINNER: winner, "episode_return": self.returns[0], "episode_length": self.t} if over else {}
        terminated = min(self.hp) <= 0
        truncated = over and not terminated
        return {agent: AgentStep(self._obs(i), reward[i], terminated, truncated, info)
                for i, agent in enumerate(self.agent_ids)}
