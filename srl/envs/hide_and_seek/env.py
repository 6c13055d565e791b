"""Hide-and-seek as a PettingZoo ParallelEnv on the official MuJoCo bindings.

Hiders and seekers (sphere agents) share a walled floor with boxes and ramps. Hiders
score +1 per step while no seeker sees any hider, -1 otherwise; seekers the opposite;
leaving the floor costs 10. The first `prep_fraction` of the episode is a preparation
phase: seekers are frozen in place and nobody is rewarded.

Speed: the model is compiled once per env (see `model.py`); a reset moves walls and
bodies and touches no XML. A step is 15 `mj_step` substeps in one call, one
`mj_multiRay` per agent that casts its lidar and its sight lines together, and numpy
over all agents at once for observations.

Actions per agent, MultiDiscrete([11, 11, 11, 2, 2]): force along world x and y and
torque about z (bin 5 is zero), grab, lock.

* grab: while 1, the agent holds the closest object it sees within reach (a weld set
  from the current relative pose, so nothing jumps); releasing the action lets go.
  Locked objects cannot be grabbed.
* lock: pressing it (0 -> 1; the last lock action is part of the observation) locks the
  closest object the agent sees within reach for its team, or unlocks it when its own
  team locked it. An object locked by the other team stays locked. Locking drops
  every grab on the object and welds it to the world where it is.

"Sees" means inside the agent's vision cone (135 degrees about its heading) with a
clear line of sight from the agent's centre to the target's centre.

The episode's last step gives, in every agent's info under "episode_stats", the tool-use
statistics of `stats.ToolUse` (how far boxes and ramps moved, how many were locked and by
whom, how often a seeker stood on a ramp or a box or saw a hider).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from pettingzoo import ParallelEnv

from srl.api.env import EPISODE_STATS
from srl.envs.hide_and_seek import layout as worldgen
from srl.envs.hide_and_seek.model import RAY_GROUPS, Counts, Grid, WorldSpec, build, weld_relpose
from srl.envs.hide_and_seek.stats import ToolUse

#: Action bins per movement axis; the middle bin is zero force.
BINS = 11
NOOP = np.array([BINS // 2, BINS // 2, BINS // 2, 0, 0], np.int64)
HIDER, SEEKER = 0, 1
UNLOCKED = -1
#: Where unused objects wait, far outside the arena (each at its own x).
PARK = np.array([50.0, 50.0])

SELF_FEATURES = ("x", "y", "z", "vx", "vy", "vz", "cos", "sin", "wz", "hider", "seeker", "prep", "time", "holding",
                 "lock_pressed")
AGENT_FEATURES = ("x", "y", "z", "dx", "dy", "dz", "vx", "vy", "vz", "cos", "sin", "wz", "hider", "seeker")
OBJECT_FEATURES = ("x", "y", "z", "dx", "dy", "dz", "vx", "vy", "vz", "cos", "sin", "wz", "size_x", "size_y", "size_z",
                   "locked_by_my_team", "locked_by_other_team", "held_by_me", "held")


def _span(value: int | tuple[int, int]) -> tuple[int, int]:
    """An exact count or an inclusive (low, high) range drawn per episode."""
    low, high = (value, value) if isinstance(value, (int, np.integer)) else (int(value[0]), int(value[1]))
    if not 0 <= low <= high:
        raise ValueError(f"bad count {value!r}: want n >= 0 or (low, high) with 0 <= low <= high")
    return low, high


class HideAndSeekEnv(ParallelEnv):
    """Hiders vs seekers; agents `hider_i` then `seeker_i`, all with the same spaces.

    Observation per agent (float32 unless noted; feature orders in SELF_FEATURES,
    AGENT_FEATURES, OBJECT_FEATURES; positions and velocities in world coordinates,
    `d*` the offset from the observing agent):

    * `self` [15]: own position, velocity, heading (cos, sin), yaw rate, team, phase flag,
      elapsed fraction, whether it holds something, its last lock action.
    * `agents` [max_agents - 1, 14], `boxes` [max_boxes, 19], `ramps` [max_ramps, 19]:
      entity lists; each has `<name>_mask` (bool: the slot holds an entity, padding rows
      are zero) and `<name>_visible` (bool: the agent sees it now; a subset of the mask).
      Features of unseen entities are still filled in: a policy that should not peek
      masks them with `_visible`, a centralised critic may use them.
    * `lidar` [n_lidar]: distances along rays spread evenly around the heading, capped at
      `lidar_range`.

    Sizes, masses, forces and physics live in `world` (a WorldSpec, or a dict of its
    fields, e.g. `world={"max_force": 80.0}`). Counts may be ranges drawn per episode (`n_boxes=(1, 4)`); slots are sized for the
    largest count or the `max_*` options (set those to share shapes across settings).
    `state()` is a team-neutral global state for centralised critics.
    """

    metadata = {"name": "hide_and_seek_v0", "render_modes": ["rgb_array"], "is_parallelizable": True,
                "render_fps": 1 / (15 * 0.005)}

    def __init__(self, n_hiders: int = 2, n_seekers: int = 2, n_boxes: int | tuple[int, int] = 2,
                 n_elongated_boxes: int | tuple[int, int] = 1, n_ramps: int | tuple[int, int] = 2,
                 n_rooms: int | None = None, door_cells: int = 2, episode_length: int = 240,
                 prep_fraction: float = 0.4, substeps: int = 15, n_lidar: int = 30, lidar_range: float = 6.0,
                 vision_degrees: float = 135.0, reach: float = 0.6, out_of_bounds_penalty: float = 10.0,
                 max_agents: int | None = None, max_boxes: int | None = None, max_ramps: int | None = None,
                 floor_size: float = 6.0, grid_cells: int = 30, render_mode: str | None = None,
                 render_size: tuple[int, int] = (480, 480), camera: str = "angled",
                 world: WorldSpec | dict[str, Any] | None = None) -> None:
        if not (1 <= n_hiders and 1 <= n_seekers):
            raise ValueError("need at least one hider and one seeker")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode {render_mode!r}: supported are {self.metadata['render_modes']}")
        if n_rooms is not None and n_rooms not in (1, 2, 3, 4):
            raise ValueError("n_rooms is 1, 2, 3, 4 or None (random per episode)")
        if not isinstance(world, WorldSpec):  # None, or overrides from a config file
            world = WorldSpec(grid=Grid(floor_size, grid_cells), **(world or {}))
        self.world = world
        self.box_span, self.elongated_span, self.ramp_span = _span(n_boxes), _span(n_elongated_boxes), _span(n_ramps)
        self.counts = Counts(n_hiders, n_seekers, self.box_span[1], self.elongated_span[1], self.ramp_span[1])
        self.max_agents = max_agents or self.counts.agents
        self.max_boxes = self.counts.boxes + self.counts.elongated if max_boxes is None else max_boxes
        self.max_ramps = self.counts.ramps if max_ramps is None else max_ramps
        if (self.max_agents < self.counts.agents or self.max_boxes < self.counts.boxes + self.counts.elongated
                or self.max_ramps < self.counts.ramps):
            raise ValueError("max_agents / max_boxes / max_ramps must hold at least the largest counts")
        self.n_rooms, self.door_cells = n_rooms, door_cells
        self.episode_length, self.substeps = episode_length, substeps
        self.prep_steps = int(round(prep_fraction * episode_length))
        self.n_lidar, self.lidar_range = n_lidar, lidar_range
        self.cone_cos = float(np.cos(np.radians(vision_degrees) / 2))
        self.reach, self.out_of_bounds_penalty = reach, out_of_bounds_penalty
        self.render_mode, self.render_size, self.camera = render_mode, render_size, camera
        self.metadata = {**self.metadata, "render_fps": 1 / (substeps * self.world.timestep)}

        self.possible_agents = [f"hider_{i}" for i in range(n_hiders)] + [f"seeker_{i}" for i in range(n_seekers)]
        self.agents: list[str] = []
        self.model, self.h = build(self.world, self.counts)
        self.data = mujoco.MjData(self.model)
        self._renderer: Any = None
        self._rng = np.random.default_rng()
        self._init_static()
        self._init_spaces()

    # ----------------------------------------------------------------- set-up
    def _init_static(self) -> None:
        """Index arrays and buffers that stay fixed for the env's lifetime."""
        c, h = self.counts, self.h
        na, no = c.agents, c.objects
        self.team = np.array([HIDER] * c.hiders + [SEEKER] * c.seekers)
        self.team_flags = np.eye(2, dtype=np.float64)[self.team]
        n_box_model = c.boxes + c.elongated
        self.is_ramp = np.arange(no) >= n_box_model
        # Resting height of each body's qpos z: agents' and boxes' origins are their centres, ramps' their bases.
        self.rest_z = np.concatenate([np.full(na, self.world.agent_radius), h.object_sizes[:, 2] / 2])
        self.rest_z[na:][self.is_ramp] = 0.0
        # Rows of the other agents that agent i sees, padded with index `na + no` (the zero row of the body table).
        others = np.full((na, self.max_agents - 1), na + no)
        for i in range(na):
            rest = [j for j in range(na) if j != i]
            others[i, :len(rest)] = rest
        self.others = others
        self.object_sizes_ext = np.vstack([h.object_sizes, np.zeros((1, 3))])
        angles = 2 * np.pi * np.arange(self.n_lidar) / self.n_lidar
        self.lidar_angles = angles
        self._others_exists = others < na
        self._others_team = self.team_flags[np.minimum(others, na - 1)] * self._others_exists[..., None]
        self._diag = (np.arange(na), np.arange(na))
        self._hiders, self._seekers = np.flatnonzero(self.team == HIDER), np.flatnonzero(self.team == SEEKER)
        # Ray buffers: per agent, its sight lines (one per agent and object) then its lidar.
        n_rays = na + no + self.n_lidar
        self._ray_vec = np.zeros((na, n_rays, 3))
        self._ray_geom = np.zeros((na, n_rays), np.int32)
        self._ray_dist = np.zeros((na, n_rays))
        self._target_geoms = np.concatenate([h.agent_geoms, h.object_geoms])
        self._agent_body_ids = [int(b) for b in h.agent_bodies]
        self.tool_use = ToolUse(h.object_sizes, self.is_ramp, self._seekers, self.world.agent_radius)

    def _init_spaces(self) -> None:
        f32 = functools.partial(gym.spaces.Box, -np.inf, np.inf, dtype=np.float32)
        mask = lambda n: gym.spaces.Box(0, 1, (n,), dtype=np.bool_)  # noqa: E731
        spaces: dict[str, gym.Space] = {"self": f32((len(SELF_FEATURES),))}
        for name, rows, features in (("agents", self.max_agents - 1, AGENT_FEATURES),
                                     ("boxes", self.max_boxes, OBJECT_FEATURES),
                                     ("ramps", self.max_ramps, OBJECT_FEATURES)):
            spaces[name] = f32((rows, len(features)))
            spaces[f"{name}_mask"] = mask(rows)
            spaces[f"{name}_visible"] = mask(rows)
        if self.n_lidar:
            spaces["lidar"] = gym.spaces.Box(0, self.lidar_range, (self.n_lidar,), dtype=np.float32)
        self._observation_space = gym.spaces.Dict(spaces)
        self._action_space = gym.spaces.MultiDiscrete([BINS, BINS, BINS, 2, 2])
        self.observation_spaces = {a: self._observation_space for a in self.possible_agents}
        self.action_spaces = {a: self._action_space for a in self.possible_agents}
        state_size = self.max_agents * 12 + (self.max_boxes + self.max_ramps) * 16 + 2
        self.state_space = f32((state_size,))

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._observation_space

    def action_space(self, agent: str) -> gym.spaces.MultiDiscrete:
        return self._action_space

    # ------------------------------------------------------------------ reset
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        rng, c, spec = self._rng, self.counts, self.world
        n_box = int(rng.integers(self.box_span[0], self.box_span[1] + 1))
        n_long = int(rng.integers(self.elongated_span[0], self.elongated_span[1] + 1))
        n_ramp = int(rng.integers(self.ramp_span[0], self.ramp_span[1] + 1))
        active = np.zeros(c.objects, bool)
        active[:n_box] = True
        active[c.boxes:c.boxes + n_long] = True
        active[c.boxes + c.elongated:c.boxes + c.elongated + n_ramp] = True
        self.active = active
        self._episode_rows()
        d = 2 * spec.agent_radius
        length, width, _ = spec.ramp_size
        footprints = ([(d, d, False)] * c.agents + [(spec.box_size, spec.box_size, False)] * n_box
                      + [(spec.elongated[0], spec.elongated[1], True)] * n_long + [(length, width, True)] * n_ramp)
        plan = worldgen.generate(rng, spec.grid, footprints, self.n_rooms, self.door_cells)

        m, data = self.model, self.data
        mujoco.mj_resetData(m, data)
        self._set_walls(plan.walls)
        q = data.qpos.reshape(-1, 4)
        used = np.concatenate([np.ones(c.agents, bool), active])
        q[used, :2], q[used, 3] = plan.poses[:, :2], plan.poses[:, 2]
        parked = np.flatnonzero(~used)
        q[parked, :2] = PARK + np.arange(parked.size)[:, None] * [2.0, 0.0]
        q[:, 2] = self.rest_z
        geoms = self.h.object_geoms
        m.geom_contype[geoms] = m.geom_conaffinity[geoms] = active
        m.geom_group[geoms] = np.where(active, 0, 3)
        mujoco.mj_forward(m, data)

        data.eq_active[:] = 0
        for j in np.flatnonzero(~active):  # parked objects hang where they are
            self._weld(self.h.lock[j], self.h.object_bodies[j], 0)
        if self.prep_steps > 0:
            for i in np.flatnonzero(self.team == SEEKER):
                self._weld(self.h.freeze[i], self.h.agent_bodies[i], 0)
        self.lock_team = np.full(c.objects, UNLOCKED)
        self.held = np.full(c.agents, -1)
        self.lock_pressed = np.zeros(c.agents, bool)
        self.t = 0
        self.n_rooms_now = plan.n_rooms
        #: This episode's inner wall segments in cells: start x, start y, extent x, extent y.
        self.walls = plan.walls
        self.agents = list(self.possible_agents)
        self.tool_use.start(self._object_pos(), self.active)
        if self.prep_steps == 0:
            self.tool_use.prep_over(self._object_pos(), self.lock_team != UNLOCKED)
        obs = self._observe()
        return obs, {a: {} for a in self.agents}

    def teleport(self, poses: dict[str, tuple[float, float, float]]) -> dict[str, dict[str, np.ndarray]]:
        """Put bodies at (x, y, yaw), at rest on the floor, and return the fresh observations.

        Keys are agent ids or object names ("box0", "ramp1": boxes count cubes first, then
        elongated ones). For scripted scenes in tests and demos, right after a reset: a seeker
        frozen for the preparation phase is frozen where it is put; other welds already active
        keep their old relative poses. Objects' movement (`tool_use`) counts from here.
        """
        q, v = self.data.qpos.reshape(-1, 4), self.data.qvel.reshape(-1, 4)
        names = {a: i for i, a in enumerate(self.possible_agents)}
        names.update({mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, b): self.counts.agents + j
                      for j, b in enumerate(self.h.object_bodies)})
        for name, (x, y, yaw) in poses.items():
            row = names[name]
            if row >= self.counts.agents and not self.active[row - self.counts.agents]:
                raise ValueError(f"{name} is not in this episode")
            q[row] = x, y, self.rest_z[row], yaw
            v[row] = 0.0
        mujoco.mj_forward(self.model, self.data)
        for i in range(self.counts.agents):
            if self.possible_agents[i] in poses and self.data.eq_active[self.h.freeze[i]]:
                self._weld(self.h.freeze[i], self.h.agent_bodies[i], 0)
        self.tool_use.placed(self._object_pos())
        return self._observe()

    def _set_walls(self, segments: np.ndarray) -> None:
        """Move the inner wall pool onto this episode's segments; park the rest below the floor."""
        m, h, grid = self.model, self.h, self.world.grid
        k = len(segments)
        if k > len(h.wall_bodies):
            raise RuntimeError(f"layout has {k} wall segments; the model holds {len(h.wall_bodies)}")
        half = np.zeros((len(h.wall_bodies), 3))
        half[:] = grid.cell / 2, grid.cell / 2, self.world.wall_height / 2
        pos = np.zeros((len(h.wall_bodies), 3))
        pos[:, 2] = -10.0
        if k:
            half[:k, :2] = segments[:, 2:] * grid.cell / 2
            pos[:k, :2] = grid.centre(segments[:, :2], segments[:, 2:])
            pos[:k, 2] = self.world.wall_height / 2
        on = np.arange(len(h.wall_bodies)) < k
        m.body_pos[h.wall_bodies] = pos
        m.geom_size[h.wall_geoms] = half
        m.geom_aabb[h.wall_geoms] = np.hstack([np.zeros_like(half), half])
        m.bvh_aabb[m.body_bvhadr[h.wall_bodies]] = np.hstack([np.zeros_like(half), half])
        m.geom_rbound[h.wall_geoms] = np.linalg.norm(half, axis=1)
        m.geom_contype[h.wall_geoms] = m.geom_conaffinity[h.wall_geoms] = on
        m.geom_group[h.wall_geoms] = np.where(on, 0, 3)

    def _weld(self, eq: int, body1: int, body2: int) -> None:
        """Activate a weld that holds the two bodies in their current relative pose."""
        self.model.eq_data[eq, :10] = weld_relpose(self.data, body1, body2)
        self.data.eq_active[eq] = 1

    # ------------------------------------------------------------------- step
    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset()")
        c, data = self.counts, self.data
        act = np.array([np.asarray(actions.get(a, NOOP)).reshape(5) for a in self.possible_agents], np.int64)
        prep = self.t < self.prep_steps
        if prep:
            act[self.team == SEEKER] = NOOP
        elif self.t == self.prep_steps:
            data.eq_active[self.h.freeze] = 0
        self._apply_locks(act[:, 4] == 1)
        self._apply_grabs(act[:, 3] == 1)
        data.ctrl[:] = ((act[:, :3] - BINS // 2) / (BINS // 2)).ravel()
        mujoco.mj_step(self.model, data, nstep=self.substeps)
        # mj_step leaves body poses one substep behind qpos; sight lines and welds need them current.
        mujoco.mj_kinematics(self.model, data)
        self.t += 1

        obs = self._observe()
        if self.t <= self.prep_steps:
            reward = np.zeros(c.agents)
            if self.t == self.prep_steps:
                self.tool_use.prep_over(self._object_pos(), self.lock_team != UNLOCKED)
        else:
            seen = self._sees[self._seekers][:, self._hiders].any()
            reward = np.where(self.team == HIDER, -1.0, 1.0) * (1.0 if seen else -1.0)
            xy = data.qpos.reshape(-1, 4)[:c.agents, :2]
            outside = (np.abs(xy) > self.world.grid.size / 2).any(axis=1)
            reward -= self.out_of_bounds_penalty * outside
            self.tool_use.seeking_step(data.qpos, bool(seen))
        done = self.t >= self.episode_length
        agents = self.possible_agents
        rewards = dict(zip(agents, reward.tolist()))
        terminations = {a: False for a in agents}
        truncations = {a: done for a in agents}
        infos = {a: {} for a in agents}
        if done:
            self.agents = []
            stats = self.tool_use.result(self._object_pos(), self.lock_team != UNLOCKED)
            infos = {a: {EPISODE_STATS: dict(stats)} for a in agents}
        return obs, rewards, terminations, truncations, infos

    def _closest_in_reach(self, i: int, allowed: np.ndarray) -> int:
        """The closest object agent i sees within reach among `allowed` ones, or -1."""
        dist = np.where(allowed & (self._object_dist[i] <= self.reach), self._object_dist[i], np.inf)
        j = int(np.argmin(dist))
        return j if np.isfinite(dist[j]) else -1

    def _apply_locks(self, lock: np.ndarray) -> None:
        pressed, self.lock_pressed = lock & ~self.lock_pressed, lock
        data, h = self.data, self.h
        for i in np.flatnonzero(pressed):
            j = self._closest_in_reach(i, self.active)
            if j < 0:
                continue
            if self.lock_team[j] == UNLOCKED:
                for holder in np.flatnonzero(self.held == j):
                    data.eq_active[h.grab[holder, j]] = 0
                    self.held[holder] = -1
                data.qvel[4 * (self.counts.agents + j):4 * (self.counts.agents + j + 1)] = 0.0
                self._weld(h.lock[j], h.object_bodies[j], 0)
                self.lock_team[j] = self.team[i]
                self.tool_use.locked(by_seeker=self.team[i] == SEEKER)
            elif self.lock_team[j] == self.team[i]:
                data.eq_active[h.lock[j]] = 0
                self.lock_team[j] = UNLOCKED

    def _apply_grabs(self, grab: np.ndarray) -> None:
        data, h = self.data, self.h
        for i in np.flatnonzero(~grab & (self.held >= 0)):
            data.eq_active[h.grab[i, self.held[i]]] = 0
            self.held[i] = -1
        for i in np.flatnonzero(grab & (self.held < 0)):
            j = self._closest_in_reach(i, self.active & (self.lock_team == UNLOCKED))
            if j >= 0:
                self._weld(h.grab[i, j], h.agent_bodies[i], h.object_bodies[j])
                self.held[i] = j

    def _object_pos(self) -> np.ndarray:
        """Every object's position [objects, 3]: boxes' centres, ramps' bases."""
        return self.data.qpos.reshape(-1, 4)[self.counts.agents:, :3].copy()

    # ------------------------------------------------------------ observation
    def _episode_rows(self) -> None:
        """Per-episode gather indices: which model objects fill the box and ramp slots (active ones first)."""
        no = self.counts.objects
        rows = []
        for kind, size in ((~self.is_ramp, self.max_boxes), (self.is_ramp, self.max_ramps)):
            idx = np.full(size, no)  # `no` points at a zero row
            found = np.flatnonzero(kind & self.active)
            idx[:found.size] = found
            rows.append(idx)
        self._box_rows, self._ramp_rows = rows
        self._object_rows = np.concatenate(rows)
        self._object_exists = self._object_rows < no
        self._object_row_sizes = self.object_sizes_ext[self._object_rows]

    def _cast(self) -> np.ndarray:
        """Cast every agent's sight lines (to every agent and object centre) and lidar, one mj_multiRay per agent.

        Sets `_sees` [agents, bodies + 1] (sight: vision cone and a clear line; the last
        column, for padding slots, is False) and `_object_dist` [agents, objects] (ray
        distance to each seen object's surface, inf if unseen); returns lidar [agents, n_lidar].
        """
        m, data = self.model, self.data
        na, nb = self.counts.agents, self.counts.agents + self.counts.objects
        centres = data.geom_xpos[self._target_geoms]
        origin = centres[:na]
        yaw = data.qpos[3:4 * na:4]
        delta = centres[None, :, :] - origin[:, None, :]
        delta[self._diag] = (0.0, 0.0, 1.0)  # an agent's ray at itself: any direction, ignored
        flat = np.hypot(delta[..., 0], delta[..., 1])
        vec = self._ray_vec
        vec[:, :nb] = delta / np.sqrt(flat * flat + delta[..., 2] ** 2)[..., None]
        lidar_yaw = yaw[:, None] + self.lidar_angles
        vec[:, nb:, 0], vec[:, nb:, 1] = np.cos(lidar_yaw), np.sin(lidar_yaw)
        geom, dist = self._ray_geom, self._ray_dist
        for i in range(na):
            mujoco.mj_multiRay(m, data, origin[i], vec[i].ravel(), RAY_GROUPS, 1, self._agent_body_ids[i],
                               geom[i], dist[i], None, vec.shape[1], 100.0)
        in_cone = delta[..., 0] * np.cos(yaw)[:, None] + delta[..., 1] * np.sin(yaw)[:, None] >= self.cone_cos * flat
        sees = self._sees = np.zeros((na, nb + 1), bool)
        sees[:, :nb] = (geom[:, :nb] == self._target_geoms) & in_cone
        sees[self._diag] = False
        self._object_dist = np.where(sees[:, na:nb], dist[:, na:nb], np.inf)
        lidar = dist[:, nb:]
        return np.where(lidar < 0, self.lidar_range, np.minimum(lidar, self.lidar_range))

    def _observe(self) -> dict[str, dict[str, np.ndarray]]:
        """Every agent's observation, computed for all agents at once; each agent's arrays are rows of shared batches."""
        c, data = self.counts, self.data
        na, no = c.agents, c.objects
        lidar = self._cast()
        q, v = data.qpos.reshape(-1, 4), data.qvel.reshape(-1, 4)
        # World features of every body [x y z vx vy vz cos sin wz], plus a zero row that padding slots gather.
        base = self._base = np.zeros((na + no + 1, 9))
        base[:-1, 0:3], base[:-1, 3:6], base[:-1, 8] = q[:, :3], v[:, :3], v[:, 3]
        base[:-1, 6], base[:-1, 7] = np.cos(q[:, 3]), np.sin(q[:, 3])
        me = base[:na, None, 0:3]

        own = np.empty((na, len(SELF_FEATURES)), np.float32)
        own[:, 0:9], own[:, 9:11] = base[:na], self.team_flags
        own[:, 11], own[:, 12] = float(self.t < self.prep_steps), self.t / self.episode_length
        own[:, 13], own[:, 14] = self.held >= 0, self.lock_pressed

        rows = self.others
        gathered = base[rows]
        agents = np.empty((na, rows.shape[1], len(AGENT_FEATURES)), np.float32)
        agents[..., 0:3], agents[..., 6:12], agents[..., 12:14] = gathered[..., 0:3], gathered[..., 3:9], self._others_team
        agents[..., 3:6] = (gathered[..., 0:3] - me) * self._others_exists[..., None]

        idx = self._object_rows
        gathered = base[idx + na]
        objects = np.empty((na, idx.size, len(OBJECT_FEATURES)), np.float32)
        objects[..., 0:3], objects[..., 6:12] = gathered[:, 0:3], gathered[:, 3:9]
        objects[..., 12:15] = self._object_row_sizes
        objects[..., 3:6] = (gathered[:, 0:3] - me) * self._object_exists[:, None]
        lock = np.append(self.lock_team, UNLOCKED)[idx]
        mine = lock == self.team[:, None]
        objects[..., 15], objects[..., 16] = mine, (lock != UNLOCKED) & ~mine
        held_by_me = self.held[:, None] == idx
        objects[..., 17], objects[..., 18] = held_by_me, held_by_me.any(axis=0)
        visible = self._sees[:, idx + na]
        exists = np.tile(self._object_exists, (na, 1))
        split = self.max_boxes
        batch = {"self": own, "agents": agents, "agents_mask": self._others_exists.copy(),
                 "agents_visible": np.take_along_axis(self._sees, rows, axis=1),
                 "boxes": objects[:, :split], "boxes_mask": exists[:, :split], "boxes_visible": visible[:, :split],
                 "ramps": objects[:, split:], "ramps_mask": exists[:, split:], "ramps_visible": visible[:, split:]}
        if self.n_lidar:
            batch["lidar"] = lidar.astype(np.float32)
        names, arrays = list(batch), list(batch.values())
        return {a: dict(zip(names, [x[i] for x in arrays])) for i, a in enumerate(self.possible_agents)}

    def state(self) -> np.ndarray:
        """Everything, team-neutral, for a centralised critic.

        Per agent slot (padded to max_agents): world features, team flags, exists. Per box
        and ramp slot: world features, size, locked by hiders, locked by seekers, held,
        exists. Then the preparation flag and the elapsed fraction of the episode.
        """
        c, na = self.counts, self.counts.agents
        base = self._base
        agents = np.zeros((self.max_agents, 9 + 3), np.float32)
        agents[:na] = np.hstack([base[:na], self.team_flags, np.ones((na, 1))])
        parts = [agents.ravel()]
        held = np.zeros(c.objects + 1, bool)
        held[self.held[self.held >= 0]] = True
        lock = np.append(self.lock_team, UNLOCKED)[:, None]
        for idx in (self._box_rows, self._ramp_rows):
            parts.append(np.hstack([base[idx + na], self.object_sizes_ext[idx], lock[idx] == HIDER, lock[idx] == SEEKER,
                                    held[idx, None], (idx < c.objects)[:, None]]).ravel())
        parts.append([float(self.t < self.prep_steps), self.t / self.episode_length])
        return np.concatenate(parts).astype(np.float32)

    # ---------------------------------------------------------------- render
    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode='rgb_array'")
            return None
        if self._renderer is None:
            height, width = self.render_size
            frame = self.model.vis.global_
            frame.offwidth, frame.offheight = max(frame.offwidth, width), max(frame.offheight, height)
            try:
                self._renderer = mujoco.Renderer(self.model, height, width)
            except Exception as exc:  # no GL backend: say how to get one
                raise RuntimeError(
                    "hide-and-seek rgb_array rendering needs an OpenGL backend for MuJoCo; set MUJOCO_GL=egl "
                    "(GPU or Mesa EGL) or MUJOCO_GL=osmesa (CPU, needs libOSMesa) before mujoco is imported "
                    f"({type(exc).__name__}: {exc})") from None
        tint = {UNLOCKED: None, HIDER: (0.55, 0.65, 1.0, 1.0), SEEKER: (1.0, 0.6, 0.55, 1.0)}
        rgba = self.model.geom_rgba[self.h.object_geoms]
        saved = rgba.copy()
        for j, team in enumerate(self.lock_team):
            if tint[int(team)] is not None:
                self.model.geom_rgba[self.h.object_geoms[j]] = tint[int(team)]
        self._renderer.update_scene(self.data, camera=self.camera)
        self.model.geom_rgba[self.h.object_geoms] = saved
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
