"""`srl evaluate --video`: a playable MP4 of the evaluation's first env, for every env that renders.

No training: each run directory holds a bundled config and an empty checkpoint folder, and
the agents act with the untrained (`initial`) network.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from srl.api.config_files import apply_overrides, read_config_file
from srl.api.env import AgentStep, Env
from srl.envs.render import MIN_SIDE, RecordingEnv, Video

iio = pytest.importorskip("imageio.v3", reason="videos need imageio and imageio-ffmpeg")
pytest.importorskip("imageio_ffmpeg", reason="videos need imageio and imageio-ffmpeg")


def make_run(root: Path, config: str, *overrides: str) -> Path:
    """A run directory that `srl evaluate` accepts: the config, and no checkpoint yet."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(apply_overrides(read_config_file(config), list(overrides))))
    return run


def read_video(path: Path) -> np.ndarray:
    """Every frame, decoded from the file: [frames, height, width, 3] uint8."""
    frames = iio.imread(path, plugin="FFMPEG")  # decodes through the same ffmpeg binary a player would use
    assert frames.ndim == 4 and frames.shape[-1] == 3 and frames.dtype == np.uint8, frames.shape
    assert len(frames) > 0
    assert np.abs(np.diff(frames.astype(np.int16), axis=0)).max() > 0, "every frame is the same"
    return frames


def record(run_srl, run: Path, agents: list[str], *more: str) -> tuple[np.ndarray, dict]:
    """`srl evaluate RUN --video` for one episode of one env: the frames and the evaluation's JSON."""
    out, result = run.parent / "out.mp4", run.parent / "result.json"
    done = run_srl("evaluate", str(run), "--video", str(out), "--episodes", "1", "--envs", "1",
                   "--json", str(result), "--agents", *agents, *more)
    if done.returncode != 0 and "failed to render" in done.stderr and "MUJOCO_GL" in done.stderr:
        pytest.skip(f"no OpenGL backend for MuJoCo here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"video: {out}" in done.stdout
    return read_video(out), json.loads(result.read_text())


def test_cartpole_video_holds_each_step_of_its_episodes(run_srl, tmp_path):
    run = make_run(tmp_path, "cartpole-ppo")
    frames, result = record(run_srl, run, ["agent=initial"], "--video-episodes", "2")
    # one env, so its episodes are the evaluation's: a frame after each reset and each step
    assert result["episodes"] == 1
    assert frames.shape[1:] == (400, 600, 3)  # Gymnasium's CartPole screen
    assert 2 * 2 + 2 * 8 <= len(frames)  # two episodes of at least 8 steps each (a pole falls no faster)
    assert iio.immeta(run.parent / "out.mp4", plugin="FFMPEG")["fps"] == 50  # CartPole's own frame rate


def test_pong_video(run_srl, tmp_path):
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    pytest.importorskip("cv2", reason="the atari extra is not installed")
    frames, result = record(run_srl, make_run(tmp_path, "pong-ppo"), ["agent=random"], "--video-seconds", "4")
    assert frames.shape[1:] == (630, 480, 3)  # the 210x160 screen, enlarged 3x
    assert len(frames) == 4 * 15  # cut at 4 s of play: Pong's 60 frames/s over a frame skip of 4
    assert result["episodes"] == 1 and result["length_mean"] > 60  # the evaluation still played its whole game


def test_halfcheetah_video(run_srl, tmp_path):
    pytest.importorskip("mujoco", reason="the mujoco extra is not installed")
    run = make_run(tmp_path, "halfcheetah-ppo", "env.args.max_episode_steps=40")
    frames, result = record(run_srl, run, ["agent=initial"])
    assert result["length_mean"] == 40 and len(frames) == 41
    assert frames.shape[1:] == (480, 480, 3)


def test_hide_and_seek_video(run_srl, tmp_path):
    pytest.importorskip("mujoco", reason="the mujoco extra is not installed")
    pytest.importorskip("pettingzoo", reason="the pettingzoo extra is not installed")
    run = make_run(tmp_path, "hns-mappo", "env.args.episode_length=30", "env.args.render_size=[240,240]")
    frames, _ = record(run_srl, run, ["hider=random", "seeker=random"])
    assert len(frames) == 31 and frames.shape[1:] == (480, 480, 3)  # 240 is below MIN_SIDE: doubled


def test_vizdoom_video(run_srl, tmp_path):
    pytest.importorskip("vizdoom", reason="the vizdoom extra is not installed")
    frames, result = record(run_srl, make_run(tmp_path, "vizdoom-basic-ppo"), ["agent=random"])
    assert frames.shape[1:] == (360, 480, 3)  # the 160x120 screen, enlarged 3x
    assert len(frames) == result["length_mean"]  # the last step shows no screen: the episode is over


def test_an_env_that_cannot_render_is_one_line_before_any_episode(run_srl, tmp_path):
    run = make_run(tmp_path, "cartpole-ppo")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["env"] = {"type": "fake", "args": {"episode_length": 6}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    done = run_srl("evaluate", str(run), "--video", str(tmp_path / "out.mp4"), "--agents", "agent=initial")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "cannot render" in done.stderr, done.stderr
    assert done.stdout == "" and not (tmp_path / "out.mp4").exists()  # no result: nothing was played


class Ticker(Env):
    """One agent; each episode lasts `length` steps; frame t is a flat image of value 10 * t (none at the end)."""

    agent_ids = ("agent",)
    render_fps = 10.0
    reports_episodes = False

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return gym.spaces.Dict({"obs": gym.spaces.Box(0, 1, (1,))})

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None) -> dict[str, AgentStep]:
        self.t = 0
        return {"agent": AgentStep({"obs": np.zeros(1, np.float32)})}

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, AgentStep]:
        self.t += 1
        return {"agent": AgentStep({"obs": np.zeros(1, np.float32)}, terminated=self.t == self.length)}

    def render(self) -> np.ndarray | None:
        return None if self.t == self.length else np.full((9, 5, 3), 10 * self.t, np.uint8)


def _play(env: RecordingEnv, steps: int) -> None:
    env.reset(seed=0)
    for _ in range(steps):
        if env.step({"agent": np.int64(0)})["agent"].done:
            env.reset()


def test_recording_stops_after_its_episodes_and_skips_missing_frames(tmp_path):
    env = RecordingEnv(Ticker(length=4), Video(tmp_path / "v.mp4", episodes=2))
    _play(env, 20)
    assert env.done and env.episodes >= 2
    env.close()
    frames = read_video(tmp_path / "v.mp4")
    assert len(frames) == 2 * 4  # per episode: after the reset and 3 steps; the last step has no frame
    factor = -(-MIN_SIDE // 5)  # the 9x5 frames, enlarged until their short side reaches MIN_SIDE
    assert frames.shape[1:] == (9 * factor, 5 * factor, 3)
    levels = frames.reshape(len(frames), -1).mean(axis=1)
    assert np.allclose(levels, [0, 10, 20, 30] * 2, atol=3)  # the frames in order, through the codec


def test_recording_is_cut_at_max_seconds(tmp_path):
    env = RecordingEnv(Ticker(length=1000), Video(tmp_path / "v.mp4", episodes=1, max_seconds=1.5))
    _play(env, 100)
    assert env.done and env.frames == 15  # 1.5 s at the env's 10 frames per second
    env.close()
    assert len(read_video(tmp_path / "v.mp4")) == 15
