"""ViZDoom: first-person Doom scenarios seen through the screen buffer, one agent.

    env: {type: vizdoom, args: {scenario: basic, frame_skip: 4, frame_stack: 4}}

Built on `vizdoom.DoomGame` directly: a scenario is a name from the wheel's own
scenarios (`basic`, `defend_the_center`, `health_gathering`, ...) or a path to a `.cfg`.
Observations are uint8 images, channel-first and resized to `size` (84x84 by default, the
Nature CNN's input), grayscale or RGB, with the last `frame_stack` frames stacked on the
channel axis. Actions are discrete: index 0 presses nothing, index i presses the i-th
binary button of the scenario. Each action is held for `frame_skip` tics and earns the sum
of their rewards. The scenario's time limit (or `max_episode_steps`) ends an episode as a
truncation; death or the scenario's goal ends it as a termination.

The engine writes `_vizdoom.ini` and `_vizdoom/` into the working directory; SRL workers
run inside `<run_dir>/workdir`, so that is where they land.

`render()` returns the engine's screen (160x120, grayscale as three equal channels unless
`grayscale=False`): what the agent sees before resizing. It needs no set-up, so it has no
constructor switch.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.envs.extras import require

AGENT = "agent"
#: Doom's game clock: tics per second.
TICRATE = 35.0


def resize_matrix(src: int, dst: int) -> np.ndarray:
    """A [dst, src] matrix that resamples a line of `src` pixels to `dst` by area averaging.

    Output pixel i covers source interval [i * src / dst, (i + 1) * src / dst); each source
    pixel contributes the length of its overlap. Two matmuls (rows, then columns) resize an
    image without OpenCV, and at these sizes cost a few microseconds.
    """
    scale = src / dst
    edges = np.arange(dst + 1) * scale
    pixels = np.arange(src)
    lo = np.maximum(edges[:-1, None], pixels[None, :])
    hi = np.minimum(edges[1:, None], pixels[None, :] + 1)
    return (np.clip(hi - lo, 0, None) / scale).astype(np.float32)


class VizDoomEnv(Env):
    agent_ids = (AGENT,)

    def __init__(self, scenario: str = "basic", frame_skip: int = 4, frame_stack: int = 4,
                 size: tuple[int, int] | list[int] = (84, 84), grayscale: bool = True,
                 max_episode_steps: int | None = None, render_hud: bool = False) -> None:
        vzd = require("vizdoom", "vizdoom")
        self.frame_skip = frame_skip
        self.render_fps = TICRATE / frame_skip
        self.frame_stack = frame_stack
        self.max_episode_steps = max_episode_steps
        game = vzd.DoomGame()
        config = scenario if scenario.endswith(".cfg") else os.path.join(vzd.scenarios_path, f"{scenario}.cfg")
        if not os.path.isfile(config):
            raise FileNotFoundError(f"no ViZDoom scenario {scenario!r} ({config} does not exist)")
        game.load_config(config)
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.GRAY8 if grayscale else vzd.ScreenFormat.CRCGCB)
        game.set_render_hud(render_hud)
        game.init()
        self.game = game
        buttons = game.get_available_buttons()
        #: Which buttons can be pressed: delta buttons (mouse-like axes) are left at zero.
        self.buttons = [i for i, b in enumerate(buttons) if vzd.is_binary_button(b)]
        self._actions = np.zeros((len(self.buttons) + 1, len(buttons)))
        for a, i in enumerate(self.buttons):
            self._actions[a + 1, i] = 1.0
        self._actions_list = [row.tolist() for row in self._actions]
        channels = 1 if grayscale else 3
        height, width = int(size[0]), int(size[1])
        self._rows = resize_matrix(game.get_screen_height(), height)
        self._cols = resize_matrix(game.get_screen_width(), width).T.copy()
        self._frames = np.zeros((frame_stack * channels, height, width), np.uint8)
        self._channels = channels
        self._obs_space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(0, 255, self._frames.shape, np.uint8)})
        self._action_space = gym.spaces.Discrete(len(self._actions_list))
        self._t = 0
        self._return = 0.0

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def _screen(self) -> np.ndarray:
        """The current screen, [channels, height, width] uint8 at the observation size."""
        state = self.game.get_state()
        buffer = state.screen_buffer.reshape(self._channels, *state.screen_buffer.shape[-2:])
        resized = self._rows @ buffer.astype(np.float32) @ self._cols
        return np.clip(resized + 0.5, 0, 255).astype(np.uint8)

    def render(self) -> np.ndarray | None:
        state = self.game.get_state()
        if state is None:  # the episode has ended: no screen until the next one
            return None
        buffer = state.screen_buffer.reshape(self._channels, *state.screen_buffer.shape[-2:])
        return np.ascontiguousarray(np.broadcast_to(buffer, (3, *buffer.shape[1:])).transpose(1, 2, 0))

    def _push(self, frame: np.ndarray | None) -> dict[str, np.ndarray]:
        """Shift the stack by one frame (None: a blank frame, after the episode has ended)."""
        c = self._channels
        self._frames[:-c] = self._frames[c:]
        self._frames[-c:] = 0 if frame is None else frame
        return {keys.OBS: self._frames.copy()}

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        if seed is not None:
            self.game.set_seed(int(seed) % 2**31)
        self.game.new_episode()
        self._t, self._return = 0, 0.0
        frame = self._screen()
        self._frames[:] = np.tile(frame, (self.frame_stack, 1, 1))
        return {AGENT: AgentStep({keys.OBS: self._frames.copy()})}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        reward = float(self.game.make_action(self._actions_list[int(actions[AGENT])], self.frame_skip))
        self._t += 1
        self._return += reward
        finished = self.game.is_episode_finished()
        timed_out = finished and self.game.is_episode_timeout_reached()
        truncated = timed_out or (not finished and self.max_episode_steps is not None
                                  and self._t >= self.max_episode_steps)
        terminated = finished and not timed_out
        obs = self._push(None if finished else self._screen())
        info: dict[str, Any] = {}
        if terminated or truncated:
            info = {"episode_return": self._return, "episode_length": self._t}
        return {AGENT: AgentStep(obs, reward, terminated, truncated, info)}

    def close(self) -> None:
        self.game.close()
