"""Videos of an env's episodes, and the OpenGL set-up that MuJoCo needs to render without a display.

`RecordingEnv` wraps one `srl.api.Env` and writes a frame from its `render()` after every
reset and step into an MP4 file, through imageio's ffmpeg backend (the imageio-ffmpeg
wheel ships the ffmpeg binary). It is an `Env` itself, so an `EnvSlot` steps it like any
other; `srl evaluate --video` records the first env of the evaluation this way.
"""

from __future__ import annotations

import ctypes.util
import glob
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.env import AgentStep, Env

#: Shadow map size, in pixels, when MuJoCo renders on the CPU (see `prepare_mujoco_render`).
SOFTWARE_SHADOW_SIZE = 1024
#: The camera Gymnasium's MuJoCo models define to follow the agent.
TRACK_CAMERA = "track"
#: Containers that take the H.264 stream written here.
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov")
#: Frames smaller than this (shortest side, pixels) are enlarged by a whole factor, pixels kept
#: sharp: an Atari or ViZDoom screen (160 and 120 pixels) is too small to watch as it is.
MIN_SIDE = 360


def headless_gl() -> str | None:
    """Without a display, point MuJoCo at an offscreen GL backend (EGL, else OSMesa); returns MUJOCO_GL.

    MuJoCo reads MUJOCO_GL once, when it is first imported, so this only acts before that,
    and never overrides the user's choice. EGL works on a GPU (the vendor's EGL) and on a
    CPU alone (Mesa's EGL with its llvmpipe software renderer: libegl1 + libegl-mesa0 +
    libgl1-mesa-dri); OSMesa (libosmesa6) is the fallback.
    """
    if "mujoco" in sys.modules or os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or sys.platform != "linux":
        return os.environ.get("MUJOCO_GL")
    for backend, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(library):
            os.environ["MUJOCO_GL"] = backend
            return backend
    return None


def headless_rendering() -> None:
    """Set up, before the envs are built, what rendering without a screen or sound card needs.

    MuJoCo gets an offscreen GL backend (`headless_gl`). Gymnasium's classic-control
    renderers draw on pygame surfaces but call `pygame.init()`, which opens SDL's audio and,
    without a display, fails to open a video driver, printing errors each time: SDL gets its
    dummy drivers instead (a video is silent, and its frames need no window). Nothing
    overrides the user's own setting.
    """
    headless_gl()
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def prepare_mujoco_render(env: Any) -> None:
    """Before the first frame of a Gymnasium MuJoCo env (or any env with a MuJoCo `model`): a
    camera that follows the agent, and, without a GPU, lighter visuals.

    Gymnasium renders HalfCheetah-v5 and its kin from a free camera that stays where the
    episode began, so a running agent leaves the picture in seconds; the model's own `track`
    camera (a side view that follows the centre of mass) is used instead when the user chose
    no camera. MuJoCo's default visuals suit a GPU: a 4096x4096 shadow map and 4x
    multisampling made Mesa's software renderer (llvmpipe) take ~8x longer per HalfCheetah
    frame than a 1024x1024 map without multisampling (shadows kept, edges a little rougher).
    The renderer reads both when it is created, at the first `render()`. Envs without a
    MuJoCo model are left alone, and so are the visuals on machines with a GPU render device.
    """
    unwrapped = getattr(env, "unwrapped", env)
    model = getattr(unwrapped, "model", None)
    quality = getattr(getattr(model, "vis", None), "quality", None)
    if quality is None:
        return
    renderer = getattr(unwrapped, "mujoco_renderer", None)
    if getattr(renderer, "camera_id", None) == -1:  # Gymnasium's free camera: nothing chosen
        try:
            renderer.camera_id = model.camera(TRACK_CAMERA).id
        except KeyError:  # no such camera in this model
            pass
    if not (glob.glob("/dev/dri/renderD*") or glob.glob("/dev/nvidia[0-9]*")):
        quality.shadowsize = min(int(quality.shadowsize), SOFTWARE_SHADOW_SIZE)
        quality.offsamples = 0


def _displayable(frame: np.ndarray) -> np.ndarray:
    """The frame enlarged to at least MIN_SIDE and cut to even sizes (H.264's yuv420p needs them)."""
    frame = np.asarray(frame, np.uint8)
    factor = math.ceil(MIN_SIDE / min(frame.shape[:2]))
    if factor > 1:
        frame = frame.repeat(factor, axis=0).repeat(factor, axis=1)
    height, width = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
    return frame[:height, :width]


@dataclass
class Video:
    """A video to record: `episodes` whole episodes of one env, cut at `max_seconds` of play."""

    path: Path
    episodes: int = 1
    max_seconds: float = 300.0

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.path.suffix.lower() not in VIDEO_SUFFIXES:
            raise ValueError(f"{self.path.name}: a video file ends in {', '.join(VIDEO_SUFFIXES)}")
        if self.episodes < 1 or not self.max_seconds > 0:
            raise ValueError(f"a video needs at least one episode and some seconds, not {self.episodes} episodes "
                             f"and {self.max_seconds} s")

    def record(self, env: Env, name: str = "env") -> RecordingEnv:
        return RecordingEnv(env, self, name)


class RecordingEnv(Env):
    """`env`, unchanged, that also writes a frame after every reset and step until the video is `done`.

    An episode ends as `EnvSlot` counts one: when every agent is done, and for an env that
    reports its own episodes (Atari's game across lives) only when it says so in
    `info["episode_return"]`. The file is opened at the first frame and finished as soon as
    the video is done; an env that gives no first frame raises ValueError (one line, before
    any step is played).
    """

    def __init__(self, env: Env, video: Video, name: str = "env") -> None:
        self.env, self.video, self.name = env, video, name
        self.agent_ids = env.agent_ids
        self.reports_episodes = bool(getattr(env, "reports_episodes", False))
        self.render_fps = env.render_fps
        self.max_frames = max(1, int(video.max_seconds * env.render_fps))
        self.frames = 0
        self.episodes = 0
        self._writer: Any = None
        self._done_agents: set[str] = set()

    @property
    def done(self) -> bool:
        """The video has its episodes (or its maximum length) and is written out."""
        return self.episodes >= self.video.episodes or self.frames >= self.max_frames

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space(agent)

    def render(self) -> np.ndarray | None:
        return self.env.render()

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        steps = self.env.reset(seed)
        self._done_agents.clear()
        self._record()
        return steps

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        steps = self.env.step(actions)
        self._record()  # before counting the episode: its last frame belongs in the video
        self._done_agents.update(agent for agent, step in steps.items() if step.done)
        ended = len(self._done_agents) == len(self.agent_ids)
        if ended and (not self.reports_episodes or "episode_return" in steps[self.agent_ids[0]].info):
            self.episodes += 1
            if self.done:
                self._finish()
        return steps

    def _record(self) -> None:
        if self.done:
            return
        if self._writer is None:
            frame = self._first_frame()
            self._writer = self._open()
        else:
            frame = self.env.render()
        if frame is not None:  # None mid-episode: a step with no picture (e.g. ViZDoom's last one)
            self._writer.append_data(_displayable(frame))
            self.frames += 1
        if self.done:
            self._finish()

    def _first_frame(self) -> np.ndarray:
        """The env's first frame: ValueError, one line, if it cannot render."""
        try:
            frame = self.env.render()
        except Exception as exc:  # noqa: BLE001 - any failure to render is the one line the user needs
            hint = " (MuJoCo without a display needs MUJOCO_GL=egl or osmesa)" if "mujoco" in sys.modules else ""
            raise ValueError(f"env {self.name!r} failed to render a frame for the video{hint}: "
                             f"{type(exc).__name__}: {exc}") from None
        if frame is None:
            raise ValueError(f"env {self.name!r} cannot render, so it cannot make a video: its render() returns "
                             "None (see srl.api.Env.render)")
        return frame

    def _open(self) -> Any:
        """An imageio writer of H.264 in yuv420p, which plays everywhere, browsers included."""
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401 - the backend imageio needs for MP4
        except ImportError as exc:
            raise ValueError(f"videos need imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg ({exc})") \
                from None
        self.video.path.parent.mkdir(parents=True, exist_ok=True)
        return imageio.get_writer(self.video.path, format="FFMPEG", mode="I", fps=self.render_fps, codec="libx264",
                                  pixelformat="yuv420p", macro_block_size=1)

    def _finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        self._finish()
        self.env.close()
