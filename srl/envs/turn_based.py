"""Turn-based games: a PettingZoo AEC env (tic-tac-toe, connect four, chess, Go, Hanabi) as an SRL env.

`id` names the game: an id of PettingZoo's registry (`classic/connect_four-v3`,
`classic/tictactoe-v3`, `classic/chess-v6`), `package.module` exposing `env(**kwargs)`, or
`package.module:callable` returning an AEC env.

One step is one move: the agent whose turn it is (`agent_selection`) acts; the others'
actions never reach the game. Every agent still has a row at every step, so the env ring,
trajectories, several policies and self-play take a board game as they take any multi-agent
env. What makes an agent idle is its `action_mask` (`keys.ACTION_MASK`):

- the agent to move sees the game's legal moves, and a policy never chooses another
  (`srl.models.masks`); an illegal action reaching the game anyway raises ValueError;
- an agent waiting for its turn sees one legal action, `PASS` (0), that the game never
  receives. Its log-probability is 0 under any policy, so waiting rows add nothing to a
  policy gradient: they teach the critic the value of positions where the other player is to
  move, and carry rewards that arrive on the other player's turn (a loss when the opponent
  completes a line) back, through the return, to the move that allowed it.

Observations are the game's own, from the agent's side (`observe(agent)`): `{"obs": the
"observation" field, "action_mask": int8 [actions]}`. Each agent's reward at a step is what
the game's `rewards` give it for that move, whoever made it. The last step's info names the
`winner` (the agent whose episode return is highest, None for a tie) for self-play's league,
and carries the episode return of `score_agent` (default: the first agent): summed over both
players of a zero-sum game it would always be 0.

`render=True` builds the game with `render_mode="rgb_array"`, for videos.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import WINNER, AgentStep, Env
from srl.api.registry import import_object
from srl.data import keys
from srl.envs.extras import require

#: The action an agent waiting for its turn is made to choose (the game never receives it).
PASS = 0
#: The observation field of a PettingZoo classic game's observation dict that holds the board.
_BOARD = "observation"


def make_aec_env(id: str, **kwargs: Any) -> Any:
    """Build the AEC env that `id` names (see the module docstring)."""
    if "/" in id and ":" not in id:  # the registry's form, family/name-vN
        return require("pettingzoo", "pettingzoo", hint=f"(env id {id!r})").make("aec", id, **kwargs)
    if id.partition(":")[0].split(".", 1)[0] == "pettingzoo":
        require("pettingzoo", "pettingzoo", hint=f"(env id {id!r})")
    return import_object(id if ":" in id else f"{id}:env")(**kwargs)


class TurnBasedEnv(Env):
    reports_episodes = True

    def __init__(self, id: str | None = None, score_agent: str | None = None, render: bool = False,
                 **kwargs: Any) -> None:
        pettingzoo = require("pettingzoo", "pettingzoo")
        if id is None:
            raise ValueError("a turn-based env needs env.id: a PettingZoo registry id ('classic/connect_four-v3'), "
                             "'package.module' with env() or 'package.module:fn' returning an AEC env")
        if render:
            kwargs.setdefault("render_mode", "rgb_array")
        self.env, self.name = make_aec_env(id, **kwargs), id
        if not isinstance(self.env, pettingzoo.AECEnv):
            raise ValueError(f"env.id {id!r} built a {type(self.env).__name__}, not a PettingZoo AEC env "
                             "(a game of simultaneous moves is env.type pettingzoo)")
        self.agent_ids = tuple(self.env.possible_agents)
        self.render_fps = float(getattr(self.env, "metadata", {}).get("render_fps") or Env.render_fps)
        self._obs_spaces: dict[str, gym.spaces.Dict] = {}
        self._actions: dict[str, int] = {}
        #: Per agent, the mask of one waiting for its turn (made once: slots copy what they are given).
        self._pass: dict[str, np.ndarray] = {}
        for agent in self.agent_ids:
            space, actions = self.env.observation_space(agent), self.env.action_space(agent)
            if not isinstance(actions, gym.spaces.Discrete):
                raise ValueError(f"env {id!r}: agent {agent!r} has actions {actions}; a turn-based env needs "
                                 "Discrete actions (legal-move masks are per action)")
            if isinstance(space, gym.spaces.Dict):
                if _BOARD not in space.spaces:
                    raise ValueError(f"env {id!r}: agent {agent!r}'s observation dict has no {_BOARD!r} field "
                                     f"(fields: {list(space.spaces)})")
                space = space[_BOARD]
            self._actions[agent] = int(actions.n)
            self._pass[agent] = np.zeros(int(actions.n), np.int8)
            self._pass[agent][PASS] = 1
            self._obs_spaces[agent] = gym.spaces.Dict({
                keys.OBS: space, keys.ACTION_MASK: gym.spaces.Box(0, 1, (int(actions.n),), np.int8)})
        self.score_agent = score_agent or self.agent_ids[0]
        if self.score_agent not in self.agent_ids:
            raise ValueError(f"env {id!r}: score_agent {score_agent!r} is not one of its agents {list(self.agent_ids)}")
        self._returns = dict.fromkeys(self.agent_ids, 0.0)
        self._length = 0
        #: The legal moves of the agent to move, as it was shown them.
        self._legal = np.zeros(0, np.int8)

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space(agent)

    def _observe(self, agent: str, to_move: bool) -> dict[str, np.ndarray]:
        raw = self.env.observe(agent)
        board, mask = (raw[_BOARD], raw.get(keys.ACTION_MASK)) if isinstance(raw, dict) else (raw, None)
        if not to_move:
            mask = self._pass[agent]
        else:
            if mask is None:  # some games give the mask in the info instead, others none at all
                mask = self.env.infos.get(agent, {}).get(keys.ACTION_MASK)
            mask = np.ones(self._actions[agent], np.int8) if mask is None else np.asarray(mask, np.int8)
            self._legal = mask
        return {keys.OBS: board, keys.ACTION_MASK: mask}

    def _steps(self, rewards: dict[str, float], over: bool, info: dict[str, Any]) -> dict[str, AgentStep]:
        env = self.env
        mover = None if over else env.agent_selection
        return {a: AgentStep(self._observe(a, a == mover), rewards.get(a, 0.0),
                             bool(env.terminations.get(a, True)), bool(env.truncations.get(a, False)), info)
                for a in self.agent_ids}

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        self.env.reset(seed=seed)
        self._returns = dict.fromkeys(self.agent_ids, 0.0)
        self._length = 0
        return self._steps({}, False, {})

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        env = self.env
        mover = env.agent_selection
        action = int(actions[mover])
        if not (0 <= action < len(self._legal) and self._legal[action]):
            raise ValueError(f"env {self.name!r}: {mover} chose action {action}, which is not legal now "
                             f"(legal: {np.flatnonzero(self._legal).tolist()})")
        env.step(action)
        rewards = {a: float(env.rewards.get(a, 0.0)) for a in self.agent_ids}
        # An agent done before the game is over is stepped with None when its turn comes (the AEC API).
        while env.agents and not self._over() and (env.terminations[env.agent_selection]
                                                   or env.truncations[env.agent_selection]):
            env.step(None)
        self._length += 1
        for agent, reward in rewards.items():
            self._returns[agent] += reward
        info: dict[str, Any] = {}
        over = self._over()
        if over:
            best = max(self._returns.values())
            leaders = [a for a, r in self._returns.items() if r == best]
            info = {WINNER: leaders[0] if len(leaders) == 1 else None,
                    "episode_return": self._returns[self.score_agent], "episode_length": self._length}
        return self._steps(rewards, over, info)

    def _over(self) -> bool:
        env = self.env
        return not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)

    def render(self) -> np.ndarray | None:
        return self.env.render() if getattr(self.env, "render_mode", None) == "rgb_array" else None

    def close(self) -> None:
        self.env.close()
