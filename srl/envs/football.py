"""Google Research Football: N players of the left team, each an agent of one SRL env.

    env: {type: football, args: {scenario: academy_3_vs_1_with_keeper, players: 3}}

Each controlled player `player_i` sees its own `simple115v2` vector (115 floats: positions
and directions of every player and the ball, possession, the active player, the game
mode) and picks one of the 19 built-in actions. With `state: true` every agent also gets
`state`, the concatenation of all controlled players' vectors, for a centralised critic.
The team shares one `done`: a goal, the ball going out or a change of possession in the
academy scenarios, or the end of the scenario's time (`game_duration`), which is reported
as truncation (so is `max_episode_steps`, when set).

Rewards are per player: `scoring` gives +1/-1 per goal, `scoring,checkpoints` adds gfootball's
shaping for carrying the ball towards the goal, paid to the player carrying it. With
`shared_reward: true` every player gets the team's mean reward instead (credit for a pass).
Whatever the training reward, the env reports the goal difference as the episode return
(`reports_episodes`), and `info` at the end of an episode carries `score` ([left, right])
and `win`; in the academy scenarios the mean return is therefore the rate of scoring.

gfootball writes no dumps or videos here (they are disabled); it has no Linux wheel and is
installed by `scripts/install_football.sh`.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.envs.extras import require

N_ACTIONS = 19
OBS_DIM = 115
INSTALL_HINT = ("gfootball itself has no wheel: `bash scripts/install_football.sh` installs the system packages "
                "and builds it.")


class FootballEnv(Env):
    reports_episodes = True

    def __init__(self, scenario: str = "academy_3_vs_1_with_keeper", players: int = 3,
                 rewards: str = "scoring", state: bool = False, shared_reward: bool = False,
                 max_episode_steps: int | None = None) -> None:
        football = require("gfootball.env", "football", hint=INSTALL_HINT)
        self.agent_ids = tuple(f"player_{i}" for i in range(players))
        self.players = players
        self.max_episode_steps = max_episode_steps
        self.shared_reward = shared_reward
        with warnings.catch_warnings():  # gym < 0.26 warns about its own old step API on every wrapper
            warnings.simplefilter("ignore", DeprecationWarning)
            self.env = football.create_environment(
                env_name=scenario, representation="simple115v2", rewards=rewards,
                number_of_left_players_agent_controls=players, stacked=False, render=False,
                write_goal_dumps=False, write_full_episode_dumps=False, write_video=False, logdir="",
            )
        #: The scenario's own time limit, in steps: the game ends one step after it (a truncation).
        self.game_duration = int(self.env.unwrapped._config.ScenarioConfig().game_duration)
        self._seeds: np.random.Generator | None = None
        box = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        fields = {keys.OBS: box}
        if state:
            fields["state"] = gym.spaces.Box(-np.inf, np.inf, (players * OBS_DIM,), np.float32)
        self._obs_space = gym.spaces.Dict(fields)
        self._state = state
        self._t = 0
        self._score = np.zeros(2, np.int64)

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(N_ACTIONS)

    def _obs(self, raw: np.ndarray) -> list[dict[str, np.ndarray]]:
        obs = np.asarray(raw, np.float32).reshape(self.players, OBS_DIM)
        state = obs.reshape(-1)
        return [{keys.OBS: o, "state": state} if self._state else {keys.OBS: o} for o in obs]

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        if self._seeds is not None:  # a fresh engine seed per episode, reproducible from the first
            self.env.unwrapped._config.update({"game_engine_random_seed": int(self._seeds.integers(2**31))})
        obs = self._obs(self.env.reset())
        self._t = 0
        self._score[:] = 0
        return {agent: AgentStep(o) for agent, o in zip(self.agent_ids, obs)}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        raw, reward, done, info = self.env.step([int(actions[a]) for a in self.agent_ids])
        self._t += 1
        rewards = np.broadcast_to(np.asarray(reward, np.float32), (self.players,))
        if self.shared_reward:
            rewards = np.full(self.players, rewards.mean(), np.float32)
        goal = int(info.get("score_reward", 0))
        self._score += (max(goal, 0), max(-goal, 0))
        if done:  # the clock ran out, unless the last step decided the episode
            truncated = self._t >= self.game_duration and goal == 0
        else:
            truncated = self.max_episode_steps is not None and self._t >= self.max_episode_steps
        terminated = bool(done) and not truncated
        end: dict[str, Any] = {}
        if terminated or truncated:
            diff = int(self._score[0] - self._score[1])
            end = {"episode_return": float(diff), "episode_length": self._t,
                   "score": self._score.tolist(), "win": diff > 0}
        obs = self._obs(raw)
        return {agent: AgentStep(o, float(r), terminated, truncated, dict(end))
                for agent, o, r in zip(self.agent_ids, obs, rewards)}

    def close(self) -> None:
        self.env.close()
