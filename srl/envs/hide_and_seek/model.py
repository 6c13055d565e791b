"""The MuJoCo model: generated MJCF for the largest world an env can hold, compiled once.

Every movable body (agents, boxes, ramps) sits at the origin in its reference pose with
four joints: slide x, slide y, slide z, hinge z. So `qpos.reshape(-1, 4)` reads
[x, y, z, yaw] per body and `qvel.reshape(-1, 4)` its velocities, with no per-body
lookups. Agents come first, then boxes, then ramps.

Nothing in the model depends on an episode's layout: inner walls are a fixed pool of
static bodies that a reset moves, resizes or parks (no contacts, hidden, ignored by
rays), and objects an episode does not use are parked out of the arena, held by their
lock weld. Equality constraints, all inactive at first: one weld per (agent, object)
for grabbing, one weld to the world per object for locking, one per agent for
freezing seekers during the preparation phase.

Geom groups: 0 is what rays see (walls, agents, objects), 1 the floor (rays ignore it,
so lidar and sight lines stay horizontal without hitting it), 3 parked things.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from srl.envs.hide_and_seek.layout import Grid

RAY_GROUP = 0
FLOOR_GROUP = 1
PARKED_GROUP = 3
#: Rays look at group 0 only.
RAY_GROUPS = np.array([1, 0, 0, 0, 0, 0], np.uint8)

HIDER_RGBA = "0.2 0.45 0.95 1"
SEEKER_RGBA = "0.95 0.3 0.25 1"


@dataclass(frozen=True)
class WorldSpec:
    """Sizes, masses and physics of the world (SI units)."""

    grid: Grid = field(default_factory=Grid)
    wall_height: float = 0.5
    #: Inner wall segments the model can hold (a 4-room layout uses at most 6).
    wall_pool: int = 8
    agent_radius: float = 0.15
    box_size: float = 0.5
    #: Elongated boxes: length and width as multiples of `box_size` (the height stays).
    elongated_scale: tuple[float, float] = (3.3, 0.3)
    #: Ramp: length along the slope, width, height of the high end.
    ramp_size: tuple[float, float, float] = (1.0, 0.6, 0.5)
    agent_mass: float = 1.0
    box_mass: float = 1.0
    ramp_mass: float = 1.0
    #: Force at full action on the x/y slides, torque on the yaw hinge.
    max_force: float = 60.0
    max_torque: float = 0.3
    #: Joint damping of agents' x/y slides and yaw hinge: caps their speed.
    slide_damping: float = 15.0
    hinge_damping: float = 0.05
    friction: float = 0.2
    gravity: float = -50.0
    timestep: float = 0.005

    @property
    def elongated(self) -> tuple[float, float, float]:
        return (self.box_size * self.elongated_scale[0], self.box_size * self.elongated_scale[1], self.box_size)


@dataclass(frozen=True)
class Counts:
    """How many of each thing the model holds (the most an episode can use)."""

    hiders: int
    seekers: int
    boxes: int
    elongated: int
    ramps: int

    @property
    def agents(self) -> int:
        return self.hiders + self.seekers

    @property
    def objects(self) -> int:
        return self.boxes + self.elongated + self.ramps


def _vec(*values: float) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def _movable(name: str, geom: str, damping: tuple[float, float] = (0.0, 0.0)) -> str:
    """A body at the origin with slide x/y/z and hinge z joints (in that order)."""
    slide, hinge = damping
    joints = "".join(f'<joint name="{name}_{axis}" type="slide" axis="{a}" damping="{slide if axis != "z" else 0}"/>'
                     for axis, a in (("x", "1 0 0"), ("y", "0 1 0"), ("z", "0 0 1")))
    joints += f'<joint name="{name}_yaw" type="hinge" axis="0 0 1" damping="{hinge}"/>'
    return f'<body name="{name}">{joints}{geom}</body>'


def ramp_mesh(spec: WorldSpec) -> np.ndarray:
    """Vertices of the wedge [6, 3]: the slope rises along +x, bottom face at z = 0."""
    length, width, height = spec.ramp_size
    x0, x1, y = -length / 2, length / 2, width / 2
    return np.array([[x0, -y, 0], [x0, y, 0], [x1, -y, 0], [x1, y, 0], [x1, -y, height], [x1, y, height]])


def mjcf(spec: WorldSpec, counts: Counts) -> str:
    """The MJCF text of the whole world."""
    half = spec.grid.size / 2
    cell, h = spec.grid.cell, spec.wall_height / 2
    # The border ring of cells, as four walls.
    outer = [(0, half - cell / 2, half, cell / 2), (0, -half + cell / 2, half, cell / 2),
             (half - cell / 2, 0, cell / 2, half), (-half + cell / 2, 0, cell / 2, half)]
    walls = "".join(f'<geom name="outer{i}" type="box" pos="{_vec(x, y, h)}" size="{_vec(sx, sy, h)}" class="wall"/>'
                    for i, (x, y, sx, sy) in enumerate(outer))
    walls += "".join(f'<body name="wall{i}" pos="0 0 -10"><geom name="wall{i}" type="box" '
                     f'size="{_vec(cell / 2, cell / 2, h)}" class="wall"/></body>' for i in range(spec.wall_pool))
    bodies = []
    for i in range(counts.agents):
        rgba = HIDER_RGBA if i < counts.hiders else SEEKER_RGBA
        geom = (f'<geom name="agent{i}" type="sphere" size="{spec.agent_radius}" mass="{spec.agent_mass}" rgba="{rgba}"/>'
                f'<geom name="agent{i}_nose" type="sphere" size="{spec.agent_radius / 3:.6g}" '
                f'pos="{spec.agent_radius:.6g} 0 0" contype="0" conaffinity="0" group="2" mass="0" rgba="{rgba}"/>')
        bodies.append(_movable(f"agent{i}", geom, (spec.slide_damping, spec.hinge_damping)))
    sizes = [(spec.box_size,) * 3] * counts.boxes + [spec.elongated] * counts.elongated
    for j, (sx, sy, sz) in enumerate(sizes):
        geom = (f'<geom name="box{j}" type="box" size="{_vec(sx / 2, sy / 2, sz / 2)}" mass="{spec.box_mass}" '
                f'rgba="0.9 0.75 0.3 1"/>')
        bodies.append(_movable(f"box{j}", geom))
    for k in range(counts.ramps):
        geom = f'<geom name="ramp{k}" type="mesh" mesh="ramp" mass="{spec.ramp_mass}" rgba="0.4 0.8 0.4 1"/>'
        bodies.append(_movable(f"ramp{k}", geom))
    objects = [f"box{j}" for j in range(len(sizes))] + [f"ramp{k}" for k in range(counts.ramps)]
    welds = [f'<weld name="grab{i}_{o}" body1="agent{i}" body2="{o}" active="false"/>'
             for i in range(counts.agents) for o in objects]
    welds += [f'<weld name="lock_{o}" body1="{o}" active="false"/>' for o in objects]
    welds += [f'<weld name="freeze{i}" body1="agent{i}" active="false"/>' for i in range(counts.agents)]
    actuators = "".join(
        f'<motor name="agent{i}_{axis}" joint="agent{i}_{axis}" gear="{gear:.6g}" ctrlrange="-1 1" ctrllimited="true"/>'
        for i in range(counts.agents)
        for axis, gear in (("x", spec.max_force), ("y", spec.max_force), ("yaw", spec.max_torque)))
    return f"""<mujoco model="hide_and_seek">
  <compiler angle="radian"/>
  <option timestep="{spec.timestep}" gravity="0 0 {spec.gravity}"/>
  <visual>
    <global offwidth="640" offheight="640"/><quality shadowsize="1024"/>
    <headlight diffuse="0.35 0.35 0.35" ambient="0.3 0.3 0.3"/>
  </visual>
  <asset>
    <mesh name="ramp" vertex="{_vec(*ramp_mesh(spec).ravel())}"/>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.85 0.85 0.85" rgb2="0.75 0.75 0.75" width="300" height="300"/>
    <material name="floor" texture="grid" texrepeat="{spec.grid.cells // 2} {spec.grid.cells // 2}"/>
  </asset>
  <default>
    <geom friction="{spec.friction} 0.005 0.0001" group="{RAY_GROUP}"/>
    <default class="wall"><geom rgba="0.45 0.45 0.5 1"/></default>
  </default>
  <worldbody>
    <light pos="0 0 8" dir="0.2 0.3 -1" directional="true" diffuse="0.6 0.6 0.6" specular="0.1 0.1 0.1"/>
    <camera name="top" pos="0 0 {1.2 * spec.grid.size:.6g}" xyaxes="1 0 0 0 1 0" fovy="50"/>
    <camera name="angled" pos="0 {-1.05 * spec.grid.size:.6g} {1.1 * spec.grid.size:.6g}"
            xyaxes="1 0 0 0 0.72 0.69" fovy="42"/>
    <geom name="floor" type="plane" size="{half:.6g} {half:.6g} 0.1" material="floor" group="{FLOOR_GROUP}"/>
    {walls}
    {''.join(bodies)}
  </worldbody>
  <equality>{''.join(welds)}</equality>
  <actuator>{actuators}</actuator>
</mujoco>"""


@dataclass
class Handles:
    """Index arrays into the compiled model, so the env never looks names up while stepping."""

    agent_bodies: np.ndarray
    agent_geoms: np.ndarray
    object_bodies: np.ndarray
    object_geoms: np.ndarray
    #: Full sizes of each object [n_objects, 3].
    object_sizes: np.ndarray
    wall_bodies: np.ndarray
    wall_geoms: np.ndarray
    #: Equality ids: grab[i, j] welds agent i to object j; lock[j] object j to the world;
    #: freeze[i] agent i to the world.
    grab: np.ndarray
    lock: np.ndarray
    freeze: np.ndarray
    #: Body id owning each geom (for rays' hit geoms).
    geom_body: np.ndarray


def build(spec: WorldSpec, counts: Counts) -> tuple[mujoco.MjModel, Handles]:
    """Compile the world and resolve every index the env uses."""
    model = mujoco.MjModel.from_xml_string(mjcf(spec, counts))
    body = lambda name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)  # noqa: E731
    geom = lambda name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)  # noqa: E731
    eq = lambda name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_EQUALITY, name)  # noqa: E731
    objects = [f"box{j}" for j in range(counts.boxes + counts.elongated)] + [f"ramp{k}" for k in range(counts.ramps)]
    length, width, height = spec.ramp_size
    sizes = ([(spec.box_size,) * 3] * counts.boxes + [spec.elongated] * counts.elongated
             + [(length, width, height)] * counts.ramps)
    ids = lambda f, names: np.array([f(n) for n in names], np.int64)  # noqa: E731
    handles = Handles(
        agent_bodies=ids(body, [f"agent{i}" for i in range(counts.agents)]),
        agent_geoms=ids(geom, [f"agent{i}" for i in range(counts.agents)]),
        object_bodies=ids(body, objects),
        object_geoms=ids(geom, objects),
        object_sizes=np.array(sizes, np.float64).reshape(-1, 3),
        wall_bodies=ids(body, [f"wall{i}" for i in range(spec.wall_pool)]),
        wall_geoms=ids(geom, [f"wall{i}" for i in range(spec.wall_pool)]),
        grab=ids(eq, [f"grab{i}_{o}" for i in range(counts.agents) for o in objects]).reshape(counts.agents, len(objects)),
        lock=ids(eq, [f"lock_{o}" for o in objects]),
        freeze=ids(eq, [f"freeze{i}" for i in range(counts.agents)]),
        geom_body=model.geom_bodyid.astype(np.int64),
    )
    return model, handles


def weld_relpose(data: mujoco.MjData, body1: int, body2: int) -> np.ndarray:
    """The weld parameters [anchor 3, relpose 7] that hold body2 where it is now relative to body1.

    The relative pose is body2's pose in body1's frame (position then quaternion), taken
    from the current state: activating the weld then changes nothing at that instant,
    so a grabbed object does not jump towards a stale reference pose.
    """
    inverse = np.empty(4)
    mujoco.mju_negQuat(inverse, data.xquat[body1])
    out = np.zeros(10)
    mujoco.mju_rotVecQuat(out[3:6], data.xpos[body2] - data.xpos[body1], inverse)
    mujoco.mju_mulQuat(out[6:10], inverse, data.xquat[body2])
    return out
