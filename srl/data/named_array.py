"""NamedArray: a nested dict of numpy arrays that indexes, stacks and concatenates as one.

Every leaf shares the leading dimensions, so `batch[3:7]` slices every field and
`batch["obs"]["image"]` reaches one leaf. Paths flatten to "obs/image" for the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

SEP = "/"

Leaf = np.ndarray
Tree = Mapping[str, Any]


class NamedArray(dict):
    """A dict of `np.ndarray` or nested `NamedArray` with array-like indexing.

    String keys reach fields; anything else (int, slice, index array, tuple) is applied
    to every leaf. Mutating a slice writes through to the parent's memory, like numpy.
    """

    def __init__(self, fields: Tree | None = None, /, **kwargs: Any) -> None:
        super().__init__()
        for key, value in {**(fields or {}), **kwargs}.items():
            self[key] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, str):
            if SEP in key:
                head, rest = key.split(SEP, 1)
                self.setdefault(head, NamedArray())[rest] = value
                return
            if isinstance(value, Mapping) and not isinstance(value, NamedArray):
                value = NamedArray(value)
            elif not isinstance(value, NamedArray):
                value = np.asarray(value)
            super().__setitem__(key, value)
            return
        # Index assignment: write `value` (a NamedArray of matching fields) into every leaf.
        for path, leaf in self.items_flat():
            leaf[key] = value.get_path(path) if isinstance(value, NamedArray) else value

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if SEP in key:
                head, rest = key.split(SEP, 1)
                return super().__getitem__(head)[rest]
            return super().__getitem__(key)
        return self.map(lambda leaf: leaf[key])

    def get_path(self, path: str) -> np.ndarray:
        return self[path]

    # ------------------------------------------------------------------ structure
    def items_flat(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """Yield (path, leaf) pairs in a stable (insertion) order."""
        for key, value in dict.items(self):
            path = f"{prefix}{key}"
            if isinstance(value, NamedArray):
                yield from value.items_flat(path + SEP)
            else:
                yield path, value

    def paths(self) -> list[str]:
        return [path for path, _ in self.items_flat()]

    @classmethod
    def from_flat(cls, pairs: Sequence[tuple[str, np.ndarray]] | Mapping[str, np.ndarray]) -> NamedArray:
        out = cls()
        for path, leaf in pairs.items() if isinstance(pairs, Mapping) else pairs:
            out[path] = leaf
        return out

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> NamedArray:
        """Apply `fn` to every leaf, keeping the structure."""
        out = NamedArray()
        for key, value in dict.items(self):
            dict.__setitem__(out, key, value.map(fn) if isinstance(value, NamedArray) else fn(value))
        return out

    @property
    def shape(self) -> tuple[int, ...]:
        """The leading shape shared by all leaves (the shape of the first leaf if only one)."""
        shapes = [leaf.shape for _, leaf in self.items_flat()]
        if not shapes:
            return ()
        common = shapes[0]
        for s in shapes[1:]:
            n = 0
            while n < min(len(common), len(s)) and common[n] == s[n]:
                n += 1
            common = common[:n]
        return tuple(common)

    def __len__(self) -> int:  # type: ignore[override]
        shape = self.shape
        if not shape:
            raise TypeError("NamedArray has no common leading dimension")
        return shape[0]

    @property
    def nbytes(self) -> int:
        return sum(leaf.nbytes for _, leaf in self.items_flat())

    def copy(self) -> NamedArray:
        return self.map(np.array)

    def __repr__(self) -> str:
        fields = ", ".join(f"{p}: {leaf.dtype}{list(leaf.shape)}" for p, leaf in self.items_flat())
        return f"NamedArray({fields})"


def _combine(arrays: Sequence[NamedArray], fn: Callable[[list[np.ndarray]], np.ndarray]) -> NamedArray:
    if not arrays:
        raise ValueError("cannot combine an empty list of NamedArrays")
    first = arrays[0]
    paths = first.paths()
    for other in arrays[1:]:
        if other.paths() != paths:
            raise ValueError(f"NamedArrays have different fields: {paths} vs {other.paths()}")
    return NamedArray.from_flat([(p, fn([a.get_path(p) for a in arrays])) for p in paths])


def stack(arrays: Sequence[NamedArray], axis: int = 0) -> NamedArray:
    """Stack NamedArrays of identical structure along a new axis."""
    return _combine(arrays, lambda leaves: np.stack(leaves, axis=axis))


def concat(arrays: Sequence[NamedArray], axis: int = 0) -> NamedArray:
    """Concatenate NamedArrays of identical structure along an existing axis."""
    return _combine(arrays, lambda leaves: np.concatenate(leaves, axis=axis))


def zeros_like_spec(spec: Mapping[str, tuple[tuple[int, ...], np.dtype]], lead: tuple[int, ...]) -> NamedArray:
    """Allocate a NamedArray from {path: (shape, dtype)} with leading dimensions `lead`."""
    return NamedArray.from_flat([(p, np.zeros(lead + tuple(shape), dtype)) for p, (shape, dtype) in spec.items()])
