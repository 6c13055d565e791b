"""Tool-use statistics of one hide-and-seek episode: the measures that tell its phases apart.

OpenAI marked the phases of "Emergent Tool Use From Multi-Agent Autocurricula" by how far
boxes and ramps moved from where they started and how many were locked, at the end of the
preparation phase and at the end of the episode. This module keeps those, and adds who
pressed lock, how often a seeker stood on a ramp or a box, and how often a seeker saw a
hider. The env feeds it; its `result()` is the episode's `info["episode_stats"]`:

    tool_use.start(object_pos, active)              # reset
    tool_use.locked(by_seeker)                      # a lock press that locked an object
    tool_use.prep_over(object_pos, locked)          # the step the preparation phase ends
    tool_use.seeking_step(qpos, seen)               # every step after it
    stats = tool_use.result(object_pos, locked)     # the episode's last step

A seeker stands on an object when its centre is off the floor (LIFT above its resting
height) and above the object's footprint: pushing a box or a ramp from the side does not
count, and neither does a seeker on a wall. Geometry rather than MuJoCo's contacts, which
flicker while a sphere runs up a slope. Only lifted seekers are looked at, so a step where
every seeker is on the floor costs one comparison.
"""

from __future__ import annotations

import numpy as np

#: A seeker whose centre is this far above its resting height is off the floor (m): a
#: sphere of radius 0.15 that has rolled 10 cm up a ramp of the default slope.
LIFT = 0.05


class ToolUse:
    """Accumulates one episode's statistics; see the module docstring for the calls.

    Bodies are rows of `qpos.reshape(-1, 4)` ([x, y, z, yaw]): agents, then the objects.
    `object_sizes` [objects, 3] are full extents along the object's own axes (a footprint
    centred on its position), `is_ramp[j]` says whether object j is a ramp (else a box),
    `seeker_rows` are the seekers' rows, `agent_radius` their resting height.
    """

    def __init__(self, object_sizes: np.ndarray, is_ramp: np.ndarray, seeker_rows: np.ndarray,
                 agent_radius: float) -> None:
        self.is_ramp = np.asarray(is_ramp, bool)
        self._half = np.asarray(object_sizes, np.float64)[:, :2] / 2
        self._seeker_rows = np.asarray(seeker_rows)
        self._seeker_z = 4 * self._seeker_rows + 2  # indices into the flat qpos
        self._lifted = agent_radius + LIFT
        self.start(np.zeros((len(self.is_ramp), 3)), np.zeros(len(self.is_ramp), bool))

    def start(self, object_pos: np.ndarray, active: np.ndarray) -> None:
        """A new episode: objects at `object_pos` [objects, 3]; `active` marks the ones in play."""
        self.origin = np.array(object_pos, np.float64)
        self.boxes = np.flatnonzero(active & ~self.is_ramp)
        self.ramps = np.flatnonzero(active & self.is_ramp)
        self.locks_by_hiders = self.locks_by_seekers = 0
        self.seeking_steps = self.seen_steps = self.on_box_steps = self.on_ramp_steps = 0
        self.prep: dict[str, float] = {}

    def placed(self, object_pos: np.ndarray) -> None:
        """Objects were put somewhere by hand (a scripted scene): they move from there."""
        self.origin = np.array(object_pos, np.float64)

    def locked(self, by_seeker: bool) -> None:
        """A lock press locked an object."""
        if by_seeker:
            self.locks_by_seekers += 1
        else:
            self.locks_by_hiders += 1

    def prep_over(self, object_pos: np.ndarray, locked: np.ndarray) -> None:
        """Movement and locks (`locked`: per object) at the end of the preparation phase: what the hiders did alone."""
        moved = np.linalg.norm(object_pos - self.origin, axis=1)
        self.prep = {}
        if self.boxes.size:
            self.prep["box_move_prep_max_m"] = float(moved[self.boxes].max())
            self.prep["box_locked_prep"] = float(locked[self.boxes].sum())
        if self.ramps.size:
            self.prep["ramp_move_prep_max_m"] = float(moved[self.ramps].max())
            self.prep["ramp_locked_prep"] = float(locked[self.ramps].sum())

    def seeking_step(self, qpos: np.ndarray, seen: bool) -> None:
        """One step after the preparation phase (`qpos`: MuJoCo's, flat): did a seeker see a
        hider, stand on a box, stand on a ramp."""
        self.seeking_steps += 1
        self.seen_steps += seen
        lifted = qpos[self._seeker_z] > self._lifted
        if lifted.any():
            on = self._under(qpos.reshape(-1, 4), self._seeker_rows[lifted])
            self.on_box_steps += bool(on[self.boxes].any())
            self.on_ramp_steps += bool(on[self.ramps].any())

    def _under(self, bodies: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per object: whether the centre of any of these agents is above its footprint."""
        objects = bodies[-len(self.is_ramp):]
        offset = bodies[rows, None, :2] - objects[None, :, :2]  # [agents, objects, 2]
        cos, sin = np.cos(objects[:, 3]), np.sin(objects[:, 3])
        along = offset[..., 0] * cos + offset[..., 1] * sin  # in the object's own frame
        across = offset[..., 1] * cos - offset[..., 0] * sin
        inside = (np.abs(along) <= self._half[:, 0]) & (np.abs(across) <= self._half[:, 1])
        return inside.any(axis=0)

    def result(self, object_pos: np.ndarray, locked: np.ndarray) -> dict[str, float]:
        """The episode's statistics (`locked`: per object, now); those of a kind of object the episode lacks are left out."""
        moved = np.linalg.norm(object_pos - self.origin, axis=1)
        seeking = max(self.seeking_steps, 1)
        out: dict[str, float] = {}
        if self.boxes.size:
            out.update(box_move_max_m=float(moved[self.boxes].max()), box_move_mean_m=float(moved[self.boxes].mean()),
                       box_locked=float(locked[self.boxes].sum()), seeker_on_box_frac=self.on_box_steps / seeking)
        if self.ramps.size:
            out.update(ramp_move_max_m=float(moved[self.ramps].max()), ramp_move_mean_m=float(moved[self.ramps].mean()),
                       ramp_locked=float(locked[self.ramps].sum()), seeker_on_ramp_frac=self.on_ramp_steps / seeking)
        out.update(self.prep)
        out.update(locks_by_hiders=float(self.locks_by_hiders), locks_by_seekers=float(self.locks_by_seekers),
                   hider_seen_frac=self.seen_steps / seeking)
        return out
