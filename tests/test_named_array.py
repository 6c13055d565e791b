"""Unit tests for srl.data.named_array."""

from __future__ import annotations

import numpy as np
import pytest

from srl.data.named_array import NamedArray, concat, stack


def make(n: int = 5, offset: float = 0.0) -> NamedArray:
    return NamedArray({
        "obs": {"image": np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2) + offset,
                "vec": np.arange(n * 3, dtype=np.float64).reshape(n, 3) + offset},
        "action": np.arange(n, dtype=np.int64) + int(offset),
    })


def test_nested_set_and_get_by_path():
    a = NamedArray()
    a["obs/image"] = np.zeros((2, 3))
    a["obs/deep/x"] = [1, 2]
    assert isinstance(a["obs"], NamedArray)
    assert isinstance(a["obs"]["deep"], NamedArray)
    assert a["obs"]["image"] is a["obs/image"]
    np.testing.assert_array_equal(a["obs/deep/x"], [1, 2])
    assert isinstance(a["obs/deep/x"], np.ndarray)
    assert a.paths() == ["obs/image", "obs/deep/x"]
    assert a.get_path("obs/image").shape == (2, 3)


def test_plain_dicts_become_named_arrays():
    a = NamedArray({"obs": {"x": [1.0, 2.0]}}, reward=np.zeros(2))
    assert isinstance(a["obs"], NamedArray)
    assert set(a.paths()) == {"obs/x", "reward"}


def test_slicing_and_indexing_apply_to_every_leaf():
    a = make()
    s = a[1:4]
    assert isinstance(s, NamedArray)
    assert s["obs/image"].shape == (3, 2, 2)
    assert s["obs/vec"].shape == (3, 3)
    assert s["action"].shape == (3,)
    np.testing.assert_array_equal(s["action"], [1, 2, 3])

    row = a[2]
    np.testing.assert_array_equal(row["obs/vec"], a["obs/vec"][2])
    assert row["action"] == 2

    picked = a[np.array([4, 0])]
    np.testing.assert_array_equal(picked["action"], [4, 0])
    np.testing.assert_array_equal(picked["obs/image"], a["obs/image"][[4, 0]])

    masked = a[a["action"] % 2 == 0]
    np.testing.assert_array_equal(masked["action"], [0, 2, 4])

    obs = a["obs"]  # leaves are all >= 2-d: a tuple index applies to each
    tup = obs[1:3, 0]
    np.testing.assert_array_equal(tup["vec"], a["obs/vec"][1:3, 0])
    np.testing.assert_array_equal(tup["image"], a["obs/image"][1:3, 0])


def test_slice_is_a_view_and_writes_through():
    a = make()
    s = a[1:3]
    s["action"][:] = 99
    np.testing.assert_array_equal(a["action"], [0, 99, 99, 3, 4])


def test_index_assignment_writes_through_to_all_leaves():
    a = make(4)
    b = make(2, offset=100.0)
    a[1:3] = b
    np.testing.assert_array_equal(a["obs/image"][1:3], b["obs/image"])
    np.testing.assert_array_equal(a["obs/vec"][1:3], b["obs/vec"])
    np.testing.assert_array_equal(a["action"], [0, 100, 101, 3])

    a[0] = 0  # a scalar goes to every leaf
    assert (a["obs/image"][0] == 0).all() and (a["obs/vec"][0] == 0).all() and a["action"][0] == 0

    # Through a view: writing into a slice reaches the parent.
    a[2:4][0] = b[1]
    np.testing.assert_array_equal(a["obs/vec"][2], b["obs/vec"][1])


def test_stack():
    parts = [make(3, offset=float(i)) for i in range(4)]
    s = stack(parts)
    assert s.shape == (4, 3)
    assert s["obs/image"].shape == (4, 3, 2, 2)
    for i in range(4):
        np.testing.assert_array_equal(s["obs/vec"][i], parts[i]["obs/vec"])
    s1 = stack(parts, axis=1)
    assert s1["action"].shape == (3, 4)


def test_concat():
    a, b = make(2), make(3, offset=10.0)
    c = concat([a, b])
    assert c.shape[0] == 5
    np.testing.assert_array_equal(c["action"], [0, 1, 10, 11, 12])
    np.testing.assert_array_equal(c["obs/image"][2:], b["obs/image"])
    assert c.paths() == a.paths()


def test_concat_and_stack_reject_mismatched_fields():
    a = make(2)
    b = make(2)
    b["extra"] = np.zeros(2)
    with pytest.raises(ValueError, match="different fields"):
        concat([a, b])
    c = NamedArray({"obs": {"image": np.zeros((2, 2, 2))}, "action": np.zeros(2)})
    with pytest.raises(ValueError):
        stack([a, c])
    with pytest.raises(ValueError):
        concat([])


def test_map_keeps_structure():
    a = make(3)
    m = a.map(lambda x: x * 2)
    assert m.paths() == a.paths()
    assert isinstance(m["obs"], NamedArray)
    np.testing.assert_array_equal(m["obs/vec"], a["obs/vec"] * 2)
    np.testing.assert_array_equal(m["action"], a["action"] * 2)
    # map creates a new tree; the original is untouched
    np.testing.assert_array_equal(a["action"], [0, 1, 2])


def test_copy_is_independent():
    a = make(3)
    c = a.copy()
    c["action"][0] = 42
    c["obs/image"][:] = -1
    assert a["action"][0] == 0
    assert (a["obs/image"] >= 0).all()
    # and the copy of a view does not alias the parent either
    v = a[0:2].copy()
    v["obs/vec"][:] = 7
    assert not (a["obs/vec"][:2] == 7).any()
    # adding a field to the copy does not add it to the original
    c["obs/new"] = np.zeros(3)
    assert "new" not in a["obs"]


def test_shape_is_common_leading_shape():
    a = make(5)
    assert a.shape == (5,)
    assert len(a) == 5
    b = NamedArray({"x": np.zeros((4, 3, 2)), "y": np.zeros((4, 3))})
    assert b.shape == (4, 3)
    only = NamedArray({"x": np.zeros((2, 7))})
    assert only.shape == (2, 7)
    assert NamedArray().shape == ()
    with pytest.raises(TypeError):
        len(NamedArray({"x": np.zeros((3,)), "y": np.zeros((4,))}))
    assert make(5).nbytes == sum(leaf.nbytes for _, leaf in make(5).items_flat())


def test_items_flat_from_flat_round_trip():
    a = make(3)
    flat = list(a.items_flat())
    assert [p for p, _ in flat] == ["obs/image", "obs/vec", "action"]
    b = NamedArray.from_flat(flat)
    assert b.paths() == a.paths()
    for (p1, l1), (p2, l2) in zip(a.items_flat(), b.items_flat()):
        assert p1 == p2
        np.testing.assert_array_equal(l1, l2)
        assert l1.dtype == l2.dtype
    c = NamedArray.from_flat(dict(flat))
    assert c.paths() == a.paths()
    assert isinstance(c["obs"], NamedArray)
