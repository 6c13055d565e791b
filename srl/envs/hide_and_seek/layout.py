"""World generation on a square placement grid: walls, rooms, doors, object placement.

Pure numpy, no simulator: a `Layout` says where every wall segment and every object goes,
and the env moves the bodies of its one compiled model there. Walls occupy whole grid
cells (the border ring plus straight inner lines), so the free cells are exactly where an
object's footprint may go; placement samples uniformly among the footprints that fit
(an integral image gives every fitting position at once, so no rejection loop can spin).

Rooms: 1 (open floor), 2 (one wall across), 3 (one wall across and a second from it to
the outer wall on one side) or 4 (two crossing walls). Every straight wall run between
junctions gets one door of `door_cells` cells, so all rooms connect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Axis-aligned footprints are placed at yaw 0 or 90 degrees (ramps: 0, 90, 180 or 270).
QUARTER_TURNS = np.array([0.0, 0.5, 1.0, 1.5]) * np.pi


@dataclass(frozen=True)
class Grid:
    """The placement grid: `cells` x `cells` cells covering a `size` x `size` m floor centred at 0."""

    size: float = 6.0
    cells: int = 30

    @property
    def cell(self) -> float:
        return self.size / self.cells

    def centre(self, start: np.ndarray, extent: np.ndarray) -> np.ndarray:
        """World x/y of the centre of a cell rectangle (start and extent in cells, shape [..., 2])."""
        return (np.asarray(start) + np.asarray(extent) / 2.0) * self.cell - self.size / 2.0

    def cells_for(self, length: float) -> int:
        """How many cells a length covers (rounded up, at least one)."""
        return max(1, int(np.ceil(length / self.cell - 1e-9)))


@dataclass
class Layout:
    """One episode's world: inner wall segments and object poses."""

    #: Inner wall segments as cell rectangles [k, 4]: start x, start y, extent x, extent y.
    walls: np.ndarray
    #: Free cells after walls and every placed object [cells, cells] (x index first).
    free: np.ndarray
    #: Object poses [n, 3]: x, y, yaw; in the order the footprints were asked for.
    poses: np.ndarray
    n_rooms: int


def wall_lines(rng: np.random.Generator, grid: Grid, n_rooms: int, door_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The wall cells of a random room layout and its straight inner runs.

    Returns the wall mask [cells, cells] (border included) and the inner segments [k, 4]
    (start x, start y, extent x, extent y) that cover the inner wall cells.
    """
    n = grid.cells
    wall = np.zeros((n, n), bool)
    wall[[0, -1], :] = True
    wall[:, [0, -1]] = True
    lo, hi = n // 4 + 1, n - n // 4 - 2  # keep every room at least a quarter of the floor wide
    # A wall line: (axis, index, first, last): axis 0 is a wall of constant x index.
    lines: list[tuple[int, int, int, int]] = []
    arms: list[tuple[int, int, int, int]] = []  # runs between junctions, one door each
    if n_rooms >= 2:
        axis, p = int(rng.integers(2)), int(rng.integers(lo, hi + 1))
        lines.append((axis, p, 1, n - 2))
        if n_rooms == 2:
            arms.append((axis, p, 1, n - 2))
        else:
            q = int(rng.integers(lo, hi + 1))
            arms += [(axis, p, 1, q - 1), (axis, p, q + 1, n - 2)]
            if n_rooms == 3:
                first, last = (1, p - 1) if rng.integers(2) == 0 else (p + 1, n - 2)
                lines.append((1 - axis, q, first, last))
                arms.append((1 - axis, q, first, last))
            else:
                lines.append((1 - axis, q, 1, n - 2))
                arms += [(1 - axis, q, 1, p - 1), (1 - axis, q, p + 1, n - 2)]
    line_cells = np.zeros((n, n), bool)
    for axis, p, first, last in lines:
        _cells(line_cells, axis, p, first, last)[...] = True
    for axis, p, first, last in arms:
        start = int(rng.integers(first + 1, last - door_cells + 1))
        _cells(line_cells, axis, p, start, start + door_cells - 1)[...] = False
    wall |= line_cells
    segments = []
    for axis, p, first, last in lines:
        run = _cells(line_cells, axis, p, first, last)
        for a, b in _runs(run):
            start = (p, first + a) if axis == 0 else (first + a, p)
            extent = (1, b - a) if axis == 0 else (b - a, 1)
            segments.append((*start, *extent))
    return wall, np.array(segments, np.int64).reshape(-1, 4)


def _cells(mask: np.ndarray, axis: int, p: int, first: int, last: int) -> np.ndarray:
    """A view of one wall line's cells first..last (inclusive)."""
    return mask[p, first:last + 1] if axis == 0 else mask[first:last + 1, p]


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Half-open [start, end) index ranges of the True runs of a 1-d bool array."""
    padded = np.concatenate([[False], values, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def place(rng: np.random.Generator, free: np.ndarray, extent: tuple[int, int]) -> np.ndarray | None:
    """Pick a uniformly random start cell whose extent-sized rectangle is all free, and occupy it.

    Returns the start cell (x, y), or None when nothing fits.
    """
    ex, ey = extent
    blocked = np.pad((~free).astype(np.int32), ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    # Blocked cells inside each ex x ey window, for every window start at once.
    inside = blocked[ex:, ey:] - blocked[:-ex, ey:] - blocked[ex:, :-ey] + blocked[:-ex, :-ey]
    fits = np.flatnonzero(inside == 0)
    if fits.size == 0:
        return None
    x, y = np.unravel_index(fits[rng.integers(fits.size)], inside.shape)
    free[x:x + ex, y:y + ey] = False
    return np.array([x, y])


def generate(rng: np.random.Generator, grid: Grid, footprints: list[tuple[float, float, bool]],
             n_rooms: int | None = None, door_cells: int = 2, max_tries: int = 20) -> Layout:
    """Walls plus a pose for every object footprint.

    `footprints` holds (length, width, turns) per object: `turns=False` means any yaw
    (the footprint is the object's bounding square), `True` means a quarter turn (the
    footprint is axis aligned, length along x at yaw 0). Rooms are redrawn when the
    objects do not fit.
    """
    for _ in range(max_tries):
        rooms = int(rng.integers(1, 5)) if n_rooms is None else n_rooms
        wall, segments = wall_lines(rng, grid, rooms, door_cells)
        free = ~wall
        poses = np.zeros((len(footprints), 3))
        for i, (length, width, turns) in enumerate(footprints):
            if turns:
                yaw = QUARTER_TURNS[rng.integers(4)]
                along_x = int(round(yaw / (np.pi / 2))) % 2 == 0
                extent = (grid.cells_for(length), grid.cells_for(width))
                extent = extent if along_x else extent[::-1]
            else:
                yaw = rng.uniform(-np.pi, np.pi)
                side = grid.cells_for(float(np.hypot(length, width)))
                extent = (side, side)
            start = place(rng, free, extent)
            if start is None:
                break
            poses[i, :2], poses[i, 2] = grid.centre(start, np.array(extent)), yaw
        else:
            return Layout(segments, free, poses, rooms)
    raise RuntimeError(f"could not place {len(footprints)} objects on the {grid.cells}x{grid.cells} grid "
                       f"in {max_tries} layouts; use fewer or smaller objects")
