"""Atari 2600 games (ale-py through Gymnasium) with the DeepMind preprocessing.

The observation is `{"obs": uint8 [stack, 84, 84]}`: grayscale, resized, the max over the
last two of `frame_skip` emulator frames, `stack` agent steps stacked (Gymnasium's
`AtariPreprocessing` and `FrameStackObservation`). A reset plays up to `noop_max` no-ops,
then presses FIRE in games that need it to start.

Two training conveniences change what the learner sees but not what is reported:

* `episodic_life`: losing a life *terminates the training episode* (the value of the
  state after a lost life is not bootstrapped), but the emulator keeps the game going;
  the next `reset()` continues from where the life was lost. Only game over (or the
  108,000-frame limit) resets the emulator.
* `clip_rewards`: the training reward is the sign of the game's reward.

The true game score, summed over every life and unclipped, is reported once per game in
`info["episode_return"]` / `info["episode_length"]` (agent steps), with
`reports_episodes = True`, so the run's `episode_return_mean` is the score people quote.

Sticky actions default to off (`repeat_action_probability=0.0`, the "v4" dynamics used
by the PPO paper and by EnvPool's default) even for `ALE/...-v5` ids, so the two
backends and published PPO curves compare like for like; pass 0.25 for the
Machado et al. (2018) protocol.

`render=True` lets `render()` return the emulator's colour screen (210x160), the frame the
agent acts on, for videos.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.envs.extras import require

AGENT = "agent"
NOOP, FIRE = 0, 1


#: The emulator's frame rate.
ATARI_FPS = 60.0


def make_ale(id: str, repeat_action_probability: float = 0.0, full_action_space: bool = False,
             render_mode: str | None = None) -> gym.Env:
    """The raw emulator env, one frame per step (the preprocessing does the skipping)."""
    ale_py = require("ale_py", "atari")
    require("cv2", "atari")  # AtariPreprocessing resizes with OpenCV
    gym.register_envs(ale_py)
    return gym.make(id, frameskip=1, repeat_action_probability=repeat_action_probability,
                    full_action_space=full_action_space, render_mode=render_mode)


class AtariEnv(Env):
    agent_ids = (AGENT,)
    #: Episode returns come from `info` (true game score across lives), not from the clipped rewards.
    reports_episodes = True

    def __init__(self, id: str = "ALE/Pong-v5", *, episodic_life: bool = True, clip_rewards: bool = True,
                 noop_max: int = 30, frame_skip: int = 4, stack: int = 4, screen_size: int = 84,
                 fire_reset: bool = True, repeat_action_probability: float = 0.0,
                 full_action_space: bool = False, render: bool = False) -> None:
        base = make_ale(id, repeat_action_probability, full_action_space, "rgb_array" if render else None)
        self.render_fps = ATARI_FPS / frame_skip
        self.ale = base.unwrapped.ale
        preprocessed = gym.wrappers.AtariPreprocessing(base, noop_max=noop_max, frame_skip=frame_skip,
                                                       screen_size=screen_size, grayscale_obs=True, scale_obs=False)
        self.env = gym.wrappers.FrameStackObservation(preprocessed, stack)
        self.episodic_life = episodic_life
        self.clip_rewards = clip_rewards
        meanings = base.unwrapped.get_action_meanings()
        self.fire_reset = fire_reset and len(meanings) > FIRE and meanings[FIRE] == "FIRE"
        self._obs_space = gym.spaces.Dict({keys.OBS: self.env.observation_space})
        self._game_over = True
        self._obs: np.ndarray | None = None
        self._lives = 0
        self._return = 0.0
        self._length = 0

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        """A new game after game over (or when seeded); after a lost life, the same game goes on."""
        if self._game_over or seed is not None:
            self._new_game(seed)
        if self.fire_reset:
            self._press_fire()
        return {AGENT: AgentStep({keys.OBS: self._obs})}

    def _new_game(self, seed: int | None) -> None:
        self._obs, _ = self.env.reset(seed=seed)
        self._lives = self.ale.lives()
        self._game_over = False
        self._return, self._length = 0.0, 0

    def _press_fire(self) -> None:
        """Serve the ball: its reward counts in the game score; a game it ends (rare) starts afresh."""
        obs, reward, terminated, truncated, info = self.env.step(FIRE)
        self._obs, self._return, self._lives = obs, self._return + float(reward), info["lives"]
        if terminated or truncated:
            self._new_game(None)

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        obs, reward, terminated, truncated, info = self.env.step(int(actions[AGENT]))
        reward = float(reward)
        self._obs = obs
        self._return += reward
        self._length += 1
        life_lost = info["lives"] < self._lives
        self._lives = info["lives"]
        out_info: dict[str, Any] = {}
        if terminated or truncated:
            self._game_over = True
            out_info = {"episode_return": self._return, "episode_length": self._length}
        if self.clip_rewards:
            reward = float(np.sign(reward))
        terminated = terminated or (self.episodic_life and life_lost)
        return {AGENT: AgentStep({keys.OBS: obs}, reward, bool(terminated), bool(truncated), out_info)}

    def render(self) -> np.ndarray | None:
        return self.env.render() if self.env.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.env.close()
