"""Hide-and-seek env: determinism, grab, lock, sight and lidar through walls, phases, shapes, PettingZoo API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Imported first (it picks an offscreen GL backend before mujoco loads); skips without the extras.
hide_and_seek = pytest.importorskip("srl.envs.hide_and_seek", reason="hide-and-seek needs the mujoco and pettingzoo extras")

from srl.envs.hide_and_seek.env import AGENT_FEATURES, OBJECT_FEATURES, SELF_FEATURES  # noqa: E402

STILL = np.array([5, 5, 5, 0, 0])
AGENTS = ("hider_0", "hider_1", "seeker_0", "seeker_1")
#: Corners where idle agents wait out of the way.
CORNERS = {"hider_1": (-2.5, 2.5, 0.0), "seeker_0": (2.5, 2.5, np.pi), "seeker_1": (2.5, -2.5, np.pi)}


def act(**moves: np.ndarray) -> dict[str, np.ndarray]:
    """Every agent still, except the ones named."""
    return {a: moves.get(a, STILL) for a in AGENTS}


def open_floor(**options) -> hide_and_seek.HideAndSeekEnv:
    """One room, one cube, no ramps, no preparation phase: a blank stage for scripted scenes."""
    env = hide_and_seek.parallel_env(**{"n_rooms": 1, "n_boxes": 1, "n_elongated_boxes": 0, "n_ramps": 0,
                                        "prep_fraction": 0.0, **options})
    env.reset(seed=0)
    return env


def box_xy(env) -> np.ndarray:
    return env.data.qpos.reshape(-1, 4)[env.counts.agents, :2].copy()


def hider_xy(env) -> np.ndarray:
    return env.data.qpos.reshape(-1, 4)[0, :2].copy()


def test_same_seed_same_episode():
    runs = []
    for _ in range(2):
        env = hide_and_seek.parallel_env()
        obs, _ = env.reset(seed=7)
        rng = np.random.default_rng(1)
        trace = [obs["hider_0"]["self"].copy(), obs["seeker_1"]["boxes"].copy()]
        for _ in range(40):
            actions = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
            obs, rewards, *_ = env.step(actions)
            trace += [obs["hider_0"]["self"].copy(), obs["seeker_1"]["lidar"].copy(), np.array(list(rewards.values()))]
        runs.append(trace)
    assert all(np.array_equal(a, b) for a, b in zip(*runs))
    other, _ = hide_and_seek.parallel_env().reset(seed=8)
    assert not np.array_equal(other["hider_0"]["self"], runs[0][0])


def test_grabbed_box_follows_without_jumping():
    env = open_floor()
    env.teleport({"hider_0": (-1.0, 0.0, 0.0), "box0": (-0.45, 0.0, 0.3), **CORNERS})
    before = box_xy(env)
    env.step(act(hider_0=np.array([5, 5, 5, 1, 0])))  # grab, no force
    assert env.held[0] == 0
    assert np.abs(box_xy(env) - before).max() < 0.01  # no jump at the moment of grabbing
    def in_hider_frame() -> np.ndarray:  # the weld holds the box fixed in the agent's frame
        yaw = env.data.qpos.reshape(-1, 4)[0, 3]
        dx, dy = box_xy(env) - hider_xy(env)
        return np.array([np.cos(yaw) * dx + np.sin(yaw) * dy, -np.sin(yaw) * dx + np.cos(yaw) * dy])

    held_at = in_hider_frame()
    for _ in range(10):  # hold and pull along -y (sideways: the box is not pushed, only carried)
        env.step(act(hider_0=np.array([5, 0, 5, 1, 0])))
    assert hider_xy(env)[1] < -1.0 and box_xy(env)[1] < -0.8
    assert np.abs(in_hider_frame() - held_at).max() < 0.03
    obs, *_ = env.step(act(hider_0=np.array([5, 5, 5, 0, 0])))  # let go
    assert env.held[0] == -1 and obs["hider_0"]["self"][SELF_FEATURES.index("holding")] == 0
    for _ in range(5):  # the box slides to a stop
        env.step(act())
    dropped = box_xy(env)
    away = np.rint(5 + 5 * (hider_xy(env) - dropped) / np.linalg.norm(hider_xy(env) - dropped)).astype(int)
    for _ in range(5):
        env.step(act(hider_0=np.array([*away, 5, 0, 0])))  # walk away: the box stays
    assert np.linalg.norm(hider_xy(env) - dropped) > 1.0
    assert np.abs(box_xy(env) - dropped).max() < 0.02


def test_locked_box_holds_and_only_its_team_unlocks():
    env = open_floor()
    env.teleport({"hider_0": (-1.0, 0.0, 0.0), "seeker_0": (0.0, 0.0, np.pi), "box0": (-0.5, 0.0, 0.0),
                  "hider_1": CORNERS["hider_1"], "seeker_1": CORNERS["seeker_1"]})
    obs, *_ = env.step(act(hider_0=np.array([5, 5, 5, 0, 1])))  # press lock
    assert env.lock_team[0] == 0
    locked_by = obs["seeker_0"]["boxes"][0]
    assert locked_by[OBJECT_FEATURES.index("locked_by_other_team")] == 1
    assert obs["hider_0"]["boxes"][0][OBJECT_FEATURES.index("locked_by_my_team")] == 1
    start = box_xy(env)
    for _ in range(15):  # both push at full force from either side, one of them trying to grab
        env.step(act(hider_0=np.array([10, 5, 5, 0, 1]), seeker_0=np.array([0, 5, 5, 1, 0])))
    assert np.abs(box_xy(env) - start).max() < 0.01
    assert env.held[2] == -1  # a locked box cannot be grabbed
    env.step(act(seeker_0=np.array([5, 5, 5, 0, 0])))
    env.step(act(seeker_0=np.array([5, 5, 5, 0, 1])))  # the seekers press lock: no effect
    assert env.lock_team[0] == 0
    env.step(act(hider_0=np.array([5, 5, 5, 0, 0])))
    env.step(act(hider_0=np.array([5, 5, 5, 0, 1])))  # the hiders press lock again: unlocked
    assert env.lock_team[0] == -1
    for _ in range(5):
        env.step(act(hider_0=np.array([10, 5, 5, 0, 0])))
    assert box_xy(env)[0] > start[0] + 0.1  # pushable again


def _wall_scene(n_rooms: int):
    """A hider and a seeker 2 m apart facing each other, with a wall midway when n_rooms=2."""
    env = hide_and_seek.parallel_env(n_rooms=n_rooms, n_boxes=0, n_elongated_boxes=0, n_ramps=0, prep_fraction=0.0)
    env.reset(seed=3)
    grid = env.world.grid
    if n_rooms == 2:
        wall = max(env.walls, key=lambda s: s[2] * s[3])  # the longer piece of the one wall
        vertical = wall[2] == 1
        centre = grid.centre(wall[:2], wall[2:])
        across = np.array([1.0, 0.0]) if vertical else np.array([0.0, 1.0])
    else:
        centre, across = np.zeros(2), np.array([1.0, 0.0])
    hider, seeker = centre - across, centre + across
    facing = float(np.arctan2(-across[1], -across[0]))  # the seeker looks at the hider
    along = across[::-1]  # teammates wait beside them, on their own side of the wall
    others = {"hider_1": (*(hider + 0.6 * along), facing), "seeker_1": (*(seeker + 0.6 * along), facing)}
    obs = env.teleport({"hider_0": (*hider, facing + np.pi), "seeker_0": (*seeker, facing), **others})
    return env, obs


def test_walls_block_sight_and_lidar():
    env, obs = _wall_scene(n_rooms=2)
    seeker = obs["seeker_0"]
    hider_row = list(env.others[2]).index(0)
    assert seeker["agents_mask"][hider_row] and not seeker["agents_visible"][hider_row]
    assert not obs["hider_0"]["agents_visible"][list(env.others[0]).index(2)]
    # Lidar ray 0 points along the heading, at the wall ~0.9 m away (its near face), not the hider 2 m away.
    assert 0.7 < seeker["lidar"][0] < 1.0
    # Seekers see no hider: hiders win the step.
    _, rewards, *_ = env.step(act())
    assert rewards["hider_0"] == 1.0 and rewards["seeker_0"] == -1.0

    env, obs = _wall_scene(n_rooms=1)  # the same scene without the wall
    seeker = obs["seeker_0"]
    hider_row = list(env.others[2]).index(0)
    assert seeker["agents_visible"][hider_row]
    assert 1.5 < seeker["lidar"][0] < 2.0  # the lidar reaches the hider's sphere
    _, rewards, *_ = env.step(act())
    assert rewards["hider_0"] == -1.0 and rewards["seeker_0"] == 1.0


def test_vision_cone():
    env = open_floor()
    obs = env.teleport({"seeker_0": (0.0, 0.0, 0.0), "hider_0": (1.0, 0.5, 0.0), "hider_1": (-1.0, 0.0, 0.0),
                        "seeker_1": (0.0, -2.5, 0.0), "box0": (2.5, 2.5, 0.0)})
    rows = list(env.others[2])
    visible = obs["seeker_0"]["agents_visible"]
    assert visible[rows.index(0)]  # 27 degrees off the heading: inside the 135 degree cone
    assert not visible[rows.index(1)]  # straight behind


def test_preparation_phase_freezes_seekers_and_zeroes_rewards():
    env = hide_and_seek.parallel_env(episode_length=20, prep_fraction=0.5, n_rooms=1)
    env.reset(seed=1)
    q = env.data.qpos.reshape(-1, 4)
    start = q[2:4, :2].copy()
    charge = np.array([10, 10, 10, 1, 1])
    hider_start = q[0, :2].copy()
    for t in range(10):
        obs, rewards, *_ = env.step(act(hider_0=charge, seeker_0=charge, seeker_1=charge))
        assert all(r == 0.0 for r in rewards.values())
        assert obs["seeker_0"]["self"][SELF_FEATURES.index("prep")] == float(t + 1 < 10)
    assert np.abs(q[2:4, :2] - start).max() < 0.01
    assert np.abs(q[0, :2] - hider_start).max() > 0.1
    obs, rewards, *_ = env.step(act(seeker_0=charge))
    assert abs(rewards["hider_0"]) == 1.0 and rewards["seeker_0"] == -rewards["hider_0"]
    env.step(act(seeker_0=charge))
    assert np.abs(q[2, :2] - start[0]).max() > 0.1  # seekers move once the phase is over


@pytest.mark.parametrize("counts", [dict(), dict(n_hiders=1, n_seekers=3, n_boxes=(0, 3), n_elongated_boxes=(0, 2),
                                                  n_ramps=(0, 1), max_agents=5, max_boxes=6, max_ramps=2)])
def test_shapes_and_masks(counts):
    env = hide_and_seek.parallel_env(**counts)
    space = env.observation_space(env.possible_agents[0])
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        n_boxes = int(env.active[~env.is_ramp].sum())
        n_ramps = int(env.active[env.is_ramp].sum())
        for _ in range(3):
            for agent, o in obs.items():
                assert space.contains(o), agent
                assert o["self"].shape == (len(SELF_FEATURES),)
                assert o["agents"].shape == (env.max_agents - 1, len(AGENT_FEATURES))
                assert o["boxes"].shape == (env.max_boxes, len(OBJECT_FEATURES))
                assert o["lidar"].shape == (30,) and o["lidar"].dtype == np.float32
                assert o["agents_mask"].sum() == len(env.possible_agents) - 1
                assert o["boxes_mask"].sum() == n_boxes and o["ramps_mask"].sum() == n_ramps
                for name in ("agents", "boxes", "ramps"):
                    mask, visible = o[f"{name}_mask"], o[f"{name}_visible"]
                    assert mask.dtype == np.bool_ and not (visible & ~mask).any()
                    assert not o[name][~mask].any()  # padding rows are zero
            obs, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
        assert env.state().shape == env.state_space.shape


def test_episode_length_and_parallel_api():
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    env = hide_and_seek.parallel_env(episode_length=30)
    parallel_api_test(env, num_cycles=40)
    parallel_seed_test(lambda: hide_and_seek.parallel_env(episode_length=30), num_cycles=20)
    env.reset(seed=0)
    steps = 0
    while env.agents:
        *_, truncations, _ = env.step({a: STILL for a in env.agents})
        steps += 1
    assert steps == 30 and all(truncations.values())


def test_aec_env_builds():
    env = hide_and_seek.env(episode_length=5)
    env.reset(seed=0)
    for agent in env.agent_iter():
        *_, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else STILL)
    assert not env.agents


def test_render_or_clear_message():
    env = hide_and_seek.parallel_env(render_mode="rgb_array", render_size=(64, 64))
    env.reset(seed=0)
    try:
        frame = env.render()
    except RuntimeError as exc:
        assert "MUJOCO_GL" in str(exc)
        pytest.skip(f"no OpenGL backend here: {exc}")
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.std() > 0
    env.close()


def test_speed_benchmark_smoke(tmp_path):
    """The benchmark runs (its figure is never asserted: machines differ)."""
    out = tmp_path / "speed.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "hide_and_seek_speed.py"
    result = subprocess.run([sys.executable, str(script), "--episodes", "2", "--episode-length", "10", "--core", "-1",
                             "--json", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(out.read_text())["steps"] == 20


def test_tool_use_stats_of_a_pushed_and_locked_box():
    """A hider pushes a box and locks it in the preparation phase; a seeker locks the other box after it."""
    env = open_floor(n_boxes=2, prep_fraction=0.5, episode_length=20)
    env.teleport({"hider_0": (-1.0, 0.0, 0.0), "box0": (-0.45, 0.0, 0.0), "seeker_0": (0.95, 0.0, 0.0),
                  "box1": (1.5, 0.0, 0.0), "hider_1": CORNERS["hider_1"], "seeker_1": CORNERS["seeker_1"]})
    start = env.data.qpos.reshape(-1, 4)[4:6, :3].copy()
    for _ in range(6):
        env.step(act(hider_0=np.array([10, 5, 5, 0, 0])))  # push box0 along +x
    env.step(act(hider_0=np.array([5, 5, 5, 0, 1])))  # lock it
    assert env.lock_team[0] == 0
    seeker_rewards, infos = [], {}
    while env.agents:  # the seeker presses lock every other step; it can once the preparation is over
        pressing = np.array([5, 5, 5, 0, env.t % 2])
        _, rewards, *_, infos = env.step(act(seeker_0=pressing))
        if env.t > env.prep_steps:
            seeker_rewards.append(rewards["seeker_0"])
        if env.agents:
            assert not any(infos.values())  # only the last step carries the episode's statistics
    assert env.lock_team.tolist() == [0, 1]
    stats = infos["seeker_1"]["episode_stats"]
    assert all(info["episode_stats"] == stats for info in infos.values())
    moved = np.linalg.norm(env.data.qpos.reshape(-1, 4)[4:6, :3] - start, axis=1)
    assert moved[0] > 0.2 and moved[1] < 0.01
    assert stats["box_move_max_m"] == pytest.approx(moved[0])
    assert stats["box_move_mean_m"] == pytest.approx(moved.mean())
    assert stats["box_move_prep_max_m"] == pytest.approx(moved[0], abs=0.01)  # box0 was locked before the phase ended
    assert (stats["box_locked_prep"], stats["box_locked"]) == (1.0, 2.0)
    # The seeker's five presses after the preparation: lock, unlock, lock, unlock, lock.
    assert (stats["locks_by_hiders"], stats["locks_by_seekers"]) == (1.0, 3.0)
    assert stats["seeker_on_box_frac"] == 0.0  # beside a box is not on it
    assert stats["hider_seen_frac"] == pytest.approx(np.mean(np.array(seeker_rewards) > 0))
    assert not any(key.startswith("ramp") for key in stats)  # no ramps in this episode
    env.reset(seed=1)  # the next episode counts from zero
    while env.agents:
        *_, infos = env.step(act())
    stats = infos["hider_0"]["episode_stats"]
    assert (stats["box_locked"], stats["locks_by_hiders"], stats["locks_by_seekers"]) == (0.0, 0.0, 0.0)
    assert stats["box_move_max_m"] < 0.01


def test_tool_use_stats_of_a_seeker_running_up_a_ramp():
    """A hider locks a ramp; a seeker runs up it and off its high end."""
    env = open_floor(n_boxes=0, n_ramps=1, episode_length=20)
    env.teleport({"hider_0": (0.0, 0.85, -np.pi / 2), "ramp0": (0.0, 0.3, 0.0), "seeker_0": (-0.9, 0.3, 0.0),
                  "hider_1": CORNERS["hider_1"], "seeker_1": CORNERS["seeker_1"]})
    env.step(act(hider_0=np.array([5, 5, 5, 0, 1])))
    heights = []
    while env.agents:
        *_, infos = env.step(act(seeker_0=np.array([10, 5, 5, 0, 0])))
        heights.append(env.data.qpos.reshape(-1, 4)[2, 2])
    stats = infos["hider_0"]["episode_stats"]
    assert max(heights) > 0.5  # it reached the top
    assert 0.1 < stats["seeker_on_ramp_frac"] < 0.9  # up the slope, then on the floor beyond
    assert stats["ramp_locked"] == 1.0 and stats["ramp_move_max_m"] < 0.01 and stats["locks_by_hiders"] == 1.0
    assert "box_locked" not in stats and "seeker_on_box_frac" not in stats
